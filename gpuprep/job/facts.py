"""The typed facts of a training job, per rank: what the job rules read. Made from profiler traces
(job/metrics.py); every number is None where the trace cannot tell it (a CPU-only trace has no GPU time)."""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any, Dict, List, Optional


@dataclass
class RankFacts:
    rank: Optional[int]
    source: str                              # the trace file
    host: Optional[str] = None               # the host it was recorded on, where the file's name says (reader.host_of)
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
    step_ms_each: Optional[List[float]] = None      # every step's time, in order (the heat map's row)
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
    step_idle_pct: Optional[float] = None    # the GPU's idle share of the ProfilerStep spans (not of its kernel span)
    # per step, the GPU time each cause holds (dataloader, host_sync, host_other, comm, h2d_pageable), ms: the most
    # that removing it would save
    exposed_ms: Optional[Dict[str, float]] = None
    peak_memory_pct: Optional[float] = None
    gpu_kernels: int = 0

    def to_dict(self) -> dict:
        return dataclasses.asdict(self)


@dataclass
class JobFacts:
    ranks: List[RankFacts]
    collectives: List[Any] = field(default_factory=list)    # flight.RankCollectives: each rank's flight recorder
    ras: Any = None                                         # ras.RasReport: what NCCL's RAS service said

    def to_dict(self) -> dict:
        return {"ranks": [r.to_dict() for r in self.ranks], "collectives": [c.to_dict() for c in self.collectives],
                "ras": self.ras.to_dict() if self.ras is not None else None}


@dataclass
class WatchRank:
    """One rank of a running job, as `gpuprep watch` sampled it (per-sample series, oldest first)."""
    rank: Optional[int]
    pid: int
    gpu: Optional[str] = None                    # the GPU's UUID
    samples: int = 0
    main_thread: Optional[Dict[str, float]] = None   # stack-class shares (dataloader, sync, collective, ...), %
    stack_samples: int = 0
    startup_samples: int = 0                         # stack samples before the first step frame, left out of the shares
    last_stack: Optional[str] = None                 # where the main thread was at the last stack sample
    cpu_pct: List[float] = field(default_factory=list)
    cpu_seconds: List[float] = field(default_factory=list)
    switches: List[int] = field(default_factory=list)   # per sample: the main thread's voluntary context switches
    stopped: List[bool] = field(default_factory=list)   # per sample: the process was stopped (state T or t)
    workers: int = 0
    worker_cpu_pct: List[float] = field(default_factory=list)
    worker_running_pct: List[float] = field(default_factory=list)     # per sample: workers on or waiting for a CPU
    worker_disk_wait_pct: List[float] = field(default_factory=list)   # per sample: workers waiting on a disk (D)
    gpu_util_pct: List[Optional[float]] = field(default_factory=list)
    sm_clock_pct: List[Optional[float]] = field(default_factory=list)
    power_pct: List[Optional[float]] = field(default_factory=list)
    memory_pct: List[Optional[float]] = field(default_factory=list)
    pcie_rx_mbps: List[Optional[float]] = field(default_factory=list)
    throttle_reasons: List[List[str]] = field(default_factory=list)
    power_limit_of_default_pct: List[Optional[float]] = field(default_factory=list)   # enforced limit / default
    allowed_cpus: Optional[str] = None                # the CPUs the rank may run on (cpulist)
    ran_on_cpus: List[List[int]] = field(default_factory=list)   # per sample: the CPUs the rank and workers were on
    cpu_pressure_pct: List[float] = field(default_factory=list)  # per sample: its node's CPU pressure (PSI some avg10)
    tensor_active_pct: List[Optional[float]] = field(default_factory=list)   # GPM (Hopper+): SMs on Tensor Cores
    ended: bool = False
    ended_at: Optional[float] = None                 # when it was first seen gone (seconds since the epoch)
    stack_sigs: List[Optional[str]] = field(default_factory=list)   # per stack sample: the stack's fingerprint
    sites: List[list] = field(default_factory=list)  # per stack sample: [the collective it is in, the job's line]
    host: Optional[str] = None                       # its node, where the watch spans the job's nodes
    node_lost: bool = False                          # its node's watcher stopped answering

    def to_dict(self) -> dict:
        return dataclasses.asdict(self)


