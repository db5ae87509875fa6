"""How big the burn-in's work is on one GPU: pure functions of the GPU's properties (no torch here).

Training load: a stack of square bf16 Linear layers (fp16 on Volta/Turing, which lack bf16), sized like
gpu-burn's and DCGM targeted_stress's GEMMs so the tensor cores stay busy and the GPU runs at its power
limit: the batch gives every GEMM several full waves of 128x128 output tiles over all SMs and keeps it
squarish (compute-bound), the width comes from the memory size, and the depth makes one step last about STEP_TARGET_S at the GPU's peak rate.

Memory check: one buffer of 90% of the free memory less a fixed margin, verified chunk by chunk, so its
peak extra allocation is the buffer plus one chunk (the worker's memory_check).
"""
from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Optional

TILE = 128                    # the output tile of cuBLAS's large bf16/fp16 tensor-core kernels
WAVES = 8                     # full waves of tiles per GEMM: the last partial wave costs < 1/8
STEP_TARGET_S = 0.08          # one training step at peak rate: long enough to hide launch and sync
LOAD_MEMORY_SHARE = 0.25      # of the GPU's memory for weights, gradients, DDP buckets, activations
BYTES_PER_PARAMETER = 12      # fp32 weight + fp32 gradient + DDP's fp32 bucket copy of the gradient
MIN_LAYERS, MAX_LAYERS = 2, 32

# Dense tensor-core FLOPs per SM per clock at the load's dtype, by compute capability: NVIDIA's
# architecture whitepapers (V100, T4, A100, GA102, AD102, H100, B200; recalled, not re-fetched). It only
# sets how deep the stack is (a step of ~80 ms instead of ~40 or ~160 if it is off by 2x), never a verdict.
FLOPS_PER_SM_CLOCK = {(7, 0): 1024, (7, 5): 1024, (8, 0): 2048, (8, 6): 1024, (8, 7): 1024, (8, 9): 1024,
                      (9, 0): 4096, (10, 0): 8192, (12, 0): 1024}

MEMORY_FREE_SHARE = 0.90      # of the free memory, for the memory check's buffer
MEMORY_MARGIN = 512 << 20     # the CUDA context's growth, NCCL's lazily allocated buffers, the allocator's rounding
MEMORY_CHUNK = 64 << 20       # the unit filled and verified at once (and the extra it needs)
CPU_MEMORY_BYTES = 64 << 20   # on the CPU: enough to exercise the path, not to test host memory


@dataclass(frozen=True)
class GpuProps:
    name: str
    sm_count: int
    memory_bytes: int
    capability: tuple            # (major, minor)
    max_sm_clock_mhz: Optional[int] = None


@dataclass(frozen=True)
class LoadPlan:
    width: int
    batch: int
    layers: int
    dtype: str                   # bf16 | fp16 | fp32 (CPU)
    flops_per_step: float
    memory_bytes: int
    expected_step_s: Optional[float]      # at the GPU's peak rate

    def to_dict(self) -> dict:
        return asdict(self)


def _round_up(value: float, unit: int) -> int:
    return int(-(-value // unit) * unit)


def peak_flops(props: GpuProps) -> Optional[float]:
    per_clock = FLOPS_PER_SM_CLOCK.get(tuple(props.capability))
    if per_clock is None or not props.max_sm_clock_mhz:
        return None
    return per_clock * props.sm_count * props.max_sm_clock_mhz * 1e6


def step_flops(width: int, batch: int, layers: int) -> float:
    """Forward (2BW^2 per layer) and backward (4BW^2: input and weight gradients)."""
    return 6.0 * batch * width * width * layers


def plan_load(props: GpuProps) -> LoadPlan:
    gib = props.memory_bytes / (1 << 30)
    width = 8192 if gib >= 20 else 4096 if gib >= 12 else 2048
    # enough tiles for full waves, and a squarish GEMM (batch >= width/2: FLOPs per byte ~ width/4), which
    # stays compute-bound even on GPUs with little bandwidth for their compute (L4: ~400 FLOPs per byte)
    batch = _round_up(max(WAVES * props.sm_count * TILE * TILE / width, width / 2), TILE)
    budget = LOAD_MEMORY_SHARE * props.memory_bytes
    per_layer = BYTES_PER_PARAMETER * width * width + 2 * 2 * batch * width   # + bf16 input and output kept
    by_memory = max(MIN_LAYERS, int(budget // per_layer))
    peak = peak_flops(props)
    by_time = round(STEP_TARGET_S * peak / step_flops(width, batch, 1)) if peak else MAX_LAYERS
    layers = max(MIN_LAYERS, min(MAX_LAYERS, by_memory, by_time))
    flops = step_flops(width, batch, layers)
    return LoadPlan(width=width, batch=batch, layers=layers, dtype="bf16" if props.capability >= (8, 0) else "fp16",
                    flops_per_step=flops, memory_bytes=int(per_layer * layers),
                    expected_step_s=flops / peak if peak else None)


def cpu_load() -> LoadPlan:
    """The CPU ranks (gloo) prove the harness, not a processor: a small stack."""
    return LoadPlan(width=256, batch=64, layers=2, dtype="fp32", flops_per_step=step_flops(256, 64, 2),
                    memory_bytes=BYTES_PER_PARAMETER * 256 * 256 * 2, expected_step_s=None)


def memory_check_bytes(free_bytes: int, chunk: int = MEMORY_CHUNK) -> int:
    """The memory check's buffer: 90% of free less the margin, whole chunks, never negative."""
    usable = int(free_bytes * MEMORY_FREE_SHARE) - MEMORY_MARGIN
    return max(0, usable // chunk * chunk)
