"""Pure verdict over a training job's facts (job/facts.py), optionally joined with the node's snapshot: why the
GPUs are under-used, each cause a registered `job.*` id with its evidence and the fix, thresholds from
data/job-thresholds.csv. No I/O: the same rules judge traces (diagnose) and samples of a running job (watch)."""
from __future__ import annotations

import functools
import itertools
import statistics
from dataclasses import dataclass
from typing import Callable, Dict, List, Optional

from ..parsers.values import compress_cpulist, expand_cpulist
from ..parsers.nvsmi import HOLDING_REASONS, POLICY_REASONS, THROTTLE_REASONS
from ..rules import Finding, declared, registrar
from ..snapshot import Gpu, Snapshot
from .facts import JobFacts, RankFacts, WatchFacts, WatchRank


@functools.lru_cache(maxsize=None)
def thresholds() -> Dict[str, tuple]:
    """name -> (value, source), from data/job-thresholds.csv."""
    from ..knowledge import _rows
    return {row["name"]: (float(row["value"]), row["source"]) for row in _rows("job-thresholds.csv")}


def limit(name: str) -> float:
    return thresholds()[name][0]


def source(name: str) -> str:
    return thresholds()[name][1]


@dataclass
class Job:
    """What every job rule reads: the ranks of its traces (diagnose) or of a watch (watch), and the node's facts
    when the user gave them. A rule for one kind of facts finds no ranks of the other."""
    facts: JobFacts
    node: Optional[Snapshot] = None
    watch: Optional[WatchFacts] = None


JOB_RULES: List[Callable[[Job], List[Finding]]] = []

# the fixes, worded once for a cause whether a trace or a running job showed it
REMEDY = {
    "straggler": "Look at what differs on this rank: its GPU's clocks and throttle reasons (`gpuprep check`), its "
                 "data shard, its CPU binding (`gpuprep plan`)",
    "memory": "Activation checkpointing (torch.utils.checkpoint), mixed precision, a smaller micro-batch with "
              "gradient accumulation",
}
job_rule = registrar(JOB_RULES)


def judge(job: Job) -> List[Finding]:
    """Every job rule's findings, each cause with the gain removing it would buy, the largest first."""
    found = [f for fn in JOB_RULES for f in declared(fn, fn(job))]
    ranks = {_who(r): r for r in job.facts.ranks}
    for f in found:
        _gain(f, ranks.get(f.subject))
    from ..rules import SEVERITY_RANK
    return sorted(found, key=lambda f: (SEVERITY_RANK[f.severity], -(f.evidence.get("gain_ms_per_step") or 0)))


# the part of a step each cause holds (metrics.exposed): what removing it would save at most
_GAIN_OF = {"job.dataloader": "dataloader", "job.host-sync": "host_sync", "job.comm-exposed": "comm",
            "job.h2d-pageable": "h2d_pageable", "job.launch-bound": "host_other"}


def _gain(finding: Finding, rank: Optional[RankFacts]) -> None:
    if rank is None or not rank.step_ms or finding.severity not in ("warn", "fail"):
        return
    if finding.id == "job.gpu-idle" and rank.step_idle_pct is not None:
        ms = rank.step_ms * rank.step_idle_pct / 100
    elif finding.id in _GAIN_OF and rank.exposed_ms:
        ms = rank.exposed_ms.get(_GAIN_OF[finding.id])
    else:
        return
    if ms is not None:
        finding.evidence["gain_ms_per_step"] = round(ms, 2)
        finding.evidence["gain_pct_of_step"] = round(100 * ms / rank.step_ms, 1)
        finding.title += f"; removing it saves up to {ms:.1f} ms of the {rank.step_ms:.1f} ms step ({100 * ms / rank.step_ms:.0f}%)"


def _who(rank: RankFacts) -> str:
    return f"rank {rank.rank}" if rank.rank is not None else rank.source.rsplit("/", 1)[-1]


def _gpu_ranks(job: Job) -> List[RankFacts]:
    return [r for r in job.facts.ranks if r.gpu_kernels]


def _node_gpu(job: Job, rank: RankFacts) -> Optional[Gpu]:
    """The node's GPU this rank ran on: by the trace's device name when the node has one such GPU, else the rank's
    local index when every GPU of the node has the trace's model."""
    gpus = (job.node.gpus if job.node else None) or []
    same = [g for g in gpus if g.name and rank.gpu_name and g.name == rank.gpu_name]
    if len(same) == 1:
        return same[0]
    if rank.rank is not None and same and len(same) == len(gpus):
        return gpus[rank.rank % len(gpus)]
    return None