@dataclass
class WatchFacts:
    ranks: List[WatchRank]
    seconds: float = 0.0
    samples: int = 0
    notes: List[str] = field(default_factory=list)    # signals that could not be read, and what that costs
    exit_code: Optional[int] = None                   # `watch -- CMD`: the job's own exit code
    nccl_transports: List[str] = field(default_factory=list)   # what NCCL's log said it used: IB, Socket, ...
    job_ended: bool = False                           # the job ended while watched (no hang can be judged)
    signal: Optional[int] = None                      # the signal that stopped the watch (SIGINT, SIGTERM), if any
    ras: Any = None                                   # ras.RasReport of the node's NCCL processes, where they answer
    # a watch across a job's nodes: what each node's own check said (None until it arrives), the nodes
    # whose watcher stopped answering, and each rank's flight recorder dump where the job wrote one
    nodes: Dict[str, Optional[dict]] = field(default_factory=dict)
    lost_nodes: List[str] = field(default_factory=list)
    job_id: Optional[str] = None
    job_state: Optional[str] = None                   # Slurm's JobState at the end of the watch
    at: Optional[float] = None                        # when these facts were taken (seconds since the epoch)
    collectives: List[Any] = field(default_factory=list)

    def to_dict(self) -> dict:
        out = {"ranks": [r.to_dict() for r in self.ranks], "seconds": round(self.seconds, 1),
               "samples": self.samples, "notes": self.notes, "exit_code": self.exit_code,
               "nccl_transports": self.nccl_transports, "job_ended": self.job_ended, "signal": self.signal,
               "ras": self.ras.to_dict() if self.ras is not None else None}
        if self.job_id is not None:
            out.update(job_id=self.job_id, job_state=self.job_state, nodes=self.nodes, lost_nodes=self.lost_nodes,
                       collectives=[c.to_dict() for c in self.collectives])
        return out


def _share(part, whole) -> Optional[float]:
    return round(100.0 * part / whole, 1) if part is not None and whole else None


def watch_rank(process) -> WatchRank:
    """A watch.RankProcess's samples as typed facts (percentages against each GPU's own maxima)."""
    from ..parsers.values import compress_cpulist      # here: diagnose, which never needs it, starts faster without
    from .stacks import shares, steady
    g = process.gpu_samples
    kept = steady(process.stacks)
    return WatchRank(rank=process.rank if process.rank is not None else process.local_rank, pid=process.pid,
                     gpu=process.gpu_uuid, samples=len(process.cpu_seconds),
                     main_thread=shares(kept) if kept else None, stack_samples=len(kept),
                     startup_samples=len(process.stacks) - len(kept),
                     last_stack=process.stacks[-1] if process.stacks else None,
                     cpu_pct=process.cpu_pct, cpu_seconds=process.cpu_seconds, switches=process.switches,
                     stopped=process.stopped,
                     workers=process.workers, worker_cpu_pct=process.worker_cpu_pct,
                     worker_running_pct=process.worker_running_pct,
                     worker_disk_wait_pct=process.worker_disk_wait_pct,
                     gpu_util_pct=[s.get("gpu_util_pct") for s in g],
                     sm_clock_pct=[_share(s.get("sm_clock_mhz"), s.get("max_sm_clock_mhz")) for s in g],
                     power_pct=[_share(s.get("power_w"), s.get("power_limit_w")) for s in g],
                     memory_pct=[_share(s.get("memory_used_mib"), s.get("memory_total_mib")) for s in g],
                     pcie_rx_mbps=[s.get("pcie_rx_mbps") for s in g],
                     throttle_reasons=[s.get("throttle_reasons") or [] for s in g],
                     power_limit_of_default_pct=[_share(s.get("power_limit_w"), s.get("power_default_limit_w"))
                                                 for s in g],
                     allowed_cpus=compress_cpulist(process.allowed_cpus) if process.allowed_cpus else None,
                     ran_on_cpus=process.ran_on, cpu_pressure_pct=process.cpu_pressure_pct,
                     tensor_active_pct=[s.get("tensor_active_pct") for s in g], ended=process.ended,
                     ended_at=process.ended_at, stack_sigs=process.stack_sigs, sites=process.sites,
                     host=process.host)
