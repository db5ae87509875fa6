"""The job's rules across its ranks and nodes: what the ranks' collectives, as each rank's flight recorder kept them,
say of a job that stopped. Pure: the facts in, findings out. A rank that never entered the collective the others
are in is named with the collective; ranks in the same collective with different operations are a desync."""
from __future__ import annotations

from typing import Dict, List, Optional

from ...rules import Finding
from ..judge import Job, _median, _watched, job_rule, limit


def _groups(job: Job) -> Dict[str, Dict[int, object]]:
    """process group -> rank -> that rank's GroupState."""
    out: Dict[str, Dict[int, object]] = {}
    for dump in job.facts.collectives:
        for uid, state in dump.groups.items():
            out.setdefault(uid, {})[dump.rank] = state
    return out


@job_rule("job.collective-missing")
def collective_missing(job: Job) -> List[Finding]:
    """Within each process group: the collective the furthest ranks entered, and the ranks that never entered it
    (their last sequence number is below it). Pending or timed out, the sequence numbers tell the same."""
    out = []
    for uid, states in sorted(_groups(job).items()):
        if len(states) < 2:
            continue
        ahead = max(s.last_seq for s in states.values())
        behind = sorted(r for r, s in states.items() if s.last_seq < ahead)
        if not behind:
            continue
        waiting = sorted(r for r, s in states.items() if s.last_seq == ahead)
        op = next(s.ops.get(ahead) for r, s in states.items() if r in waiting)
        for rank in behind:
            state = states[rank]
            out.append(Finding("job.collective-missing", "fail", f"rank {rank}",
                               f"rank {rank} never entered collective {ahead} ({op}) of process group {uid}, which "
                               f"rank(s) {', '.join(map(str, waiting))} entered: it stopped after collective "
                               f"{state.last_seq}", {"process_group": uid, "collective": ahead, "op": op,
                                                     "last_entered": state.last_seq, "entered_by": waiting,
                                                     "never_entered_by": behind},
                               "Look at where that rank stopped (py-spy dump --pid PID of it, or its last log lines): "
                               "its own work (a data or checkpoint stall, an exception caught and ignored) or its "
                               "node (`gpuprep check` there: Xids, NIC, GPU)",
                               "PyTorch flight recorder (collective_seq_id per process group)"))
    return out


@job_rule("job.desync")
def desync(job: Job) -> List[Finding]:
    """Ranks in the same collective of a group, by sequence number, with different operations or sizes: they called
    different collectives in the same place (a rank skipped or added one)."""
    out = []
    for uid, states in sorted(_groups(job).items()):
        shared = set.intersection(*(set(s.ops) for s in states.values())) if len(states) > 1 else set()
        for seq in sorted(shared):
            ops = {r: s.ops[seq] for r, s in states.items()}
            if len(set(ops.values())) > 1:
                out.append(Finding("job.desync", "fail", "job", f"Ranks called different collectives as collective "
                                   f"{seq} of process group {uid}: " + "; ".join(f"rank {r} {o}" for r, o in
                                                                                 sorted(ops.items())),
                                   {"process_group": uid, "collective": seq, "ops": {str(r): o for r, o in ops.items()}},
                                   "Every rank must call the same collectives in the same order: look for a branch on "
                                   "the rank, or on data that differs between ranks, around this collective",
                                   "PyTorch flight recorder"))
                break
    return out


def _ras(job: Job):
    """NCCL's RAS report: a saved `ncclras` output given to diagnose, or the node's, read live by watch."""
    return job.facts.ras or (job.watch.ras if job.watch is not None else None)


def _where(rank) -> str:
    parts = [f"GPU {rank.gpu}" if rank.gpu is not None else "", f"process {rank.pid}" if rank.pid else "",
             f"on node {rank.host}" if rank.host else ""]
    return ", ".join(p for p in parts if p)