def _link_note(gpu: Optional[Gpu]) -> Optional[str]:
    if gpu is None or None in (gpu.pcie_width_current, gpu.pcie_width_max):
        return None
    if gpu.pcie_width_current < gpu.pcie_width_max or (gpu.pcie_gen_current or 0) < (gpu.pcie_gen_max or 0):
        return (f"the node's GPU{gpu.index} PCIe link runs at Gen{gpu.pcie_gen_current} x{gpu.pcie_width_current} "
                f"of Gen{gpu.pcie_gen_max} x{gpu.pcie_width_max} (`gpuprep check`: topo.pcie-link)")
    return None


def _numa_cpus(job: Job, gpu: Optional[Gpu]) -> Optional[int]:
    if gpu is None or gpu.numa_node is None or not job.node or not job.node.numa_nodes:
        return None
    node = next((n for n in job.node.numa_nodes if n.node == gpu.numa_node), None)
    return len(expand_cpulist(node.cpulist)) if node and node.cpulist else None


@job_rule("job.trace-truncated")
def truncated(job: Job) -> List[Finding]:
    return [Finding("job.trace-truncated", "warn", _who(r), f"The trace was cut short: judged the {r.bytes_read} "
                    "bytes read before the cut", {"file": r.source, "bytes_read": r.bytes_read},
                    "Profile again and let the profiler finish (prof.stop() or the end of the `with` block): a job "
                    "killed mid-write leaves a trace without its end") for r in job.facts.ranks if not r.complete]


@job_rule("job.not-judged")
def not_judged(job: Job) -> List[Finding]:
    """What a trace cannot tell, said instead of passing over it in silence."""
    out = []
    for r in job.facts.ranks:
        if not r.gpu_kernels:
            out.append(Finding("job.not-judged", "info", _who(r),
                               "No GPU activity in this trace: GPU time, Tensor Cores, copies and communication "
                               "were not judged; the CPU side (steps, DataLoader, sync points) was",
                               {"file": r.source, "device": r.gpu_name},
                               "Profile with activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA] on the GPU "
                               "to judge the GPU side"))
        elif r.vendor != "nvidia":
            what = {"amd": f"An AMD GPU ({r.gpu_name or 'not named'})", None: "A GPU of no known vendor (no "
                    "deviceProperties, and kernel names of no known library)"}.get(r.vendor, f"A non-NVIDIA GPU ({r.gpu_name})")
            out.append(Finding("job.not-judged", "info", _who(r),
                               f"{what}: the timeline was judged; Tensor Core use (NVIDIA kernel names) and the node "
                               "join were not", {"file": r.source, "device": r.gpu_name, "vendor": r.vendor}))
        if not r.steps:
            out.append(Finding("job.not-judged", "info", _who(r),
                               "No ProfilerStep in this trace: per-step numbers (step time, DataLoader share, "
                               "stragglers) were not judged",
                               {"file": r.source},
                               "Record with a schedule and call prof.step() once per training step"))
    return out + _watch_not_judged(job)


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


@job_rule("job.dataloader")
def dataloader(job: Job) -> List[Finding]:
    out = []
    for r in job.facts.ranks:
        if r.dataloader_pct is None or r.dataloader_pct <= limit("dataloader_pct"):
            continue
        gpu = _node_gpu(job, r)
        cpus = _numa_cpus(job, gpu)
        evidence = {"dataloader_pct": r.dataloader_pct, "step_ms": r.step_ms, "idle_pct": r.idle_pct,
                    "host_wait_pct_of_idle": (r.idle_breakdown_pct or {}).get("host_wait")}
        remedy = ("Feed the GPU faster: DataLoader(num_workers=N) with N up to the CPUs near the GPU, "
                  "pin_memory=True with .to(device, non_blocking=True), persistent_workers=True, prefetch_factor=4; "
                  "move decoding/augmentation off the main process (or to the GPU: DALI, torchvision.transforms.v2 "
                  "on tensors)")
        if cpus:
            evidence["node"] = {"gpu": gpu.index, "numa_node": gpu.numa_node, "numa_cpus": cpus}
            remedy += (f"; the node's GPU{gpu.index} sits on NUMA node {gpu.numa_node} with {cpus} CPUs: keep "
                       f"num_workers under {cpus} and bind the rank there (`gpuprep plan`)")
        out.append(Finding("job.dataloader", "warn", _who(r),
                           f"The input pipeline starves the training step: {r.dataloader_pct:.1f}% of each step is spent "
                           "waiting for the DataLoader", evidence, remedy, source("dataloader_pct")))
    return out


