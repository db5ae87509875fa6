"""The burn-in's training load, sized from real GPUs' properties (deviceQuery outputs of real machines in
tests/data/gpus, provenance in PROVENANCE.tsv): every GEMM fills the GPU with full waves of tiles, is
compute-bound by a wide margin, one step is long enough that launch overhead is noise, and the load
leaves most of the memory free."""
import math
import re
from pathlib import Path

import pytest

from gpuprep.burnin.load import FLOPS_PER_SM_CLOCK, GpuProps, cpu_load, plan_load

DATA = Path(__file__).parent / "data" / "gpus"


def device_query(path: Path) -> dict:
    text = path.read_text()
    name = re.search(r'^Device 0: "(.+)"', text, re.M).group(1)
    major, minor = re.search(r"Capability Major/Minor version number:\s+(\d+)\.(\d+)", text).groups()
    memory = int(re.search(r"Total amount of global memory:.*\((\d+) bytes\)", text).group(1))
    sms = int(re.search(r"\(\s*(\d+)\) Multiprocessors", text).group(1))
    clock = int(re.search(r"GPU Max Clock rate:\s+(\d+) MHz", text).group(1))
    mem_clock = int(re.search(r"Memory Clock rate:\s+(\d+) Mhz", text).group(1))
    bus = int(re.search(r"Memory Bus Width:\s+(\d+)-bit", text).group(1))
    return {"props": GpuProps(name=name, sm_count=sms, memory_bytes=memory, capability=(int(major), int(minor)),
                              max_sm_clock_mhz=clock),
            "bandwidth": mem_clock * 1e6 * 2 * bus / 8}          # double data rate, bytes per second


GPUS = sorted(DATA.glob("*.deviceQuery.txt"))


def test_the_issue_s_gpus_are_all_here():
    names = {device_query(p)["props"].name for p in GPUS}
    for wanted in ("H100", "A100", "L40S", "RTX 4090", "T4"):
        assert any(wanted in name for name in names), wanted


@pytest.mark.parametrize("path", GPUS, ids=[p.name.split(".")[0] for p in GPUS])
def test_the_load_needs_most_of_the_gpu(path):
    gpu = device_query(path)
    props, plan = gpu["props"], plan_load(gpu["props"])
    # full waves: 128x128 output tiles of the batch x width GEMM over all SMs, the last wave >= 85% busy
    tiles = math.ceil(plan.batch / 128) * math.ceil(plan.width / 128)
    waves = math.ceil(tiles / props.sm_count)
    assert tiles >= 4 * props.sm_count and tiles / (waves * props.sm_count) >= 0.85
    # compute-bound: the GEMM's FLOPs per byte moved is several times the GPU's ridge point
    peak = FLOPS_PER_SM_CLOCK[props.capability] * props.sm_count * props.max_sm_clock_mhz * 1e6
    intensity = 2 * plan.batch * plan.width ** 2 / (2 * (2 * plan.batch * plan.width + plan.width ** 2))
    assert intensity >= 3 * peak / gpu["bandwidth"]
    # a step of >= 10 ms at peak: a few dozen kernel launches (~10 us each) are under 5% of it
    step_s = 6 * plan.batch * plan.width ** 2 * plan.layers / peak
    assert step_s >= 0.010 and 3 * plan.layers * 10e-6 < 0.05 * step_s
    # weights, gradients and DDP buckets in fp32 plus bf16 activations: at most 30% of the memory
    footprint = 12 * plan.width ** 2 * plan.layers + 4 * plan.batch * plan.width * plan.layers
    assert footprint <= 0.30 * props.memory_bytes
    assert plan.dtype == ("bf16" if props.capability >= (8, 0) else "fp16")


def test_the_old_fixed_load_would_fail_the_same_criteria_on_an_h100():
    h100 = device_query(DATA / "h100-sxm5-80gb.deviceQuery.txt")["props"]
    tiles = math.ceil(64 / 128) * math.ceil(1024 / 128)       # wave 1's 1024-wide MLP on a batch of 64
    assert tiles < 4 * h100.sm_count


def test_cpu_ranks_keep_a_small_load():
    plan = cpu_load()
    assert plan.width * plan.batch * plan.layers <= 256 * 64 * 2 and plan.dtype == "fp32"


@pytest.mark.parametrize("gpu", ["v100-sxm2-16gb", "t4"])
def test_the_fp16_load_keeps_its_gradients_above_fp16s_underflow(gpu):
    """Volta/Turing run the load in fp16. With nn.Linear's default init and a mean over every element, the output
    gradient was ~1e-10, below fp16's smallest subnormal (6e-8): the backward multiplied zeros. The worker's own
    model and loss, at the load's real width, depth and batch (a few rows computed, the batch tiled from them)."""
    torch = pytest.importorskip("torch")
    from gpuprep.burnin.worker import build_model, training_loss
    plan = plan_load(device_query(DATA / f"{gpu}.deviceQuery.txt")["props"])
    assert plan.dtype == "fp16"
    torch.manual_seed(1234)
    model = build_model(torch, plan.width, plan.layers)
    with torch.no_grad():
        rows = model(torch.randn(4, plan.width))
    output = rows.repeat(plan.batch // 4, 1).requires_grad_(True)
    training_loss(output).backward()
    grad = output.grad.half()
    assert grad.ne(0).float().mean() > 0.99, "the output gradient flushes to zero in fp16"
    assert grad.float().abs().max() < 65504 / 2 ** 16     # the GradScaler's first scale (2**16) cannot overflow it
