"""One rank's trace events -> RankFacts, with HTA's definitions (HolisticTraceAnalysis 0.5: the temporal breakdown,
the per-stream idle time breakdown, comm/compute overlap), so the numbers can be checked against HTA's own.

HTA's reading of a trace, followed here step by step: events without `dur` or `cat`, and the `Trace` event, are
dropped; a trace with any fractional timestamp has every start rounded up and every end down; an event's stream is
its `args.stream` (-1: a CPU event); with two or more ProfilerSteps, only GPU events launched (by correlation id) by
a CPU event that started before the last ProfilerStep are kept. Only the events a rule needs are kept, in arrays.
"""
from __future__ import annotations

import bisect
import functools
import math
import re
import statistics
from array import array
from typing import Callable, Dict, Iterable, Iterator, List, Optional, Tuple

from .facts import RankFacts
from .reader import Args, Event, TraceFile, as_id, host_of

# HTA (hta/utils/utils.py): kernel types by name
_COMM = re.compile(r"^nccl.*Kernel")
_MEMORY = re.compile(r"(^Memcpy)|(^Memset)|(^dma)")
_NOT_COMPUTE = re.compile(r"(^nccl.*Kernel)|(.*(Memcpy)|(Memset))|(.*Sync)")
_KERNEL_CATS = frozenset({"kernel", "Kernel", "gpu_memset", "Memset", "gpu_memcpy", "Memcpy", "mtia_ccp_events"})
CONSECUTIVE_KERNEL_DELAY = 30     # HTA's default: a gap under 30 us between kernels is launch overhead
_STEP = re.compile(r"ProfilerStep\s*#\s*(\d+)")
_DATALOADER = re.compile(r"^enumerate\(DataLoader\)#.*__next__")
_SYNC = re.compile(r"^(cudaDeviceSynchronize|cudaStreamSynchronize|cudaEventSynchronize|cudaMemcpy|"
                   r"aten::item|aten::_local_scalar_dense|hipDeviceSynchronize|hipStreamSynchronize|hipMemcpy)$")
_LAUNCH = re.compile(r"^(cudaLaunchKernel|cudaLaunchKernelExC|cuLaunchKernel|cuLaunchKernelEx|hipLaunchKernel|"
                     r"hipExtModuleLaunchKernel|hipModuleLaunchKernel)")


def _case_blind(pattern: str) -> Callable[[str], bool]:
    """A search that ignores case: the name lowercased, against a pattern written in lowercase (re.I is 8x slower on
    kernel names of hundreds of characters)."""
    search = re.compile(pattern).search
    return lambda name: search(name.lower()) is not None


_COLLECTIVE = _case_blind(r"^(c10d::|gloo:|nccl:|record_param_comms)|allreduce|all_reduce|allgather|all_gather|"
                          r"reduce_scatter|broadcast_")
_GEMM = _case_blind(r"gemm|conv|cutlass|scudnn|xmma|wgrad|dgrad|winograd|implicit_convolve|_mma|matmul")
# Tensor Core kernels by name (as the TensorBoard profiler plugin's allowlist did): Volta's 884, Turing's 1688,
# Ampere's 16816 shapes, HMMA/IMMA, cuBLAS/cuDNN xmma and CUTLASS tensorop kernels, Hopper's wgmma/gmma
_TENSOR_CORE = _case_blind(r"884|1688|16816|hmma|imma|xmma|tensorop|wgmma|gmma|_tf32|bf16_s|f16_s|sm8\d_|sm9\d_|"
                           r"sm10\d_|tensor_?core")
_PAGEABLE_H2D = re.compile(r"^Memcpy HtoD \(Pageable")
# a copy to pageable host memory: the CUDA runtime call that queued it holds the host until the stream reaches it
_TO_PAGEABLE = re.compile(r"^Memcpy DtoH \(Device -> Pageable")
_MEMCPY_CALL = re.compile(r"^(cudaMemcpyAsync|cudaMemcpy2DAsync|hipMemcpyAsync|hipMemcpyWithStream)$")
_COPY_OP = re.compile(r"^aten::(to|_to_copy|copy_|cpu|numpy|tolist)$")
# kernel names that only one vendor's libraries produce (for traces without deviceProperties)
_NVIDIA_KERNELS = _case_blind(r"^nccl|cutlass|cudnn|cublas|sm\d{2,3}_|volta_|turing_|ampere_|hopper_|xmma|"
                              r"void at::native::|triton_")