@job_rule("job.rank-dead")
def rank_dead(job: Job) -> List[Finding]:
    """A rank NCCL's RAS service cannot reach: missing from its communicators (not answering), or dead (60 s
    unreachable). The node it ran on is named, so `gpuprep check` can be run there."""
    report = _ras(job)
    if report is None:
        return []
    out = []
    for rank in report.missing:
        who = f"rank {rank.rank}" if rank.rank is not None else f"process {rank.pid}"
        state = "dead: unreachable through NCCL's RAS network" if rank.dead else "missing from its communicators"
        where = _where(rank)
        out.append(Finding("job.rank-dead", "fail", who, f"{who} ({where}) is {state}" if where else f"{who} is {state}",
                           {"rank": rank.rank, "host": rank.host, "pid": rank.pid, "gpu": rank.gpu, "dead": rank.dead,
                            "nccl": report.version},
                           "Find why it stopped: the process's exit (its log, dmesg for an OOM kill) and its node "
                           f"(`gpuprep check` on {rank.host or 'that node'}: Xids, the GPU, the NIC)",
                           "NCCL RAS (ncclras)"))
    return out


@job_rule("job.ranks-behind")
def ranks_behind(job: Job) -> List[Finding]:
    """Ranks behind the others in collectives launched, as RAS counts them. In a running job the counts drift by
    one now and then: a warning, naming the ranks behind where NCCL lists them, never a failure alone."""
    report = _ras(job)
    if report is None or report.ahead_operations is None:
        return []
    if not report.behind:
        return [Finding("job.ranks-behind", "warn", "job", "Ranks differ in collectives launched: "
                        + "; ".join(report.counts), {"counts": report.counts, "nccl": report.version},
                        "Ask again in a few seconds: a difference that stays while the job makes no progress names "
                        "the ranks that stopped", "NCCL RAS (ncclras)")]
    return [Finding("job.ranks-behind", "warn", f"rank {r.rank}", f"rank {r.rank} ({_where(r)}) has launched "
                    f"{r.operations} collectives, the furthest ranks {report.ahead_operations}",
                    {"rank": r.rank, "host": r.host, "gpu": r.gpu, "operations": r.operations,
                     "furthest": report.ahead_operations, "nccl": report.version},
                    "If the job makes no progress, this rank is the one the others wait for: see where it stopped "
                    "(py-spy dump) and its node (`gpuprep check`)", "NCCL RAS (ncclras)")
            for r in report.behind]


# -- a running job across its nodes (gpuprep watch --job) -------------------------------------------------------

# what watch --job did, said as findings of their own (slurmjob.drain_at_fault): no rule's, ids all the same
ACTION_IDS = frozenset({"job.drained"})
FAILED_STATES = ("FAILED", "NODE_FAIL", "OUT_OF_MEMORY", "BOOT_FAIL", "DEADLINE", "TIMEOUT", "CANCELLED")


def _who(rank) -> str:
    where = f" on {rank.host}" if rank.host else ""
    return f"rank {rank.rank}{where} (pid {rank.pid})" if rank.rank is not None else f"pid {rank.pid}{where}"


def _placed(rank) -> dict:
    return {"rank": rank.rank, "host": rank.host, "pid": rank.pid, "gpu": rank.gpu}


@job_rule("job.rank-dead")
def watch_rank_dead(job: Job) -> List[Finding]:
    """A rank gone while the job was watched: its node's watcher stopped answering; or its process ended while
    other ranks still ran (for longer than a job's ranks take to end one after another); or every rank ended and
    Slurm says the job failed. The one that went first is named: the others' ends (a peer's error) follow."""
    ranks = _watched(job)
    if len(ranks) < 2:
        return []
    lost = [Finding("job.rank-dead", "fail", _who(r), f"{_who(r)}: its node stopped answering (its watcher was "
                    "silent past the limit while the job ran)", {**_placed(r), "node_lost": True},
                    f"Look at the node ({r.host}): is it up, did it reboot, does its slurmd answer (sinfo -R, "
                    "`gpuprep check` there)", "gpuprep watch --job (the node's stream)")
            for r in ranks if r.node_lost and not r.ended]
    return lost + _first_gone(job, ranks)


def _why_dead(job: Job, first, alive, state: str) -> Optional[str]:
    """Why the first rank to end is dead (None: it is not known to be): the others went on without it past the
    grace, or Slurm says the job failed. The ranks of a job that ends go one after another, within a second or so."""
    gone_for = (job.watch.at or first.ended_at) - first.ended_at
    if alive and gone_for >= limit("dead_grace_seconds"):
        return f"while {len(alive)} other rank(s) still run {gone_for:.0f} s later"
    if not alive and state.split(" ")[0] in FAILED_STATES:
        return f"and the job ended {state}"
    return None


