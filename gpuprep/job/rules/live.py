"""The job rules that read a running job's samples (gpuprep watch): per rank, its main thread's stacks, CPU time,
DataLoader workers and GPU readings, and across the ranks of one host or of all the job's nodes. Pure."""
from __future__ import annotations

import itertools
import math
import statistics
from typing import Dict, List, Optional

from ...parsers.nvsmi import HOLDING_REASONS, POLICY_REASONS, THROTTLE_REASONS
from ...parsers.values import compress_cpulist, expand_cpulist
from ...rules import Finding
from ..facts import WatchRank
from ..judge import REMEDY, Job, _median, _transport_note, _watched, job_rule, limit, source


def _watch_not_judged(job: Job) -> List[Finding]:
    """A watch whose stacks or GPU samples were all lost says what that cost, so its headline is never a bare OK."""
    ranks = _watched(job)
    if not ranks:
        return []
    out = []
    if not any(r.main_thread for r in ranks):
        why = next((n for n in job.watch.notes if "py-spy" in n or "stack" in n), "no stack could be read")
        out.append(Finding("job.not-judged", "info", "job",
                           "No Python stacks: where the main threads wait (DataLoader, host sync, a collective) was not "
                           "judged; worker states, each rank's CPU against the others' and NVML were",
                           {"why": why[:200]}, "Install py-spy beside gpuprep and watch as root or the job's user "
                                               "(or with SYS_PTRACE)"))
    if not any(r.gpu_util_pct for r in ranks):
        out.append(Finding("job.not-judged", "info", "job", "No GPU samples: GPU idleness, clocks, throttling and "
                           "memory were not judged", {}, "Watch on the node, where NVML answers"))
    return out


def _stack(rank: WatchRank, kind: str) -> float:
    return (rank.main_thread or {}).get(kind, 0.0)


def _share_at_least(rank: WatchRank, kind: str) -> float:
    """The main thread's share of stack samples in `kind`, in %, at its one-sided lower bound (Wilson score, z from
    stack_share_z): with few samples it lies far below the share; one sample says little."""
    n = rank.stack_samples
    if not n:
        return 0.0
    share, z = _stack(rank, kind) / 100, limit("stack_share_z")
    centre = share + z * z / (2 * n)
    spread = z * math.sqrt(share * (1 - share) / n + z * z / (4 * n * n))
    return (centre - spread) / (1 + z * z / n) * 100


def _mostly_in(rank: WatchRank, kind: str) -> bool:
    """The main thread is in `kind` in watch_stack_pct of its time or more (its share of stack samples), and more
    often than a healthy loop's chance look there: the share's lower bound clears stack_chance_pct. One sample in
    three at the DataLoader is such a look (a healthy loop is there ~3% of the time); two in three, or 5 in 11 on a
    loaded host, are not."""
    return bool(rank.stack_samples) and _stack(rank, kind) >= limit("watch_stack_pct") and \
        _share_at_least(rank, kind) >= limit("stack_chance_pct")


def _maybe_mostly_in(rank: WatchRank, kind: str) -> bool:
    """The main thread's share of samples in `kind` is at the mark, but not yet beyond a healthy loop's chance look
    there (1 sample of 3): the samples cannot yet tell whether that is where it mostly is. Under the mark (5 of
    20), the best estimate is that it is not."""
    return _stack(rank, kind) >= limit("watch_stack_pct") and not _mostly_in(rank, kind)


def _who_pid(rank: WatchRank) -> str:
    where = f" on {rank.host}" if rank.host else ""
    return f"rank {rank.rank}{where} (pid {rank.pid})" if rank.rank is not None else f"pid {rank.pid}{where}"


def _placed(rank: WatchRank) -> dict:
    """Where a rank ran: what a finding about one rank carries, so the verdict node-or-code can find it."""
    return {"rank": rank.rank, "host": rank.host, "pid": rank.pid, "gpu": rank.gpu}


def _gpu_busy(rank: WatchRank) -> bool:
    """The rank's GPU was busy (median utilisation at the busy mark): a main thread that waits then waits for the
    GPU's work, the steady state of a GPU-bound job, not a cause of idle GPUs."""
    util = _median(rank.gpu_util_pct)
    return util is not None and util >= limit("watch_busy_pct")


def _starved(rank: WatchRank) -> bool:
    """Its main thread waits on the DataLoader most of the time, and its GPU is not busy meanwhile."""
    return _mostly_in(rank, "dataloader") and not _gpu_busy(rank)