_AMD_KERNELS = _case_blind(r"cijk_|rocblas|miopen|hipblaslt|ck::|__amd_")


_CLOCK = 1e18       # microseconds: 31,000 years; Kineto's are since the epoch or the boot (about 1.7e15)


class ClockError(ValueError):
    """An event whose timestamp or duration no clock holds (NaN, infinite, hundreds of digits)."""


class RankEvents:
    """What one trace's events leave behind for the metrics: GPU events in arrays, the CPU events a rule needs."""

    def __init__(self) -> None:
        self.names: Dict[str, int] = {}
        self.name_list: List[str] = []
        self.float_ts = False
        # GPU events (stream != -1): start, duration, stream, correlation, name id, kernel-category flag
        self.g_ts, self.g_dur = array("d"), array("d")
        self.g_stream, self.g_corr, self.g_name = array("q"), array("q"), array("q")
        self.g_kernel_cat = array("b")
        self.launches = _Launches()                   # the CPU events' correlations and starts
        self.steps: List[Tuple[float, float, int]] = []
        self.dataloader: List[Tuple[float, float]] = []
        self.sync: List[Tuple[float, float, str]] = []
        self.collectives: List[Tuple[float, float]] = []
        self.memcpy_calls: List[Tuple[float, float, int]] = []     # CUDA runtime copies: start, duration, correlation
        self.copy_ops: List[Tuple[float, float, str]] = []         # aten::to / copy_ / cpu: the op a copy is part of
        self.launch_us = 0.0
        self.memory_peak: Dict[int, int] = {}
        self._cpu_kinds: Dict[str, str] = {}     # a CPU op's name -> what it is (names repeat every step)

    def _name_id(self, name: str) -> int:
        found = self.names.get(name)
        if found is None:
            found = self.names[name] = len(self.name_list)
            self.name_list.append(name)
        return found

    def add(self, events: List[Event]) -> None:
        """A batch of events, in file order (millions of them: the loop binds what it calls, and the common cases
        come first)."""
        g_ts, g_dur, g_stream, g_corr = self.g_ts.append, self.g_dur.append, self.g_stream.append, self.g_corr.append
        g_name, g_kernel_cat, name_id = self.g_name.append, self.g_kernel_cat.append, self._name_id
        launch_corr, launch_ts = self.launches.corr.append, self.launches.ts.append
        kinds, numbers = self._cpu_kinds, _NUMBERS
        for event in events:
            ph = event.ph
            if ph != "X":       # HTA keeps only events with a duration: complete ('X') events
                if ph == "i" and event.name == "[memory]" and event.args is not None:
                    self._memory(event.args)
                continue
            ts, dur, cat, name = event.ts, event.dur, event.cat, event.name
            if type(ts) not in numbers or type(dur) not in numbers or cat is None or cat == "Trace" or \
                    type(name) is not str:
                continue
            if not (-_CLOCK < ts < _CLOCK and -_CLOCK < dur < _CLOCK):      # NaN compares false too
                raise ClockError(f"{name[:60]!r}: ts {str(ts)[:24]}, dur {str(dur)[:24]}: no time a clock holds")
            if type(ts) is float:
                self.float_ts = True
            args = event.args
            stream, corr = (-1, -1) if args is None else (args.stream, args.correlation)
            if stream == -1:        # a CPU event: its launch time, and what it is where a rule needs it
                if corr >= 0 and name not in ("Event Sync", "Context Sync"):
                    launch_corr(corr)
                    launch_ts(ts)
                kind = kinds.get(name)
                if kind is None:
                    kind = kinds[name] = _cpu_kind(name)
                if kind != "other":
                    self._cpu(kind, ts, dur, name, corr)
                continue
            g_ts(ts)
            g_dur(dur)
            g_stream(stream)
            g_corr(corr)
            g_name(name_id(name))
            g_kernel_cat(cat in _KERNEL_CATS)

    def _cpu(self, kind: str, ts: float, dur: float, name: str, corr: int) -> None:
        if kind == "step":
            self.steps.append((ts, dur, int(_STEP.fullmatch(name).group(1))))
        elif kind == "dataloader":
            self.dataloader.append((ts, dur))
        elif kind == "sync":
            self.sync.append((ts, dur, name))
        elif kind == "launch":
            self.launch_us += dur
        elif kind == "collective":
            self.collectives.append((ts, dur))
        elif kind == "memcpy" and corr >= 0:
            self.memcpy_calls.append((ts, dur, corr))
        elif kind == "copy_op":
            self.copy_ops.append((ts, dur, name))

    def _memory(self, args: Args) -> None:
        device, total = as_id(args.device_id), args.total_allocated
        if device >= 0 and _number(total) and args.device_type in (1, None):
            self.memory_peak[device] = max(self.memory_peak.get(device, 0), int(total))