@job_rule("job.h2d-pageable")
def pageable(job: Job) -> List[Finding]:
    out = []
    for r in _gpu_ranks(job):
        per_step = r.h2d_pageable / max(r.steps, 1)
        if not r.h2d_pageable or per_step < limit("pageable_per_step"):
            continue
        evidence = {"copies": r.h2d_pageable, "per_step": round(per_step, 2), "copy_ms": r.h2d_pageable_ms}
        note = _link_note(_node_gpu(job, r))
        if note:
            evidence["node"] = note
        out.append(Finding("job.h2d-pageable", "warn", _who(r),
                           f"{r.h2d_pageable} host-to-device copies from pageable memory ({per_step:.1f} per step): "
                           "each is staged and synchronous" + (f"; {note}" if note else ""), evidence,
                           "Copy from pinned memory: DataLoader(pin_memory=True) and .to(device, non_blocking=True) "
                           "(or tensor.pin_memory())", source("pageable_per_step")))
    return out


@job_rule("job.host-sync")
def host_sync(job: Job) -> List[Finding]:
    return [Finding("job.host-sync", "warn", _who(r),
                    f"The host blocks on the GPU inside the loop: {r.sync_calls_per_step:g} sync point(s) per step, "
                    f"{r.sync_pct:.1f}% of step time" + (f" ({', '.join(r.sync_names[:3])})" if r.sync_names else ""),
                    {"sync_pct": r.sync_pct, "per_step": r.sync_calls_per_step,
                                                        "calls": r.sync_names},
                    "Take .item(), .cpu(), print(loss) and torch.cuda.synchronize() out of the step: accumulate "
                    "metrics on the GPU (loss.detach()) and read them every N steps", source("sync_pct"))
            for r in _gpu_ranks(job) if r.sync_pct is not None and r.sync_pct > limit("sync_pct")]


@job_rule("job.launch-bound")
def launch_bound(job: Job) -> List[Finding]:
    out = []
    for r in _gpu_ranks(job):
        host_wait = (r.idle_breakdown_pct or {}).get("host_wait") or 0
        if None in (r.median_kernel_us, r.launch_cpu_pct, r.idle_pct) or \
                r.median_kernel_us >= limit("launch_median_kernel_us") or \
                r.launch_cpu_pct < limit("launch_cpu_pct") or host_wait < limit("launch_host_wait_pct") or \
                r.idle_pct < 100 - limit("gpu_idle_pct"):
            continue
        out.append(Finding("job.launch-bound", "warn", _who(r),
                           f"The GPU waits on kernel launches: median kernel {r.median_kernel_us:g} us, launch calls "
                           f"take {r.launch_cpu_pct:.0f}% of the GPU's busy time, GPU idle {r.idle_pct:.0f}%",
                           {"median_kernel_us": r.median_kernel_us, "launch_cpu_pct": r.launch_cpu_pct,
                            "kernels_per_step": r.kernels_per_step, "idle_pct": r.idle_pct,
                            "host_wait_pct_of_idle": host_wait},
                           "Give each kernel more work and launch fewer: a larger batch, fused ops, CUDA graphs or "
                           "torch.compile(mode='reduce-overhead')", source("launch_median_kernel_us")))
    return out


@job_rule("job.no-tensor-cores")
def no_tensor_cores(job: Job) -> List[Finding]:
    out = []
    for r in _gpu_ranks(job):
        if r.vendor != "nvidia" or r.tensor_core_pct is None or r.gemm_pct is None or not r.compute_capability:
            continue
        if float(r.compute_capability) < 7.0 or r.gemm_pct < limit("tensor_core_gemm_pct") or \
                r.tensor_core_pct >= limit("tensor_core_pct"):
            continue
        out.append(Finding("job.no-tensor-cores", "warn", _who(r),
                           f"Tensor Cores sit idle: {r.gemm_pct:.0f}% of kernel time is GEMM/convolution, "
                           f"{r.tensor_core_pct:.0f}% of it on Tensor Cores ({r.gpu_name}, compute capability "
                           f"{r.compute_capability})", {"gemm_pct": r.gemm_pct, "tensor_core_pct": r.tensor_core_pct,
                                                        "gpu": r.gpu_name},
                           "Train in mixed precision: torch.autocast(device_type='cuda', dtype=torch.bfloat16) "
                           "(fp16 with torch.amp.GradScaler on Volta/Turing); at least allow TF32 on Ampere and "
                           "later: torch.backends.cuda.matmul.allow_tf32 = True, torch.backends.cudnn.allow_tf32 = True",
                           source("tensor_core_pct")))
    return out


