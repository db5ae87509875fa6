"""The job rules that read profiler traces (gpuprep diagnose): one rank's timeline each, per step. Pure."""
from __future__ import annotations

import shlex
import statistics
from typing import TYPE_CHECKING, List, Optional

from ...parsers.nvsmi import THROTTLE_REASONS
from ...parsers.values import expand_cpulist
from ...rules import Finding
from ..facts import RankFacts
from ..judge import REMEDY, Job, _transport_note, _who, job_rule, limit, source

if TYPE_CHECKING:
    from ...snapshot import Gpu

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


@job_rule("job.straggler", "job.mixed-jobs", "job.slow-pattern")
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
                               {"rank": rank, "work_ms": round(mine, 2), "others_median_ms": round(baseline, 2),
                                "per_rank_work_ms": {str(k): round(v, 2) for k, v in sorted(work.items())}},
                               REMEDY["straggler"],
                               source("straggler_pct")))
    slow = [f.evidence["rank"] for f in out]
    return out + ([_where_slow(ranked, slow)] if slow else [])


def _where_slow(ranked: List[RankFacts], slow: List[int]) -> Finding:
    """Whether one rank, one node's ranks, or ranks on several nodes are slow: the node is the suspect only where
    the slow ranks are all of one host's (the host from each trace file's name, where it says)."""
    host = {r.rank: r.host for r in ranked}
    words = ", ".join(str(r) for r in slow)
    if len(slow) == 1:
        on = f" on {host[slow[0]]}" if host[slow[0]] else ""
        return Finding("job.slow-pattern", "info", "job", f"One rank is slow: rank {slow[0]}{on}; the other "
                       f"{len(ranked) - 1} are alike", {"pattern": "one-rank", "ranks": slow, "hosts": [host[slow[0]]]})
    if any(h is None for h in host.values()):
        return Finding("job.slow-pattern", "info", "job", f"{len(slow)} of {len(ranked)} ranks are slow (ranks "
                       f"{words}); whether they share a node is not known: the trace files' names do not say which "
                       "host recorded each", {"pattern": "not-known", "ranks": slow},
                       "Keep PyTorch's default worker name (HOSTNAME_PID) in tensorboard_trace_handler, so each "
                       "rank's file names its host")
    hosts = sorted({host[r] for r in slow})
    if len(hosts) == 1:
        others = sorted(r.rank for r in ranked if r.host == hosts[0] and r.rank not in slow)
        return Finding("job.slow-pattern", "info", "job", f"The slow ranks are one node's: {hosts[0]} (ranks {words})"
                       + (f"; its ranks {', '.join(map(str, others))} are not slow" if others else ""),
                       {"pattern": "one-node", "ranks": slow, "hosts": hosts},
                       f"Check that node: gpuprep check on {shlex.quote(hosts[0])} (its GPUs' clocks and throttling, "
                       "PCIe links, NUMA placement), or run the job without it")
    return Finding("job.slow-pattern", "info", "job", f"{len(slow)} slow ranks on {len(hosts)} hosts (ranks {words}): "
                   "no one node's fault", {"pattern": "spread", "ranks": slow, "hosts": hosts},
                   "Look at what those ranks do more than the others: larger or uneven shards, a code path only some "
                   "ranks take; then the nodes one by one")


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