_CPU_KINDS = (("step", lambda n: _STEP.fullmatch(n)), ("dataloader", _DATALOADER.match), ("sync", _SYNC.match),
              ("launch", _LAUNCH.match), ("memcpy", _MEMCPY_CALL.match), ("copy_op", _COPY_OP.match),
              ("collective", _COLLECTIVE))


def _cpu_kind(name: str) -> str:
    return next((kind for kind, test in _CPU_KINDS if test(name)), "other")


_NUMBERS = (int, float)


def _number(value) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


class _Launches:
    """Each CPU event's correlation and start, in file order, in two arrays (as a dict of 25,000 they took 3 MiB):
    looked up by binary search once sorted by correlation, the last event of one correlation winning, as in a dict."""

    def __init__(self) -> None:
        self.corr, self.ts = array("q"), array("d")
        self._sorted = False

    def starts_of(self, ids: Iterable[int]) -> Iterator[Optional[float]]:
        """The start of the CPU event with each correlation id, or None (a negative id is no correlation)."""
        if not self._sorted:
            self._sort()
        corr, ts, find = self.corr, self.ts, bisect.bisect_right
        for wanted in ids:
            k = find(corr, wanted) - 1 if wanted >= 0 else -1
            yield ts[k] if k >= 0 and corr[k] == wanted else None

    def _sort(self) -> None:
        corr = self.corr
        if any(corr[k] > corr[k + 1] for k in range(len(corr) - 1)):      # launched in order, mostly: no copy
            order = sorted(range(len(corr)), key=corr.__getitem__)          # stable: file order within one id
            self.corr, self.ts = array("q", [corr[k] for k in order]), array("d", [self.ts[k] for k in order])
        self._sorted = True


def _rounded(ts: float, dur: float, on: bool) -> Tuple[float, float]:
    """HTA rounds a trace with fractional timestamps: start up, end down (pytorch/pytorch#122425)."""
    if not on:
        return ts, ts + dur
    return float(math.ceil(ts)), float(math.floor(ts + dur))


def _merged(intervals: List[Tuple[float, float]]) -> List[Tuple[float, float]]:
    out: List[Tuple[float, float]] = []
    for start, end in sorted(intervals):
        if out and start <= out[-1][1]:
            if end > out[-1][1]:
                out[-1] = (out[-1][0], end)
        else:
            out.append((start, end))
    return out


def _within(merged: List[Tuple[float, float]], starts: List[float], at: float) -> bool:
    """Whether `at` falls inside one of the merged, sorted half-open intervals (`starts`: their starts)."""
    k = bisect.bisect_right(starts, at) - 1
    return k >= 0 and at < merged[k][1]


def _length(intervals: List[Tuple[float, float]]) -> float:
    return sum(b - a for a, b in intervals)


def _intersection(a: List[Tuple[float, float]], b: List[Tuple[float, float]]) -> List[Tuple[float, float]]:
    """The intersection of two merged, sorted interval lists: merged and sorted itself (one pass over both)."""
    out: List[Tuple[float, float]] = []
    if not a or not b:
        return out
    i, j, (a_lo, a_hi), (b_lo, b_hi) = 0, 0, a[0], b[0]
    while True:         # the interval that ends first is done with: its part inside the other, then the next one
        lo = a_lo if a_lo > b_lo else b_lo
        if a_hi < b_hi:
            if a_hi > lo:
                out.append((lo, a_hi))
            i += 1
            if i == len(a):
                return out
            a_lo, a_hi = a[i]
        else:
            if b_hi > lo:
                out.append((lo, b_hi))
            j += 1
            if j == len(b):
                return out
            b_lo, b_hi = b[j]