@job_rule("job.dataloader")
def watch_dataloader(job: Job) -> List[Finding]:
    out = []
    for r in _watched(job):
        util = _median(r.gpu_util_pct)
        if not _starved(r):
            continue
        kind, words, remedy = _workers(r)
        evidence = {**_placed(r), "main_thread_in_dataloader_pct": _stack(r, "dataloader"),
                    "stack_samples": r.stack_samples,
                    "startup_samples_left_out": r.startup_samples,
                    "gpu_util_median_pct": util, "workers": r.workers, "workers_are": kind,
                    "worker_cpu_median_pct": _median(r.worker_cpu_pct),
                    "workers_running_median_pct": _median(r.worker_running_pct),
                    "workers_on_disk_median_pct": _median(r.worker_disk_wait_pct)}
        out.append(Finding("job.dataloader", "warn", _who_pid(r),
                           f"The input pipeline starves the training step: the main thread waits on the DataLoader "
                           f"in {_stack(r, 'dataloader'):.0f}% of samples" +
                           (f" while the GPU is busy {util:.0f}%" if util is not None else "") + "; " + words,
                           evidence, remedy + "; pin_memory=True with non_blocking=True, persistent_workers=True",
                           source("dataloader_pct")))
    return out


def _workers(rank: WatchRank):
    """(what the DataLoader workers are doing, in a word and in words, and what to do about it), from the state of
    the workers in each sample: on a CPU (R) they compute, in D they wait on a disk, asleep they wait on something
    else (a network read, a lock, the queue to the main process)."""
    running, on_disk = _median(rank.worker_running_pct), _median(rank.worker_disk_wait_pct)
    n = rank.workers
    if not n:
        return ("none", "no worker processes (num_workers=0)",
                "Raise DataLoader(num_workers=...) toward the CPUs near the GPU, with prefetch_factor")
    if on_disk is not None and on_disk >= limit("workers_disk_pct"):
        return ("on-disk", f"its {n} worker(s) wait on the disk in {on_disk:.0f}% of samples",
                "The storage is the bottleneck: stage the data set on local NVMe, read larger sequential shards "
                "(WebDataset, or fewer larger files), and raise prefetch_factor")
    if running is not None and running >= limit("workers_running_pct"):
        return ("computing", f"its {n} worker(s) compute all the time ({running:.0f}% of them on a CPU)",
                "The workers are CPU-bound: add workers while the CPUs near the GPU have room, or make each sample "
                "cheaper (decode and augment on the GPU: NVIDIA DALI, torchvision.io.decode_jpeg(device='cuda'))")
    if running is not None:
        return ("waiting", f"its {n} worker(s) mostly wait ({running:.0f}% of them on a CPU): each sample waits on "
                "something slow (a network or object-store read, a lock)",
                "More workers and a larger prefetch_factor hide the latency; read in larger batches from remote "
                "storage, or cache the data set locally")
    return ("unknown", f"{n} worker(s)", "Raise DataLoader(num_workers=...) toward the CPUs near the GPU, with "
            "prefetch_factor; make __getitem__ cheaper")


@job_rule("job.host-sync")
def watch_sync(job: Job) -> List[Finding]:
    return [Finding("job.host-sync", "warn", _who_pid(r), f"The main thread blocks on the GPU (.item(), .cpu(), "
                    f"synchronize) in {_stack(r, 'sync'):.0f}% of samples" + _util_words(r),
                    {"main_thread_in_sync_pct": _stack(r, "sync"), "gpu_util_median_pct": _median(r.gpu_util_pct)},
                    "Take .item()/.cpu()/synchronize out of the step; read metrics every N steps", source("sync_pct"))
            for r in _watched(job) if _mostly_in(r, "sync") and not _gpu_busy(r)]


def _util_words(rank: WatchRank) -> str:
    util = _median(rank.gpu_util_pct)
    return f" while the GPU is busy only {util:.0f}%" if util is not None else ""