def _transport_note(job: Job) -> Optional[str]:
    node = job.node
    if not node:
        return None
    env = node.env or {}
    ib = [d.name for d in node.rdma_devices or [] if (d.link_layer or "").lower() == "infiniband"]
    if ib and (env.get("NCCL_IB_DISABLE") == "1" or env.get("NCCL_NET", "").lower() == "socket"):
        return (f"the node has InfiniBand ({', '.join(ib[:4])}) but NCCL is set to sockets "
                f"(NCCL_IB_DISABLE={env.get('NCCL_IB_DISABLE')}, NCCL_NET={env.get('NCCL_NET')})")
    return None


@job_rule("job.comm-exposed")
def comm_exposed(job: Job) -> List[Finding]:
    out = []
    for r in _gpu_ranks(job):
        if r.comm_pct is None or r.comm_pct < limit("comm_pct") or \
                (r.comm_overlap_pct or 0) >= limit("comm_overlap_pct"):
            continue
        evidence = {"comm_pct": r.comm_pct, "comm_overlap_pct": r.comm_overlap_pct}
        note = _transport_note(job)
        if note:
            evidence["node"] = note
        out.append(Finding("job.comm-exposed", "warn", _who(r),
                           f"Communication is exposed: NCCL kernels take {r.comm_pct:.0f}% of the GPU span, "
                           f"{r.comm_overlap_pct or 0:.0f}% of it overlapped with compute" + (f"; {note}" if note else ""),
                           evidence, "Overlap and shrink the all-reduce: DDP(bucket_cap_mb=...) tuned, "
                           "gradient_as_bucket_view=True, model.no_sync() for gradient accumulation, a larger batch "
                           "per GPU; check the transport (`gpuprep check`, NCCL_DEBUG=INFO)", source("comm_pct")))
    return out


def _compute_ms(rank: RankFacts) -> Optional[float]:
    """A rank's own work per step: the step less the time it waited in collectives for the others (the median
    of each step's difference), or the whole step where the trace shows no collective."""
    return rank.work_ms if rank.work_ms is not None else rank.step_ms


def _one_job(ranks: List[RankFacts]) -> bool:
    """Ranks of one job: each rank number once, and one world size."""
    numbers = [r.rank for r in ranks]
    return len(set(numbers)) == len(numbers) and len({r.world_size for r in ranks}) == 1


@job_rule("job.straggler", "job.mixed-jobs")
def straggler(job: Job) -> List[Finding]:
    ranked = [r for r in job.facts.ranks if r.rank is not None and _compute_ms(r) is not None]
    if len(ranked) < 2:
        return []
    if not _one_job(ranked):
        return [Finding("job.mixed-jobs", "info", "job", "These traces are not the ranks of one job (a rank number "
                        "twice, or different world sizes): their step times were not compared",
                        {"ranks": [[r.rank, r.world_size, r.source] for r in ranked]},
                        "Diagnose each job's traces on their own to compare its ranks")]
    work = {r.rank: _compute_ms(r) for r in ranked}
    out = []
    for rank, mine in sorted(work.items()):
        baseline = statistics.median(v for k, v in work.items() if k != rank)
        if mine > baseline * (1 + limit("straggler_pct") / 100) and mine - baseline >= limit("straggler_min_ms"):
            out.append(Finding("job.straggler", "warn", f"rank {rank}",
                               f"rank {rank} is the straggler: {mine:.1f} ms of its own work per step against "
                               f"{baseline:.1f} ms on the others, who wait for it in every collective",
                               {"work_ms": round(mine, 2), "others_median_ms": round(baseline, 2),
                                "per_rank_work_ms": {str(k): round(v, 2) for k, v in sorted(work.items())}},
                               REMEDY["straggler"],
                               source("straggler_pct")))
    return out