def _first_gone(job: Job, ranks) -> List[Finding]:
    ended = sorted((r for r in ranks if r.ended and r.ended_at is not None), key=lambda r: r.ended_at)
    # a job that ended took every rank with it, seen to end or not
    alive = [] if job.watch.job_ended else [r for r in ranks if not r.ended and not r.node_lost]
    state = job.watch.job_state or ""
    if not ended:
        return []
    first = ended[0]
    why = _why_dead(job, first, alive, state)
    if why is None:
        return []
    after = [f"{_who(r)} {r.ended_at - first.ended_at:.2f} s later" for r in ended[1:]]
    return [Finding("job.rank-dead", "fail", _who(first),
                    f"{_who(first)} ended first, {why}" + (f"; then {', '.join(after[:6])}" if after else "") +
                    (f"; it was last seen at {first.sites[-1][1]}" if first.sites and first.sites[-1][1] else ""),
                    {**_placed(first), "ended_at": first.ended_at, "then": after, "job_state": state or None,
                     "still_running": [_who(r) for r in alive]},
                    "Find why that process ended: its own log and exit (an exception, an OOM kill in dmesg, a "
                    f"signal) and its node (`gpuprep check` on {first.host or 'its node'}: Xids, the GPU, the NIC)",
                    "gpuprep watch (each rank's process, looked at 20 times a second)")]


# what on the culprit's node answers "node": a GPU held down by hardware, the node's own check failing
_NODE_SIGNS = ("hw_slowdown", "hw_thermal_slowdown", "hw_power_brake_slowdown", "sw_thermal_slowdown")
# the node's own check's areas that are the node's hardware, driver and fabric: a failure there can slow or stop a
# rank; the software stack's (compat.*) and the OS settings' (sys.*) are the job environment's, not the node's
NODE_AREAS = ("gpu", "driver", "fabric", "net", "topo", "dcgm", "imex")
_CULPRIT_IDS = ("job.rank-dead", "job.hung-rank", "job.desync", "job.straggler", "job.dataloader")
_CODE_WORDS = {"job.dataloader": "its DataLoader starves it (its data, its storage, its workers)",
               "job.straggler": "it does more work than the others (work only it does, or more data)",
               "job.hung-rank": "it stopped in the job's own code before the collective",
               "job.desync": "it called another collective than the others",
               "job.rank-dead": "its process ended (see its log)"}


def _culprits(job: Job) -> List[tuple]:
    """(finding, rank) for each rank another rule named as the one the job waits for or lost."""
    from .live import watch_dataloader, watch_hung, watch_straggler
    found = watch_rank_dead(job) + watch_hung(job) + watch_dataloader(job) + watch_straggler(job)
    by_pid = {(r.host, r.pid): r for r in _watched(job)}
    out, named = [], set()
    for f in found:
        key = (f.evidence.get("host"), f.evidence.get("pid"))
        if f.id in _CULPRIT_IDS and key in by_pid and key not in named:
            named.add(key)
            out.append((f, by_pid[key]))
    return out


def _node_signs(job: Job, rank) -> List[str]:
    """What on the rank's node says the node is at fault: its GPU held by hardware in most samples, its node lost,
    its own check's failures."""
    signs = []
    held = [set(reasons) & set(_NODE_SIGNS) for reasons in rank.throttle_reasons]
    if held and sum(1 for h in held if h) * 2 >= len(held):
        named = sorted(set().union(*held))
        signs.append(f"its GPU {rank.gpu or ''} reports {', '.join(named)} in {sum(1 for h in held if h)} of "
                     f"{len(held)} samples".replace("GPU  ", "GPU "))
    if rank.node_lost:
        signs.append("its node stopped answering")
    contended = _cpu_contended(job, rank)
    if contended:
        signs.append(contended)
    node = (job.watch.nodes or {}).get(rank.host) if job.watch else None
    for problem in (node or {}).get("problems", []):
        if problem["severity"] == "fail" and problem["id"].split(".")[0] in NODE_AREAS:
            signs.append(f"{problem['id']} ({problem['subject']}): {problem['message'][:160]}")
    return signs


