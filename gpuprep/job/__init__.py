"""A training job's side: why its GPUs are under-used. Readers (traces: reader.py) do I/O only; metrics.py turns
one rank's events into typed facts (facts.py) with HTA's definitions; judge.py holds the pure job rules."""
from __future__ import annotations

import os
from typing import List

from .facts import JobFacts, RankFacts

MAX_WORKERS = 8


def _rank(path: str) -> RankFacts:
    """One trace read streaming into one rank's facts (in a worker process when there are several)."""
    from .metrics import ClockError, RankEvents, rank_facts
    from .reader import TraceError, read_trace
    events = RankEvents()
    try:
        return rank_facts(read_trace(path, events.add), events)
    except ClockError as exc:
        raise TraceError(f"{path}: event {exc}") from None


def diagnose_traces(paths: List[str]) -> JobFacts:
    """Each trace file (a directory: the traces in it, one per rank) read into one rank's facts, the ranks in
    parallel across the machine's cores (one trace's events in memory per worker)."""
    from .flight import looks_like_dump, read_dump
    from .ras import looks_like_report
    from .reader import trace_files
    files, dumps, reports = [], [], []
    for path in trace_files(list(paths)):
        kind = dumps if _head(path, looks_like_dump) else reports if _head(path, looks_like_report) else files
        kind.append(path)
    collectives = sorted((read_dump(path) for path in dumps), key=lambda c: c.rank)
    ras = _ras_report(reports)
    ranks = _read_ranks(files, min(len(files), _cores(), MAX_WORKERS))
    ranks.sort(key=lambda r: (r.rank is None, r.rank if r.rank is not None else 0, r.source))
    return JobFacts(ranks, collectives, ras)


def _read_ranks(files: List[str], workers: int) -> List[RankFacts]:
    """Each file's rank, read by `workers` processes: this one and forked children. The children take files from
    the front of the list and this process from the back, so they meet where the work ends (a process fewer than a
    pool of `workers`: one interpreter's memory less)."""
    if workers <= 1:
        return [_rank(path) for path in files]
    import gc
    import multiprocessing
    from concurrent.futures import ProcessPoolExecutor
    # forked children share what this process holds until they write it; frozen objects are never touched by a
    # child's garbage collector, so their pages stay shared (8 MiB less over 8 ranks, in PSS)
    gc.freeze()
    try:
        with ProcessPoolExecutor(workers - 1, mp_context=multiprocessing.get_context("fork")) as pool:
            futures = [pool.submit(_rank, path) for path in files]
            try:
                mine = {k: _rank(files[k]) for k in reversed(range(len(files))) if futures[k].cancel()}
                return [mine[k] if k in mine else futures[k].result() for k in range(len(files))]
            except BaseException:
                pool.shutdown(cancel_futures=True)      # a bad rank: say so now, not after reading the rest
                raise
    finally:
        gc.unfreeze()


def _cores() -> int:
    """The cores this process may run on (its affinity, which a container or taskset narrows), not the machine's."""
    try:
        return len(os.sched_getaffinity(0)) or 1
    except (AttributeError, OSError):
        return os.cpu_count() or 1


def _ras_report(paths: List[str]):
    """The RAS report saved from `ncclras` (one per job: the last given), or None."""
    from ..errors import BadInput
    from .ras import MAX_REPORT, parse
    if not paths:
        return None
    with open(paths[-1], "rb") as fh:
        text = fh.read(MAX_REPORT).decode("utf-8", "replace")
    try:
        return parse(text)
    except BadInput as exc:
        raise BadInput(f"{paths[-1]}: {exc}") from None


def _head(path: str, test) -> bool:
    """`test` of the file's first bytes (a regular file's; anything else is the trace reader's to refuse)."""
    import stat
    try:
        if not stat.S_ISREG(os.stat(path).st_mode):
            return False
        with open(path, "rb") as fh:
            return test(fh.read(4096))
    except OSError:
        return False