def _overlap(a: List[Tuple[float, float]], b: List[Tuple[float, float]]) -> float:
    """Total length of the intersection of two merged, sorted interval lists."""
    return _length(_intersection(a, b))


def _pct(part: float, whole: float) -> Optional[float]:
    return round(100.0 * part / whole, 2) if whole > 0 else None


class _Gpu:
    """The GPU events HTA keeps, rounded: (start, end, stream, correlation, name, is a kernel/memcpy/memset, launched:
    when the CPU event with its correlation started, rounded, or None)."""

    def __init__(self, ev: RankEvents):
        rows = []
        steps = {n for _, _, n in ev.steps}
        last_step_start = max((_rounded(t, d, ev.float_ts)[0] for t, d, _ in ev.steps), default=None)
        # with two steps or more, the GPU events launched before the last step's start (HTA's cut); looked up per
        # event, not as a set of every correlation (a set of 65,000: 1 of the 8 MiB this peaked at)
        last = last_step_start if len(steps) >= 2 else None
        float_ts = ev.float_ts
        for ts, dur, stream, corr, name, kernel, launched in zip(ev.g_ts, ev.g_dur, ev.g_stream, ev.g_corr, ev.g_name,
                                                                 ev.g_kernel_cat, ev.launches.starts_of(ev.g_corr)):
            if launched is not None and float_ts:
                launched = float(math.ceil(launched))
            if last is not None and (launched is None or launched >= last):
                continue
            start, end = _rounded(ts, dur, float_ts)
            rows.append((start, end, stream, corr, name, kernel, launched))
        self.rows = rows
        self.names = ev.name_list
        self._by_name: Dict[str, list] = {}
        self._by_kind: Dict[str, List[Tuple[float, float]]] = {}

    def of(self, what: str) -> list:
        """_NAME_TESTS[what] of every GPU event name, by name id: worked out once per name (names repeat every step)."""
        found = self._by_name.get(what)
        if found is None:
            found = self._by_name[what] = [_NAME_TESTS[what](name) for name in self.names]
        return found

    @functools.cached_property
    def busy(self) -> List[Tuple[float, float]]:
        """When any GPU event ran, merged."""
        return _merged([(r[0], r[1]) for r in self.rows])

    def merged(self, kind: str) -> List[Tuple[float, float]]:
        """When the events of one kind (comm, compute, memory, other: `_kind`) ran, merged."""
        found = self._by_kind.get(kind)
        if found is None:
            kinds = self.of("kind")
            found = self._by_kind[kind] = _merged([(r[0], r[1]) for r in self.rows if kinds[r[4]] == kind])
        return found

    def kernels(self) -> List[tuple]:
        """The kernels proper: kernel-category events that are not copies or memsets."""
        memory = self.of("memory")
        return [r for r in self.rows if r[5] and not memory[r[4]]]


def temporal(gpu: _Gpu) -> Dict[str, Optional[float]]:
    """HTA's get_temporal_breakdown for one rank: idle, compute and non-compute shares of the GPU span."""
    if not gpu.rows:
        return {}
    busy = gpu.busy
    span = busy[-1][1] - busy[0][0]
    idle = span - _length(busy)
    compute_merged = gpu.merged("compute")
    compute = _length(compute_merged)
    comm = gpu.merged("comm")
    comm_time = _length(comm)
    return {"span_ms": round(span / 1000, 3), "idle_pct": _pct(idle, span), "compute_pct": _pct(compute, span),
            "non_compute_pct": _pct(span - compute - idle, span),
            "comm_pct": _pct(comm_time, span) if comm else None,
            "comm_overlap_pct": _pct(_overlap(comm, compute_merged), comm_time) if comm else None}


def _kind(name: str) -> str:
    if _COMM.match(name):
        return "comm"
    if _MEMORY.match(name):
        return "memory"
    return "other" if _NOT_COMPUTE.match(name) else "compute"