def _node_pressure(ranks) -> Optional[float]:
    """A node's CPU pressure over the later half of the watch (its ranks' readings: the same node-wide value)."""
    series = max((r.cpu_pressure_pct for r in ranks), key=len, default=[])
    return _median(series[len(series) // 2:]) if series else None


def _cpu_contended(job: Job, rank) -> Optional[str]:
    """The rank's node is short of CPU while the job's other nodes are not: its CPU pressure (PSI, some avg10) at
    node_cpu_pressure_pct or more, and node_pressure_ratio times the other nodes' median. Judged against the job's
    own other nodes only: they run the same code, so what only this node shows is the node's (another process, a
    smaller cpuset). A loaded host under every node alike, or no other node to compare with, is no sign."""
    by_host: Dict[str, list] = {}
    for r in _watched(job):
        if r.host:
            by_host.setdefault(r.host, []).append(r)
    own = _node_pressure(by_host.get(rank.host, []))
    others = [p for p in (_node_pressure(rs) for host, rs in by_host.items() if host != rank.host) if p is not None]
    if own is None or not others or own < limit("node_cpu_pressure_pct"):
        return None
    usual = _median(others)
    if own < limit("node_pressure_ratio") * usual:
        return None
    return (f"its CPUs are contended: some task waited for a CPU {own:.0f}% of the time there (PSI), against "
            f"{usual:.0f}% on the job's other {len(others)} node(s)")


@job_rule("job.node-or-code")
def node_or_code(job: Job) -> List[Finding]:
    """For each rank the job waits for or lost: is its node at fault (a sign on the node), the job's code (the node
    was judged and shows nothing, its GPU readings too), or not known (the node's facts are missing)?"""
    out = []
    for finding, rank in _culprits(job):
        signs = _node_signs(job, rank)
        node = (job.watch.nodes or {}).get(rank.host) if job.watch else None
        evidence = {**_placed(rank), "culprit": finding.id, "node_signs": signs,
                    "node_checked": bool(node and node.get("judged")), "gpu_samples": len(rank.throttle_reasons)}
        if signs:
            out.append(Finding("job.node-or-code", "fail", rank.host or _who(rank), f"The node is at fault: "
                               f"{_who(rank)} ({finding.id}) runs on {rank.host}, where {'; '.join(signs[:3])}",
                               {**evidence, "fault": "node"}, f"Take {rank.host} out of service and fix it "
                               "(`gpuprep watch --job ... --drain` drains it; `gpuprep check` there names the "
                               "repair); restart the job without it", "gpuprep watch --job: the node's own check "
                               "and NVML"))
        elif node and node.get("judged") and rank.throttle_reasons and finding.id != "job.rank-dead" and \
                not finding.evidence.get("stopped"):
            out.append(Finding("job.node-or-code", "warn", _who(rank), f"The job's code is at fault: {_who(rank)} "
                               f"({finding.id}) runs on a node that shows nothing wrong (its check and its GPU's "
                               f"readings); {_CODE_WORDS[finding.id]}", {**evidence, "fault": "code"},
                               finding.remedy or "", "gpuprep watch --job: the node's own check and NVML"))
        else:
            out.append(_unknown(finding, rank, node, evidence))
    return out


def _unknown(finding: Finding, rank, node: Optional[dict], evidence: dict) -> Finding:
    """Neither answer has evidence: say what is missing (a process's exit status is its parent's alone: a dead
    rank on a clean node is not known to be the code's)."""
    missing = [what for what, gap in (("the node's own check", not (node and node.get("judged"))),
                                      ("its GPU's readings (NVML)", not rank.throttle_reasons),
                                      ("why its process ended (its exit status: the job's log)",
                                       finding.id == "job.rank-dead"),
                                      ("who stopped its process (state T: a signal or a debugger)",
                                       bool(finding.evidence.get("stopped")))) if gap]
    return Finding("job.node-or-code", "info", _who(rank), f"Whether the node or the code is at fault for "
                   f"{_who(rank)} ({finding.id}) is not known: no sign on its node, and {'; '.join(missing)} not "
                   "known", {**evidence, "fault": "unknown", "missing": missing},
                   f"Read the rank's own log, and run `gpuprep check` on {rank.host or 'its node'}")