@job_rule("job.memory-full")
def memory_full(job: Job) -> List[Finding]:
    return [Finding("job.memory-full", "warn", _who(r), f"GPU memory peaked at {r.peak_memory_pct:.0f}% of the "
                    "device: the allocator is close to out-of-memory and to its cache thrashing",
                    {"peak_memory_pct": r.peak_memory_pct}, REMEDY["memory"],
                    source("memory_pct"))
            for r in job.facts.ranks if r.peak_memory_pct is not None and r.peak_memory_pct > limit("memory_pct")]


@job_rule("job.gpu-idle")
def gpu_idle(job: Job) -> List[Finding]:
    out = []
    for r in _gpu_ranks(job):
        # against the steps where the trace has them: a GPU idle between tight bursts of kernels is idle
        idle = r.step_idle_pct if r.step_idle_pct is not None else r.idle_pct
        if idle is None or idle <= limit("gpu_idle_pct"):
            continue
        evidence = {"idle_pct_of_steps": r.step_idle_pct, "idle_pct_of_kernel_span": r.idle_pct,
                    "idle_breakdown_pct": r.idle_breakdown_pct, "span_ms": r.span_ms}
        throttled = _throttle_note(_node_gpu(job, r))
        if throttled:
            evidence["node"] = throttled
        out.append(Finding("job.gpu-idle", "warn", _who(r),
                           f"The GPU is idle {idle:.0f}% of the " + ("step" if r.step_idle_pct is not None else
                                                                      "traced time") + " "
                           f"({(r.idle_breakdown_pct or {}).get('host_wait', 0):.0f}% of it waiting on the host)",
                           evidence, "See the other job.* findings for the cause; with none, the work per step is "
                           "too small for this GPU: a larger batch", source("gpu_idle_pct")))
    return out


def _throttle_note(gpu: Optional[Gpu]) -> Optional[str]:
    hard = [r for r in (gpu.clock_event_reasons or []) if r in THROTTLE_REASONS] if gpu else []
    return f"the node's GPU{gpu.index} is throttled: {', '.join(hard)}" if hard else None


@job_rule("job.summary")
def summary(job: Job) -> List[Finding]:
    """What was looked at, per rank: a pass line the report shows, so a quiet document is not an empty one."""
    out = []
    for r in job.facts.ranks:
        parts = [f"{r.steps} step(s)" + (f" of {r.step_ms:g} ms" if r.step_ms is not None else "")]
        if r.idle_pct is not None:
            parts.append(f"GPU idle {r.idle_pct:g}%, compute {r.compute_pct:g}%")
        if r.dataloader_pct is not None:
            parts.append(f"DataLoader {r.dataloader_pct:g}% of the step")
        out.append(Finding("job.summary", "pass", _who(r), "Read " + ", ".join(parts),
                           {"file": r.source, "gpu": r.gpu_name}))
    return out


# -- a running job (gpuprep watch): the same ids, judged from samples ------------------------------------------

def _median(values) -> Optional[float]:
    known = [v for v in values if v is not None]
    return statistics.median(known) if known else None


def _watched(job: Job) -> List[WatchRank]:
    return job.watch.ranks if job.watch else []


def _stack(rank: WatchRank, kind: str) -> float:
    return (rank.main_thread or {}).get(kind, 0.0)


def _who_pid(rank: WatchRank) -> str:
    return f"rank {rank.rank} (pid {rank.pid})" if rank.rank is not None else f"pid {rank.pid}"


def _gpu_busy(rank: WatchRank) -> bool:
    """The rank's GPU was busy (median utilisation at the busy mark): a main thread that waits then waits for the
    GPU's work, the steady state of a GPU-bound job, not a cause of idle GPUs."""
    util = _median(rank.gpu_util_pct)
    return util is not None and util >= limit("watch_busy_pct")


@job_rule("job.dataloader")
def watch_dataloader(job: Job) -> List[Finding]:
    out = []
    for r in _watched(job):
        util = _median(r.gpu_util_pct)
        if _stack(r, "dataloader") < limit("watch_stack_pct") or _gpu_busy(r):
            continue
        kind, words, remedy = _workers(r)
        evidence = {"main_thread_in_dataloader_pct": _stack(r, "dataloader"), "stack_samples": r.stack_samples,
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
            for r in _watched(job) if _stack(r, "sync") >= limit("watch_stack_pct") and not _gpu_busy(r)]


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


