"""The job's rules across its ranks and nodes: what the ranks' collectives, as each rank's flight recorder kept them,
say of a job that stopped. Pure: the facts in, findings out. A rank that never entered the collective the others
are in is named with the collective; ranks in the same collective with different operations are a desync."""
from __future__ import annotations

from typing import Dict, List

from ..rules import Finding
from .judge import Job, job_rule


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
