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