@job_rule("job.straggler", "job.comm-exposed")
def watch_straggler(job: Job) -> List[Finding]:
    """Ranks that wait for others while one does not: that one is the straggler. All waiting in collectives, GPUs
    not busy: the communication is exposed."""
    ranks = [r for r in _watched(job) if r.stack_samples]
    if not ranks or _hung(job):
        return []
    waiting = _waiting(ranks)
    working = [r for r in ranks if r not in waiting]
    if len(ranks) >= 2 and waiting and len(working) == 1:
        return [_straggler(working[0], waiting)]
    if len(waiting) == len(ranks):
        return _exposed(job, ranks)
    return []


def _how_waiting(rank: WatchRank, slow: WatchRank) -> str:
    if _stack(rank, "collective") >= limit("watch_stack_pct"):
        return f"rank {rank.rank}: in a collective in {_stack(rank, 'collective'):.0f}% of samples"
    return (f"rank {rank.rank}: CPU {_median(_steady(rank.cpu_pct)) or 0:.0f}% against its "
            f"{_median(_steady(slow.cpu_pct)) or 0:.0f}%")


def _straggler(slow: WatchRank, waiting: List[WatchRank]) -> Finding:
    how = "; ".join(_how_waiting(r, slow) for r in waiting)
    return Finding("job.straggler", "warn", _who_pid(slow),
                   f"{_who_pid(slow)} is the straggler: the other {len(waiting)} rank(s) wait for it ({how})",
                   {"waiting": {str(r.rank): _stack(r, "collective") for r in waiting},
                    "straggler_main_thread": slow.main_thread},
                   REMEDY["straggler"], source("straggler_pct"))


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


def _hung(job: Job) -> bool:
    """Still running at the end of the watch, and no rank used CPU time for the last samples."""
    ranks = _watched(job)
    window = int(limit("hang_samples"))
    if not job.watch or job.watch.job_ended:
        return False
    return bool(ranks) and all(len(r.cpu_seconds) > window and _quiet(r.cpu_seconds) >= window
                               for r in ranks if not r.ended)


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


@job_rule("job.hung-rank")
def watch_hung(job: Job) -> List[Finding]:
    """No rank advanced for the last samples: the ranks in a collective wait for the one that is not (a hang is
    ranks waiting on one another; one process alone is job.stalled)."""
    if len([r for r in _watched(job) if not r.ended]) < 2 or not _hung(job):
        return []
    ranks = [r for r in _watched(job) if not r.ended]
    # stopped inside torch (a collective, or DDP's all-reduce inside backward, a sync) waits for the others; a rank
    # stopped in the job's own code (or its DataLoader) never reached the collective
    waiting = [r for r in ranks if r.last_stack in ("collective", "compute_launch", "sync")]
    missing = [r for r in ranks if r.last_stack in ("other", "dataloader")]
    window = int(limit("hang_samples"))
    evidence = {"seconds_without_progress": window, "waiting": [_who_pid(r) for r in waiting],
                "elsewhere": {_who_pid(r): r.main_thread for r in missing}}
    if waiting and missing:
        return [Finding("job.hung-rank", "fail", _who_pid(r), f"The job hangs: {_who_pid(r)} never joins the "
                        f"collective the other {len(waiting)} rank(s) wait in", evidence,
                        "Dump that rank's stacks (py-spy dump --pid PID) to see where it stopped; with NCCL, "
                        "TORCH_NCCL_TRACE_BUFFER_SIZE and the flight recorder name the missing collective")
                for r in missing]
    return [Finding("job.hung-rank", "fail", "job", "The job hangs: no rank used CPU time for "
                    f"{window} samples" + (" and every rank waits in a collective (the missing rank is on another "
                                           "node?)" if waiting else ""), evidence,
                    "Dump every rank's stacks (py-spy dump); with NCCL run with NCCL_DEBUG=INFO and the flight "
                    "recorder (TORCH_NCCL_TRACE_BUFFER_SIZE) to name the rank that is missing")]


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
    return [Finding("job.not-judged", "info", "watch", note) for note in (job.watch.notes if job.watch else [])]


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


from . import across  # noqa: E402,F401 (registers the rules across ranks and nodes)
from .compare import COMPARE_IDS  # noqa: E402 (the comparison's ids are job ids too)

JOB_IDS = frozenset(i for fn in JOB_RULES for i in fn.ids) | COMPARE_IDS