def idle_breakdown(gpu: _Gpu) -> Optional[Dict[str, float]]:
    """HTA's get_idle_time_breakdown summed over the rank's streams: each gap before a kernel on its stream is host
    wait when the kernel's launch (its CPU runtime event) came after the previous kernel ended, kernel wait when the
    gap is under CONSECUTIVE_KERNEL_DELAY, else other. Shares of the rank's idle time, in percent."""
    totals = {"host_wait": 0.0, "kernel_wait": 0.0, "other": 0.0}
    by_stream: Dict[int, List[tuple]] = {}
    for row in gpu.rows:
        if row[5]:
            by_stream.setdefault(row[2], []).append(row)
    for rows in by_stream.values():
        rows.sort(key=lambda r: r[0])
        for prev, cur in zip(rows, rows[1:]):
            gap = cur[0] - prev[1]
            launched = cur[6]
            if launched is not None and launched > prev[1]:
                totals["host_wait"] += gap
            elif gap < CONSECUTIVE_KERNEL_DELAY:
                totals["kernel_wait"] += gap
            else:
                totals["other"] += gap
    whole = sum(totals.values())
    if not by_stream or whole <= 0:
        return None
    return {k: round(100.0 * v / whole, 2) for k, v in totals.items()}


def _steps(ev: RankEvents) -> List[Tuple[float, float]]:
    """The ProfilerStep spans, the last excluded when there are several (HTA: often cut by the trace's end)."""
    spans = sorted((t, t + d) for t, d, _ in ev.steps)
    return spans[:-1] if len(spans) > 1 else spans


def _inside(spans: List[Tuple[float, float]], events) -> float:
    return sum(max(0.0, min(b, t + d) - max(a, t)) for a, b in spans for t, d, *_ in events)


# what the metrics ask of a GPU event's name (_Gpu.of works each out once per name)
_NAME_TESTS = {
    "kind": _kind,
    "memory": lambda name: bool(_MEMORY.match(name)),
    "gemm": _GEMM,
    "tensor_core": _TENSOR_CORE,
    "nvidia": _NVIDIA_KERNELS,
    "amd": _AMD_KERNELS,
    "pageable": lambda name: bool(_PAGEABLE_H2D.match(name)),
    "to_pageable": lambda name: bool(_TO_PAGEABLE.match(name)),
}


def blocking_copies(ev: RankEvents, gpu: _Gpu) -> List[Tuple[float, float, str]]:
    """The copies to pageable host memory (the trace's own copy kind), as the host saw them: the runtime call held
    the host until the stream reached the copy, a host sync by another name. Named by the op they are part of
    (aten::to(cpu), aten::item, ...)."""
    copies_to_pageable = gpu.of("to_pageable")
    to_pageable = {r[3] for r in gpu.rows if r[3] >= 0 and copies_to_pageable[r[4]]}
    if not to_pageable:
        return []
    ops = sorted(ev.copy_ops)
    starts, longest = [t for t, _, _ in ops], max((d for _, d, _ in ops), default=0.0)
    out = []
    for ts, dur, corr in ev.memcpy_calls:
        if corr in to_pageable:
            # the ops around the call start before it, and no earlier than the longest op's length before it
            near = ops[bisect.bisect_left(starts, ts - longest):bisect.bisect_right(starts, ts)]
            around = [(d, n) for t, d, n in near if ts + dur <= t + d]
            op = min(around)[1] if around else "cudaMemcpyAsync"
            out.append((ts, dur, f"{op} (device to pageable memory)"))
    return out


def _busy_in(spans: List[Tuple[float, float]], gpu: _Gpu) -> float:
    """GPU time (any kernel, copy or memset) inside the step spans."""
    return _overlap(_merged(spans), gpu.busy)


SYNC_DRAIN_US = 200     # an idle gap starting this close to a sync point's return: the queue drained at the sync


def _gaps(spans: List[Tuple[float, float]], gpu: _Gpu) -> List[Tuple[float, float]]:
    """The GPU's idle intervals inside the steps."""
    busy = gpu.busy
    gaps, i = [], 0
    for a, b in _merged(spans):
        at = a
        while i < len(busy) and busy[i][1] <= a:
            i += 1
        j = i
        while j < len(busy) and busy[j][0] < b:
            if busy[j][0] > at:
                gaps.append((at, busy[j][0]))
            at = max(at, busy[j][1])
            j += 1
        if at < b:
            gaps.append((at, b))
    return gaps


