"""A training job's side: why its GPUs are under-used. Readers (traces: reader.py) do I/O only; metrics.py turns
one rank's events into typed facts (facts.py) with HTA's definitions; judge.py holds the pure job rules."""
from __future__ import annotations

from typing import List

from .facts import JobFacts


def diagnose_traces(paths: List[str]) -> JobFacts:
    """Each trace file (a directory: the traces in it, one per rank) read streaming into one rank's facts."""
    from .metrics import ClockError, RankEvents, rank_facts
    from .reader import TraceError, read_trace, trace_files
    ranks = []
    for path in trace_files(paths):
        events = RankEvents()
        try:
            ranks.append(rank_facts(read_trace(path, events.add), events))
        except ClockError as exc:
            raise TraceError(f"{path}: event {exc}") from None
    ranks.sort(key=lambda r: (r.rank is None, r.rank if r.rank is not None else 0, r.source))
    return JobFacts(ranks)