def _steady(values: List[float]) -> List[float]:
    """The later half of a series: a rank's start-up (imports, the rendezvous) is busy on every rank alike."""
    return values[len(values) // 2:] if len(values) >= 4 else values


def _waiting(ranks: List[WatchRank]) -> List[WatchRank]:
    """Ranks that wait for others: in a collective on their stacks, or (CPU ranks, whose wait for gloo sits inside
    autograd's C++ and shows on no Python frame) nearly idle while another rank is busy."""
    busiest = max((_median(_steady(r.cpu_pct)) or 0 for r in ranks), default=0)

    def idle_cpu_rank(r):
        # relative, not absolute: on a loaded host the busy rank gets far less than a whole core
        cpu = _median(_steady(r.cpu_pct))
        return not any(u is not None for u in r.gpu_util_pct) and cpu is not None and \
            busiest >= limit("watch_busy_cpu_pct") and cpu * limit("watch_cpu_ratio") <= busiest
    return [r for r in ranks if _stack(r, "collective") >= limit("watch_stack_pct") or idle_cpu_rank(r)]


@job_rule("job.straggler", "job.comm-exposed", "job.not-judged")
def watch_straggler(job: Job) -> List[Finding]:
    """Ranks that wait for others while one does not: that one is the straggler. All waiting in collectives, GPUs
    not busy: the communication is exposed."""
    ranks = [r for r in _watched(job) if r.stack_samples]
    if not ranks or _hung(job):
        return []
    waiting = _waiting(ranks)
    working = [r for r in ranks if r not in waiting]
    # the one the others wait for but which has itself stopped is a hang in the making (job.hung-rank), no straggler
    one_works = len(ranks) >= 2 and waiting and len(working) == 1 and not _stuck(working[0], 2)
    all_wait = len(waiting) == len(ranks) and not all(_stuck(r, 2) for r in ranks)
    if not (one_works or all_wait):
        return []
    # a healthy job's ranks all wait some of the time, and a loaded host deals its slices unevenly for a while:
    # a few samples of each (3 of 8 against 1 of 13 in collectives) can pass any test of chance by chance
    fewest = min(ranks, key=lambda r: r.stack_samples)
    if fewest.stack_samples < limit("straggler_samples"):
        return [_too_few_to_compare(fewest)]
    if one_works:
        return _straggler(working[0], waiting) if _apart(working[0], waiting) else []
    return _all_wait_some(job, ranks)


def _all_wait_some(job: Job, ranks: List[WatchRank]) -> List[Finding]:
    """Every rank waits in collectives some of the time: the one that waits least, or works most, is the one the
    others wait for; none of them: the communication is exposed."""
    slow = _waits_least(ranks) or _works_most(ranks)
    if slow is not None:
        return _straggler(slow, [r for r in ranks if r is not slow])
    return _exposed(job, ranks)


def _too_few_to_compare(fewest: WatchRank) -> Finding:
    """Too few samples yet to tell one rank from the others: said, so a short watch's healthy headline is not an
    "OK" over a comparison that was never made."""
    need = int(limit("straggler_samples"))
    return Finding("job.not-judged", "info", "job",
                   f"Straggler by comparison: ranks wait in collectives, and "
                   f"{_who_pid(fewest)} has {fewest.stack_samples} stack sample(s) of the {need} each rank needs "
                   f"before one is told from the others: whether one rank holds the others back was not judged",
                   {"stack_samples": fewest.stack_samples, "needed": need, **_placed(fewest)},
                   "Watch for longer (--duration), or until the job ends")


def _waits_least(ranks: List[WatchRank]) -> Optional[WatchRank]:
    """Every rank waits in collectives some of the time (a loaded host slows them all, and the slow rank waits in
    the collective after its own work too): the one that waits in them at most half as often as every other, and
    is not stopped, is the one they wait for."""
    low, *others = sorted(ranks, key=lambda r: _stack(r, "collective"))
    if _stuck(low, 2) or _stack(low, "collective") * limit("straggler_wait_ratio") > _stack(others[0], "collective") \
            or not _apart(low, others):
        return None
    return low


def _apart(slow: WatchRank, waiting: List[WatchRank]) -> bool:
    """The samples tell the slow rank from each rank that waits for it in collectives: its share there is below
    theirs by more than chance (a two-proportion z-test, pooled, one-sided at stack_share_z). A loaded host gives a
    rank fewer slices for a while: 2 against 5 of 11 samples in a collective is chance, 4 against 9 of 12 is not.
    A CPU rank that waits asleep, seen by its CPU (no Python frame shows gloo's wait), is judged by that instead."""
    def beyond_chance(other: WatchRank) -> bool:
        n1, n2 = slow.stack_samples, other.stack_samples
        p1, p2 = _stack(slow, "collective") / 100, _stack(other, "collective") / 100
        pooled = (p1 * n1 + p2 * n2) / (n1 + n2)
        spread = math.sqrt(pooled * (1 - pooled) * (1 / n1 + 1 / n2))
        return spread > 0 and (p2 - p1) / spread >= limit("stack_share_z")
    return all(beyond_chance(r) for r in waiting if _stack(r, "collective") >= limit("watch_stack_pct"))


def _works_most(ranks: List[WatchRank]) -> Optional[WatchRank]:
    """The one rank whose CPU time, in the later half of the watch, is watch_cpu_ratio times every other's and a
    working rank's at least: the others wait (gloo waits asleep). A rank spinning in NCCL is never this one: then
    all spin alike."""
    cpu = {id(r): _median(_steady(r.cpu_pct)) or 0.0 for r in ranks}
    busy, *others = sorted(ranks, key=lambda r: -cpu[id(r)])
    if _stuck(busy, 2) or cpu[id(busy)] < limit("watch_busy_cpu_pct") or \
            cpu[id(busy)] < limit("watch_cpu_ratio") * cpu[id(others[0])]:
        return None
    return busy


def _how_waiting(rank: WatchRank, slow: WatchRank) -> str:
    if _stack(rank, "collective") >= limit("watch_stack_pct"):
        return f"rank {rank.rank}: in a collective in {_stack(rank, 'collective'):.0f}% of samples"
    return (f"rank {rank.rank}: CPU {_median(_steady(rank.cpu_pct)) or 0:.0f}% against its "
            f"{_median(_steady(slow.cpu_pct)) or 0:.0f}%")


def _straggler(slow: WatchRank, waiting: List[WatchRank]) -> List[Finding]:
    """The rank the others wait for, named when its cause is its own work: one class an incident. Starved by its
    DataLoader, it is job.dataloader; seen waiting there, the cause may be either: say which once the samples can
    tell, never before (a watch --until stops on the first answer that stands)."""
    if _starved(slow) or _maybe_mostly_in(slow, "dataloader"):
        return []
    how = "; ".join(_how_waiting(r, slow) for r in waiting)
    return [Finding("job.straggler", "warn", _who_pid(slow),
                    f"{_who_pid(slow)} is the straggler: the other {len(waiting)} rank(s) wait for it ({how})",
                    {**_placed(slow), "waiting": {str(r.rank): _stack(r, "collective") for r in waiting},
                     "straggler_main_thread": slow.main_thread},
                    REMEDY["straggler"], source("straggler_pct"))]


def _exposed(job: Job, ranks: List[WatchRank]) -> List[Finding]:
    util = _median([u for r in ranks for u in r.gpu_util_pct])
    if util is not None and util >= limit("watch_busy_pct"):
        return []
    note = _transport_note(job)
    busy = f" while the GPUs are busy {util:.0f}%" if util is not None else ""
    return [Finding("job.comm-exposed", "warn", "job", "Communication is exposed: every rank's main thread waits in "
                    "collectives" + busy + (f"; {note}" if note else ""),
                    {"waiting": {str(r.rank): _stack(r, "collective") for r in ranks}, "gpu_util_median_pct": util,
                     "node": note}, "Overlap and shrink the all-reduce (DDP bucket_cap_mb, no_sync for accumulation, "
                    "a larger batch per GPU); check the transport (NCCL_DEBUG=INFO)", source("comm_pct"))]


def _quiet(cpu: List[float]) -> int:
    """How many samples at the end of `cpu` (a rank's CPU seconds, one reading per sample) made no progress."""
    at = len(cpu) - 1
    while at > 0 and cpu[-1] - cpu[at - 1] < limit("hang_cpu_seconds"):
        at -= 1
    return len(cpu) - 1 - at


def _longest_quiet(cpu: List[float]) -> int:
    """The longest run of samples without progress before the last one: the pauses this job makes by itself (a
    checkpoint write, an evaluation), which a stall must outlast."""
    longest = run = 0
    for before, after in zip(cpu, cpu[1:]):
        run = run + 1 if after - before < limit("hang_cpu_seconds") else 0
        longest = max(longest, run)
    return longest


def _in_collective(rank: WatchRank) -> bool:
    return bool(rank.sites) and rank.sites[-1][0] is not None


def _stuck(rank: WatchRank, window: int) -> bool:
    """No progress for the last `window` samples: the main thread never blocked and woke (its voluntary context
    switches did not move: a rank stopped, or waiting in one collective), its stack did not change, and it either
    waits in a collective (a rank waiting there may spin, as NCCL does: its CPU time says nothing) or used no CPU
    (a rank computing in one long call does). Each signal counts only where it was read."""
    sigs = rank.stack_sigs[-(window + 1):]
    switches = rank.switches[-(window + 1):]
    if len(switches) > window and switches[-1] - switches[0] >= limit("hang_switches"):
        return False
    cpu_quiet = len(rank.cpu_seconds) > window and _quiet(rank.cpu_seconds) >= window
    if len(sigs) > window and None not in sigs:
        return len(set(sigs)) == 1 and (_in_collective(rank) or cpu_quiet)
    return cpu_quiet


def _hung(job: Job) -> bool:
    """Still running at the end of the watch, and no rank progressed for the last samples."""
    ranks = [r for r in _watched(job) if not r.ended and not r.node_lost]
    window = int(limit("hang_samples"))
    if not job.watch or job.watch.job_ended:
        return False
    return bool(ranks) and all(_stuck(r, window) for r in ranks)


@job_rule("job.stalled")
def watch_stalled(job: Job) -> List[Finding]:
    """A lone process without progress waits on no other rank: not a hang (a checkpoint write, a sleep, a slow file
    system look the same), but "stalled" once it is quiet for longer than twice any pause it made before, and at
    least the hang window."""
    ranks = [r for r in _watched(job) if not r.ended]
    if len(ranks) != 1 or not job.watch or job.watch.job_ended:
        return []
    (rank,) = ranks
    cpu = rank.cpu_seconds
    quiet = _quiet(cpu)
    earlier = _longest_quiet(cpu[:len(cpu) - quiet])
    window = max(int(limit("hang_samples")), 2 * earlier + 1)
    if quiet < window:
        return []
    return [Finding("job.stalled", "warn", _who_pid(rank), f"The process made no progress for its last {quiet} "
                    f"samples, longer than any pause before ({earlier})", {"samples_without_progress": quiet,
                    "longest_earlier_pause": earlier, "where": rank.last_stack},
                    "Dump its stack (py-spy dump --pid PID) to see what it waits for: a file system, a lock, a child "
                    "process", source("hang_samples"))]


def _collectives(ranks: List[WatchRank]) -> Dict[str, List[WatchRank]]:
    """The ranks by the collective each is in, named with the job's line it was called from."""
    out: Dict[str, List[WatchRank]] = {}
    for r in ranks:
        collective, site = r.sites[-1] if r.sites else (None, None)
        # a collective no Python frame names (DDP's all-reduce inside backward runs in C++) is told by its line
        words = " at ".join(part for part in (collective, site) if part) or "a collective not named"
        out.setdefault(words, []).append(r)
    return out


def _ranks_words(ranks: List[WatchRank]) -> str:
    return ", ".join(_who_pid(r) for r in ranks)


@job_rule("job.hung-rank", "job.desync", "job.fabric-stall")
def watch_hung(job: Job) -> List[Finding]:
    """No rank progressed for the last samples (a hang is ranks waiting on one another; one process alone is
    job.stalled). The ranks stopped outside any collective never reached the one the others wait in: they are
    named. Every rank in a collective: in different ones (by name or by the line that called it) is a desync; all
    in the same one is the transport (the fabric) or a rank on a node not watched."""
    ranks = [r for r in _watched(job) if not r.ended and not r.node_lost]
    if len(ranks) < 2 or not _hung(job):
        return []
    # stopped inside torch (a collective, or DDP's all-reduce inside backward, a sync) waits for the others; a rank
    # stopped in the job's own code (or its DataLoader) never reached the collective
    waiting = [r for r in ranks if r.last_stack in ("collective", "compute_launch", "sync")]
    missing = [r for r in ranks if r.last_stack in ("other", "dataloader")]
    evidence = {"seconds_without_progress": int(limit("hang_samples")), "waiting": [_who_pid(r) for r in waiting],
                "where": {_who_pid(r): _where_now(r) for r in ranks}}
    stopped = [r for r in ranks if r.stopped[-1:] == [True]]
    if stopped:
        return [_stopped(r, len(ranks) - len(stopped), evidence) for r in stopped]
    if waiting and missing:
        return [_never_joined(r, waiting, evidence) for r in missing]
    return [_all_waiting(job, ranks, evidence, bool(waiting))]


def _all_waiting(job: Job, ranks: List[WatchRank], evidence: dict, in_torch: bool) -> Finding:
    """No rank stands apart: in different collectives a desync, all in one the fabric, else a hang not placed."""
    groups = _collectives(ranks)
    if all(_in_collective(r) for r in ranks):
        return _desync(groups, evidence) if len(groups) > 1 else _fabric(job, ranks, next(iter(groups)), evidence)
    return Finding("job.hung-rank", "fail", "job", "The job hangs: no rank progressed for "
                   f"{evidence['seconds_without_progress']} samples" +
                   (" and every rank waits in torch (the missing rank is on another node?)" if in_torch else ""),
                   evidence, "Dump every rank's stacks (py-spy dump); with NCCL run with NCCL_DEBUG=INFO and the "
                   "flight recorder (TORCH_NCCL_TRACE_BUFFER_SIZE) to name the rank that is missing")


def _where_now(rank: WatchRank) -> Optional[str]:
    """The collective the rank is in and the job's line it was called from, at the last sample; else its class."""
    return " at ".join(x for x in (rank.sites[-1] if rank.sites else []) if x) or rank.last_stack


def _stopped(rank: WatchRank, others: int, evidence: dict) -> Finding:
    """A rank whose process was stopped (SIGSTOP, Ctrl-Z, a debugger): it stands wherever it was, inside a
    collective too, so where its stack is says nothing; the others wait for it."""
    return Finding("job.hung-rank", "fail", _who_pid(rank), f"The job hangs: {_who_pid(rank)} is stopped (process "
                   f"state T: SIGSTOP, Ctrl-Z, or a debugger holding it) at {_where_now(rank)}; the other {others} "
                   "rank(s) wait for it", {**evidence, **_placed(rank), "stopped": True},
                   "Find who stopped it (a debugger attached, a job-control signal, an admin's kill -STOP); "
                   "kill -CONT PID lets it go on, or end the job")


def _never_joined(rank: WatchRank, waiting: List[WatchRank], evidence: dict) -> Finding:
    return Finding("job.hung-rank", "fail", _who_pid(rank), f"The job hangs: {_who_pid(rank)} never joins the "
                   f"collective the other {len(waiting)} rank(s) wait in ({', '.join(_collectives(waiting))}); it "
                   f"stopped at {(rank.sites[-1][1] if rank.sites else None) or rank.last_stack}",
                   {**evidence, **_placed(rank)},
                   "Dump that rank's stacks (py-spy dump --pid PID) to see where it stopped; with NCCL, "
                   "TORCH_NCCL_TRACE_BUFFER_SIZE and the flight recorder name the missing collective")


def _desync(groups: Dict[str, List[WatchRank]], evidence: dict) -> Finding:
    odd = _odd_one_out(groups)
    return Finding("job.desync", "fail", _who_pid(odd) if odd else "job", "The job hangs in a desync: the ranks "
                   "wait in different collectives: " + "; ".join(f"{_ranks_words(rs)} in {name}"
                                                                  for name, rs in groups.items()),
                   {**evidence, **(_placed(odd) if odd else {}),
                    "collectives": {name: [r.rank for r in rs] for name, rs in groups.items()}},
                   "Every rank must call the same collectives in the same order: look for a branch on the rank, or "
                   "on data that differs between ranks, before these lines")


def _odd_one_out(groups: Dict[str, List[WatchRank]]) -> Optional[WatchRank]:
    """The one rank in a collective no other rank is in, while all the others share one: the rank that called
    another collective than the rest (None when the split names no single rank)."""
    sizes = sorted(len(rs) for rs in groups.values())
    if sizes[:1] == [1] and len(sizes) == 2 and sizes[1] >= 2:
        return next(rs[0] for rs in groups.values() if len(rs) == 1)
    return None


def _fabric(job: Job, ranks: List[WatchRank], collective: str, evidence: dict) -> Finding:
    transports = job.watch.nccl_transports if job.watch else []
    ras = job.watch.ras if job.watch else None
    said = []
    if transports:
        said.append(f"NCCL uses {', '.join(transports)}")
    if ras is not None:
        said.append(f"NCCL's RAS: {len(ras.missing)} rank(s) missing" + (", collective counts differ"
                                                                         if ras.behind else ""))
    lost = job.watch.lost_nodes if job.watch else []
    if lost:
        said.append(f"node(s) {', '.join(lost)} stopped answering: their ranks may be the missing ones")
    return Finding("job.fabric-stall", "fail", "job", f"The job hangs: every watched rank ({len(ranks)}) waits in "
                   f"the same collective ({collective}) and none progresses: the transport between them, or a rank "
                   "not watched" + (f"; {'; '.join(said)}" if said else ""),
                   {**evidence, "transports": transports, "lost_nodes": lost},
                   "Check the fabric on the job's nodes (`gpuprep check`: net.*, fabric.*; NCCL_DEBUG=INFO for the "
                   "transport), and NCCL's RAS (ncclras) for a rank missing from the communicator")


@job_rule("job.throttled")
def watch_throttled(job: Job) -> List[Finding]:
    out = []
    for r in _watched(job):
        # a sample without the limit's reading counts as at the default: the power cap alone never names it
        lowered = [p is not None and p < limit("power_limit_lowered_pct") for p in r.power_limit_of_default_pct]
        samples = itertools.zip_longest(r.sm_clock_pct, r.throttle_reasons, lowered, fillvalue=None)
        held = [(c, _holding(reasons or [], bool(low))) for c, reasons, low in samples]
        held = [(c, reasons) for c, reasons in held if c is not None and c < limit("throttle_clock_pct") and reasons]
        if not r.sm_clock_pct or len(held) < limit("throttle_share_pct") / 100 * len(r.sm_clock_pct):
            continue
        named = sorted({x for _, reasons in held for x in reasons})
        out.append(Finding("job.throttled", "warn", _who_pid(r),
                           f"The GPU's SM clock is held down ({_median([c for c, _ in held]):.0f}% of its maximum) "
                           f"in {100 * len(held) / len(r.sm_clock_pct):.0f}% of samples: {', '.join(named)}",
                           {"gpu": r.gpu, "reasons": named, "sm_clock_median_pct": _median(r.sm_clock_pct)},
                           " ".join(remedy for test, remedy in _THROTTLE_REMEDIES if test(named)),
                           "NVML clock event reasons"))
    return out


def _holding(reasons: List[str], limit_lowered: bool) -> List[str]:
    """The reasons of one sample that hold a job's clock down. The power cap counts only under a power limit set
    below the GPU's default: at its default limit a busy GPU (an H100 under a GEMM-heavy job) runs at the cap by
    design, at a lower clock, and is healthy."""
    return [x for x in reasons if x in HOLDING_REASONS and (x != "sw_power_cap" or limit_lowered)]


# what to do about each kind of reason that held a job's clock down, in the order they are said
_THROTTLE_REMEDIES = (
    (lambda named: set(named) & set(THROTTLE_REASONS), "Check cooling and power delivery of this GPU (`gpuprep "
     "check`: gpu.clock-throttle); HW slowdown that stays is a hardware fault: drain the node."),
    (lambda named: "sw_power_cap" in named, "The GPU runs at a power limit set below its default (`nvidia-smi -q -d "
     "POWER`: Current vs Default Power Limit): restore the default (`nvidia-smi -pl`, or `gpuprep apply --tags "
     "gpu_clocks` with the limit in the inventory)."),
    (lambda named: set(named) & set(POLICY_REASONS), "NVIDIA's board-limit or reliability policy holds the clock: "
     "nothing to change on the node; ask the system vendor if it stays."),
)


def _near_cpus(job: Job, uuid: Optional[str]):
    """(the node's GPU with this UUID, the CPUs near it: NVML's CPU affinity, else topo -m's CPU Affinity column),
    or (None, None) without node facts or where the node's CPUs are all near every GPU (one NUMA node)."""
    gpu = next((g for g in (job.node.gpus if job.node else None) or [] if uuid and g.uuid == uuid), None)
    if gpu is None:
        return None, None
    topo = job.node.topology
    text = gpu.cpu_affinity or (topo.cpu_affinity.get(f"GPU{gpu.index}") if topo else None)
    near = set(expand_cpulist(text)) if text else set()
    every = {c for n in job.node.numa_nodes or [] for c in expand_cpulist(n.cpulist)}
    return (gpu, near) if near and (not every or near < every) else (None, None)


@job_rule("job.numa-placement")
def watch_numa(job: Job) -> List[Finding]:
    """A rank (or its DataLoader workers) runs on CPUs of another NUMA node than its GPU's: every host-to-device
    copy and every kernel launch crosses the socket link."""
    out = []
    for r in _watched(job):
        gpu, near = _near_cpus(job, r.gpu)
        seen = [cpus for cpus in r.ran_on_cpus if cpus]
        if not near or len(seen) < limit("numa_samples"):
            continue
        far = [cpus for cpus in seen if set(cpus) - near]
        if len(far) < limit("numa_far_share_pct") / 100 * len(seen):
            continue
        allowed = set(expand_cpulist(r.allowed_cpus)) if r.allowed_cpus else None
        bound_away = allowed is not None and not allowed & near
        evidence = {"gpu": gpu.index, "gpu_numa_node": gpu.numa_node, "near_cpus": compress_cpulist(sorted(near)),
                    "allowed_cpus": r.allowed_cpus, "samples_off_node_pct": round(100 * len(far) / len(seen)),
                    "cpus_seen": compress_cpulist(sorted({c for cpus in far for c in cpus}))}
        out.append(Finding("job.numa-placement", "warn", _who_pid(r),
                           f"The rank and its workers run away from GPU{gpu.index}'s CPUs "
                           f"({evidence['near_cpus']}) in {evidence['samples_off_node_pct']}% of samples" +
                           (f"; it is bound to CPUs {r.allowed_cpus}, none of them near its GPU" if bound_away else ""),
                           evidence, "Bind each rank to the CPUs of its GPU's NUMA node: `gpuprep plan` then "
                           "`torchrun ... --no-python gpuprep launch --plan plan.json -- python train.py`, or Slurm's "
                           "--cpu-bind / numactl --cpunodebind; DataLoader workers inherit the rank's binding",
                           "NVML CPU affinity of the GPU; /proc CPU of the rank and its workers"))
    return out


@job_rule("job.memory-full")
def watch_memory(job: Job) -> List[Finding]:
    return [Finding("job.memory-full", "warn", _who_pid(r), f"GPU memory reached {max(m for m in r.memory_pct if m is not None):.0f}%"
                    " of the device", {"gpu": r.gpu, "memory_max_pct": max(m for m in r.memory_pct if m is not None)},
                    REMEDY["memory"],
                    source("memory_pct"))
            for r in _watched(job) if any(m is not None and m > limit("memory_pct") for m in r.memory_pct)]


@job_rule("job.no-tensor-cores")
def watch_tensor_cores(job: Job) -> List[Finding]:
    """GPM (Hopper and later): the GPU is busy, but its SMs almost never run a Tensor Core instruction."""
    out = []
    for r in _watched(job):
        busy = [t for u, t in zip(r.gpu_util_pct, r.tensor_active_pct)
                if u is not None and t is not None and u >= limit("watch_busy_pct")]
        if len(busy) < 3 or statistics.median(busy) >= limit("tensor_core_pct"):
            continue
        out.append(Finding("job.no-tensor-cores", "warn", _who_pid(r),
                           f"The GPU is busy but its SMs run Tensor Core instructions {statistics.median(busy):.0f}% "
                           f"of the time (GPM, median of {len(busy)} busy samples)",
                           {"gpu": r.gpu, "tensor_active_median_pct": statistics.median(busy), "busy_samples": len(busy)},
                           "Train in mixed precision: torch.autocast(device_type='cuda', dtype=torch.bfloat16); at "
                           "least allow TF32: torch.backends.cuda.matmul.allow_tf32 = True, "
                           "torch.backends.cudnn.allow_tf32 = True", source("tensor_core_pct")))
    return out


@job_rule("job.nccl-transport")
def watch_transport(job: Job) -> List[Finding]:
    """NCCL's own log (`watch -- CMD`) says it used sockets on a node that has InfiniBand."""
    if not job.watch or "Socket" not in job.watch.nccl_transports or "IB" in job.watch.nccl_transports:
        return []
    ib = [d.name for d in (job.node.rdma_devices if job.node else None) or []
          if (d.link_layer or "").lower() == "infiniband"]
    if not ib:
        return [Finding("job.nccl-transport", "info", "job", "NCCL used sockets (NET/Socket), by its own log",
                        {"transports": job.watch.nccl_transports})]
    return [Finding("job.nccl-transport", "warn", "job", f"NCCL used sockets although the node has InfiniBand "
                    f"({', '.join(ib[:4])})", {"transports": job.watch.nccl_transports, "ib_ports": ib},
                    "Unset NCCL_IB_DISABLE / NCCL_NET=Socket, check NCCL_IB_HCA and the ports (`gpuprep check`: "
                    "net.*), and that the job's container has the RDMA devices")]


@job_rule("job.not-judged")
def watch_not_judged(job: Job) -> List[Finding]:
    return _watch_not_judged(job) + [Finding("job.not-judged", "info", "watch", note)
                                     for note in (job.watch.notes if job.watch else [])]


@job_rule("job.summary")
def watch_summary(job: Job) -> List[Finding]:
    out = []
    for r in _watched(job):
        util = _median(r.gpu_util_pct)
        parts = [f"{r.samples} sample(s)", f"CPU {_median(r.cpu_pct) or 0:.0f}%"]
        if util is not None:
            parts.append(f"GPU busy {util:.0f}%")
        if r.main_thread:
            top = max(r.main_thread, key=r.main_thread.get)
            parts.append(f"main thread mostly {top} ({r.main_thread[top]:.0f}%)")
        out.append(Finding("job.summary", "pass", _who_pid(r), "Watched: " + ", ".join(parts),
                           {"gpu": r.gpu, "workers": r.workers}))
    return out