def exposed(ev: RankEvents, gpu: _Gpu, spans: List[Tuple[float, float]], sync) -> Dict[str, float]:
    """What each cause costs the step, in microseconds over all the steps: the GPU's idle time it holds. An idle gap
    is the DataLoader's when the host is in the DataLoader for most of it, a sync point's when it opens as a sync
    returns (the queue drained there), else the host's other work (launches, Python). Exposed communication is the
    collective kernels' time that no compute overlaps."""
    loader = _merged([(t, t + d) for t, d in ev.dataloader])
    loader_ends = [b for _, b in loader]
    sync_ends = sorted(t + d for t, d, _ in sync)
    out = {"dataloader": 0.0, "host_sync": 0.0, "host_other": 0.0}
    for a, b in _gaps(spans, gpu):
        length = b - a
        first = bisect.bisect_right(loader_ends, a)         # the first loader interval that ends after the gap opens
        near = loader[first:first + _reach(loader, first, b)]
        if near and _overlap([(a, b)], near) > length / 2:
            out["dataloader"] += length
            continue
        k = bisect.bisect_left(sync_ends, a - SYNC_DRAIN_US)
        drained = k < len(sync_ends) and sync_ends[k] <= a + SYNC_DRAIN_US
        out["host_sync" if drained else "host_other"] += length
    comm, compute = gpu.merged("comm"), gpu.merged("compute")
    inside = _merged(spans)
    out["comm"] = _overlap(inside, comm) - _overlap(inside, _intersection(comm, compute))
    from_pageable = gpu.of("pageable")
    pageable = [(r[0], r[1]) for r in gpu.rows if from_pageable[r[4]]]
    out["h2d_pageable"] = _overlap(inside, _merged(pageable))
    return out


def _reach(merged: List[Tuple[float, float]], first: int, end: float) -> int:
    """How many of merged[first:] start before `end`."""
    return bisect.bisect_left(merged, (end,), lo=first) - first


def step_metrics(ev: RankEvents, gpu: _Gpu) -> dict:
    spans = _steps(ev)
    if not spans:
        return {}
    lengths = [b - a for a, b in spans]
    total = sum(lengths)
    sync = ev.sync + blocking_copies(ev, gpu)
    sync_in = [s for s in sync if any(a <= s[0] < b for a, b in spans)]
    out = {"steps": len(spans), "step_ms": round(statistics.median(lengths) / 1000, 3),
           "step_ms_spread": [round(min(lengths) / 1000, 3), round(max(lengths) / 1000, 3)],
           "step_ms_each": [round(v / 1000, 3) for v in lengths[:4096]],
           "dataloader_pct": _pct(_inside(spans, ev.dataloader), total) if ev.dataloader else 0.0,
           "sync_calls_per_step": round(len(sync_in) / len(spans), 2),
           "sync_pct": _pct(_inside(spans, sync), total) if sync else 0.0,
           "sync_names": sorted({s[2] for s in sync_in}),
           # the GPU's idle time against the steps, not against its own first and last kernel (HTA's span): a GPU
           # idle most of every step reads as idle even when its kernels sit close together
           "step_idle_pct": _pct(total - _busy_in(spans, gpu), total) if gpu.rows else None}
    if gpu.rows:
        # ms per step each cause holds, the gain its removal would buy at most
        out["exposed_ms"] = {k: round(v / len(spans) / 1000, 3) for k, v in exposed(ev, gpu, spans, sync).items()}
    out.update(_waits(ev, spans))
    kernels = gpu.kernels()
    if kernels:
        merged = _merged(spans)
        starts = [a for a, _ in merged]
        out["kernels_per_step"] = round(sum(_within(merged, starts, r[0]) for r in kernels) / len(spans), 1)
    return out


def _waits(ev: RankEvents, spans: List[Tuple[float, float]]) -> dict:
    """Per step, the main thread's time in collectives (waiting for the others) and the rest (its own work)."""
    if not ev.collectives:
        return {}
    merged = [(a, b - a) for a, b in _merged([(t, t + d) for t, d in ev.collectives])]
    waits = [_inside([span], merged) for span in spans]
    return {"comm_wait_ms": round(statistics.median(waits) / 1000, 3),
            "work_ms": round(statistics.median((b - a) - wait for (a, b), wait in zip(spans, waits)) / 1000, 3)}


