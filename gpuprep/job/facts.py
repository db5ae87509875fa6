"""The typed facts of a training job, per rank: what the job rules read. Made from profiler traces
(job/metrics.py); every number is None where the trace cannot tell it (a CPU-only trace has no GPU time)."""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Dict, List, Optional


@dataclass
class RankFacts:
    rank: Optional[int]
    source: str                              # the trace file
    complete: bool = True                    # False: the file was cut short and read up to `bytes_read`
    bytes_read: int = 0
    vendor: Optional[str] = None             # nvidia | amd | None (no device named)
    gpu_name: Optional[str] = None
    compute_capability: Optional[str] = None
    gpu_memory_bytes: Optional[int] = None
    world_size: Optional[int] = None
    backend: Optional[str] = None
    # HTA's temporal breakdown over the GPU span (first kernel start to last kernel end)
    span_ms: Optional[float] = None
    idle_pct: Optional[float] = None
    compute_pct: Optional[float] = None
    non_compute_pct: Optional[float] = None
    idle_breakdown_pct: Optional[Dict[str, float]] = None      # host_wait, kernel_wait, other: shares of idle time
    steps: int = 0
    step_ms: Optional[float] = None          # median ProfilerStep span (the last, often cut, step excluded)
    step_ms_spread: Optional[List[float]] = None    # [min, max]
    dataloader_pct: Optional[float] = None   # share of step time inside the DataLoader's __next__
    comm_pct: Optional[float] = None         # merged communication kernel time over the GPU span
    comm_overlap_pct: Optional[float] = None # share of communication time overlapped by compute (HTA)
    comm_wait_ms: Optional[float] = None     # median per step: time the main thread spent in collectives (CPU side)
    work_ms: Optional[float] = None          # median per step: the step less that wait (the rank's own work)
    kernels_per_step: Optional[float] = None
    median_kernel_us: Optional[float] = None
    launch_cpu_pct: Optional[float] = None   # kernel-launch API time on the CPU against GPU busy time
    gemm_pct: Optional[float] = None         # GEMM/convolution kernel time over all kernel time
    tensor_core_pct: Optional[float] = None  # share of GEMM/convolution kernel time in Tensor Core kernels
    h2d_pageable: int = 0                    # host-to-device copies from pageable memory
    h2d_pageable_ms: float = 0.0
    sync_calls_per_step: Optional[float] = None
    sync_pct: Optional[float] = None         # share of step time the host spent blocked in sync points
    sync_names: List[str] = field(default_factory=list)
    peak_memory_pct: Optional[float] = None
    gpu_kernels: int = 0

    def to_dict(self) -> dict:
        return dataclasses.asdict(self)


@dataclass
class JobFacts:
    ranks: List[RankFacts]

    def to_dict(self) -> dict:
        return {"ranks": [r.to_dict() for r in self.ranks]}