def kernel_metrics(ev: RankEvents, gpu: _Gpu) -> dict:
    kernels = gpu.kernels()
    if not kernels:
        return {}
    durations = [r[1] - r[0] for r in kernels]
    total = sum(durations)
    is_gemm, on_tensor_cores, from_pageable = gpu.of("gemm"), gpu.of("tensor_core"), gpu.of("pageable")
    gemm = [(r[1] - r[0], r[4]) for r in kernels if is_gemm[r[4]]]
    gemm_time = sum(d for d, _ in gemm)
    tensor_core = sum(d for d, n in gemm if on_tensor_cores[n])
    busy = _length(_merged([(r[0], r[1]) for r in kernels]))
    pageable = [r for r in gpu.rows if from_pageable[r[4]]]
    return {"gpu_kernels": len(kernels), "median_kernel_us": round(statistics.median(durations), 2),
            "gemm_pct": _pct(gemm_time, total),
            "tensor_core_pct": _pct(tensor_core, gemm_time) if gemm else None,
            "launch_cpu_pct": _pct(ev.launch_us, busy),
            "h2d_pageable": len(pageable), "h2d_pageable_ms": round(sum(r[1] - r[0] for r in pageable) / 1000, 3)}


def _device(meta: dict) -> dict:
    props = meta.get("deviceProperties")
    first = props[0] if isinstance(props, list) and props and isinstance(props[0], dict) else {}
    name = first.get("name") if isinstance(first.get("name"), str) else None
    vendor = None
    if name:
        vendor = "amd" if re.search(r"\bAMD\b|Radeon|Instinct", name) else \
            "nvidia" if re.search(r"NVIDIA|Tesla|Quadro|GeForce|RTX|\b[AHBLT]\d+", name) else "other"
    major, minor = first.get("computeMajor"), first.get("computeMinor")
    cc = f"{major}.{minor}" if vendor == "nvidia" and _number(major) and _number(minor) else None
    memory = first.get("totalGlobalMem") if _number(first.get("totalGlobalMem")) else None
    return {"vendor": vendor, "gpu_name": name, "compute_capability": cc, "gpu_memory_bytes": memory}


def _vendor_from_kernels(gpu: _Gpu) -> Optional[str]:
    """nvidia or amd from the kernel names a trace without deviceProperties still carries, or None."""
    is_nvidia, is_amd = gpu.of("nvidia"), gpu.of("amd")
    kernels = [r[4] for r in gpu.rows if r[5]]
    nvidia, amd = sum(is_nvidia[n] for n in kernels), sum(is_amd[n] for n in kernels)
    return "nvidia" if nvidia > amd else "amd" if amd > nvidia else None


def rank_facts(trace: TraceFile, ev: RankEvents) -> RankFacts:
    dist = trace.meta.get("distributedInfo") if isinstance(trace.meta.get("distributedInfo"), dict) else {}
    rank = dist.get("rank") if isinstance(dist.get("rank"), int) and not isinstance(dist.get("rank"), bool) else None
    world = dist.get("world_size") if isinstance(dist.get("world_size"), int) else None
    facts = RankFacts(rank=rank, source=trace.path, host=host_of(trace.path), complete=trace.complete,
                      bytes_read=trace.bytes_read,
                      world_size=world, backend=dist.get("backend") if isinstance(dist.get("backend"), str) else None,
                      **_device(trace.meta))
    gpu = _Gpu(ev)
    if facts.vendor is None and gpu.rows:
        facts.vendor = _vendor_from_kernels(gpu)
    for part in (temporal(gpu), step_metrics(ev, gpu), kernel_metrics(ev, gpu)):
        for key, value in part.items():
            setattr(facts, key, value)
    facts.idle_breakdown_pct = idle_breakdown(gpu)
    if ev.memory_peak and facts.gpu_memory_bytes:
        facts.peak_memory_pct = _pct(max(ev.memory_peak.values()), facts.gpu_memory_bytes)
    return facts
