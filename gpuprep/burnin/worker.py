"""One burn-in rank, started by torchrun. The only module of gpuprep that imports torch.

Phases within the time budget: a DDP training loop on a GEMM-heavy stack sized to the GPU (load.py)
so it runs near its power limit (per-step compute time measured under `no_sync`, so a slow rank shows
as itself and not as everyone's wait), an all-reduce sweep with nccl-tests' bandwidth definitions, and
a memory pattern check over most of the free memory. Results go to one JSON file per rank.

CUDA calls, checked against torch 2.13's API (the floor is 2.4, burnin.TORCH_FLOOR): torch.cuda.set_device before init_process_group, which
gets device_id (binds NCCL's communicator to this GPU eagerly; barriers need no device guess);
get_device_properties -> name, major/minor, multi_processor_count, total_memory, uuid;
is_bf16_supported(including_emulation=False) (the default True says yes on Volta/Turing, which only
emulate bf16); mem_get_info(device) -> (free, total) after empty_cache() so the caching allocator's
idle blocks count as free; torch.autocast(device_type="cuda", dtype=...); Generator(device=...) for
the seeded pattern.
"""
from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import socket
import time
from dataclasses import dataclass
from typing import Optional

SWEEP_TRIALS = 5             # timed trials per message size; the median trial is reported
SWEEP_WARMUP = 5
SWEEP_TRIAL_MAX_S = 0.1      # long enough to average many calls, short enough for the budget
SWEEP_MIN_ITERATIONS, SWEEP_MAX_ITERATIONS = 3, 2000
SWEEP_SHARE = 0.3            # of --duration, for the whole sweep
SWEEP_MEMORY_SHARE = 16      # the largest all-reduce message: at most 1/16 of the GPU's memory
OTHER_COLLECTIVES_MIB = 256  # all-gather / reduce-scatter at one size (a full copy per rank for all-gather)
LEARNING_RATE = 1e-3


def build_model(torch, width: int, layers: int, device=None):
    """The load: square bias-free Linear layers with ReLUs between. He initialisation keeps the activations'
    scale through the stack; nn.Linear's default init shrinks it about 2.4x a layer, so on a deep fp16 stack the
    output and its gradient underflowed to zero and the GEMMs multiplied zeros, below the GPU's power limit.
    Built and initialised on the device: on the CPU one 8192x8192 layer took 1.7-4.7 s on a busy host, and an
    H100's 22 layers outlasted the training window (a run that trained nothing)."""
    stack = []
    for _ in range(layers):
        linear = torch.nn.Linear(width, width, bias=False, device=device)
        torch.nn.init.kaiming_normal_(linear.weight, nonlinearity="relu")
        stack += [linear, torch.nn.ReLU()]
    return torch.nn.Sequential(*stack[:-1])


def training_loss(output):
    """Sum over the features, mean over the batch: d loss / d output = 2 * output / rows, well inside fp16's
    range (a mean over every element divided it by rows * width as well, ~1e-10 on a V100-sized load)."""
    return output.float().pow(2).sum() / output.shape[0]


def _test_hook(rank: int):
    """Test-only switches (CI has no faulty hardware), run after each training step: slow one rank, or kill it
    mid-run. None when neither is set for this rank (the training loop then knows nothing of them)."""
    slow = os.environ.get("GPUPREP_BURNIN_TEST_SLOW_RANK")
    die = os.environ.get("GPUPREP_BURNIN_TEST_DIE_RANK")
    slow, die = (slow is not None and int(slow) == rank), (die is not None and int(die) == rank)
    if not (slow or die):
        return None

    def after_step(steps: int) -> None:
        if slow:
            time.sleep(0.03)
        if die and steps == 3:
            os._exit(17)
    return after_step


TUNING_PREFIXES = ("NCCL_", "GLOO_", "OMP_", "MKL_", "TORCH_NCCL_")


def _tuning_env() -> dict:
    """The NCCL/gloo/OpenMP settings this rank ran with, as it saw them (the report shows what the rank got, not
    what the launcher meant to give it)."""
    return {key: value for key, value in sorted(os.environ.items()) if key.startswith(TUNING_PREFIXES)}


def _arguments():
    parser = argparse.ArgumentParser()
    parser.add_argument("--duration", type=float, required=True)
    parser.add_argument("--out", required=True)
    parser.add_argument("--backend", default="auto")
    parser.add_argument("--max-mib", type=int, default=64)
    parser.add_argument("--memory-mib", type=int, default=0, help="Memory check buffer (0 = sized from free memory).")
    parser.add_argument("--timeout", type=float, default=60)
    return parser.parse_args()


@dataclass
class _Load:
    """How this rank trains: the load's size, mixed precision, and the all-reduce sweep's largest message."""
    plan: object
    autocast: object
    scaler: object
    max_mib: int
    monitor: Optional["_GpuMonitor"] = None


def _gpu_load(torch, device, local_rank: int, max_mib: int, result: dict) -> _Load:
    from gpuprep.burnin.load import GpuProps, plan_load
    props = torch.cuda.get_device_properties(device)
    uuid = str(getattr(props, "uuid", "") or "") or None
    monitor = _GpuMonitor(local_rank, uuid)
    result.update(gpu_index=local_rank, gpu_name=props.name, gpu_uuid=uuid,
                  pci_bus_id=(monitor.before or {}).get("pci_bus_id"))
    plan = plan_load(GpuProps(name=props.name, sm_count=props.multi_processor_count,
                              memory_bytes=props.total_memory, capability=(props.major, props.minor),
                              max_sm_clock_mhz=(monitor.before or {}).get("max_sm_clock_mhz")))
    bf16 = torch.cuda.is_bf16_supported(including_emulation=False)
    autocast = torch.autocast(device_type="cuda", dtype=torch.bfloat16 if bf16 else torch.float16)
    # fp16 (Volta/Turing) has 5 exponent bits: without loss scaling small gradients flush to zero
    scaler = torch.amp.GradScaler("cuda", enabled=not bf16)
    return _Load(plan, autocast, scaler, min(max_mib, props.total_memory // SWEEP_MEMORY_SHARE >> 20), monitor)


def _cpu_load(torch, max_mib: int) -> _Load:
    from gpuprep.burnin.load import cpu_load
    return _Load(cpu_load(), torch.autocast(device_type="cpu", enabled=False),
                 torch.amp.GradScaler("cpu", enabled=False), max_mib)


def _train(torch, dist, device, use_cuda: bool, load: _Load, seconds: float, progress, after_step) -> dict:
    """DDP training for `seconds` counted from the end of the first step (building the model, DDP's first
    broadcast and the first step's kernel selection are set-up, however long a busy host takes for them); each
    step's compute time (no gradient sync) and full step time. The model's memory is freed before returning."""
    from torch.nn.parallel import DistributedDataParallel as DDP
    torch.manual_seed(1234)
    built = time.perf_counter()
    model = build_model(torch, load.plan.width, load.plan.layers, device)
    ddp = DDP(model, device_ids=[device.index] if use_cuda else None)
    optimiser = torch.optim.SGD(ddp.parameters(), lr=LEARNING_RATE)
    batch = torch.randn(load.plan.batch, load.plan.width, device=device)
    sync = torch.cuda.synchronize if use_cuda else (lambda: None)
    compute_ms, step_ms = [], []
    deadline = None
    while True:
        # every rank must agree on the step count, so the deadline is decided collectively
        go = torch.tensor([1.0 if deadline is None or time.monotonic() < deadline else 0.0], device=device)
        dist.all_reduce(go, op=dist.ReduceOp.MIN)
        if go.item() == 0.0:
            break
        progress("training", 0.0 if deadline is None else 1 - max(0.0, deadline - time.monotonic()) / seconds)
        start = time.perf_counter()
        with ddp.no_sync():
            with load.autocast:
                loss = training_loss(ddp(batch))
            load.scaler.scale(loss).backward()
        if after_step:              # tests only: slow this rank's compute, or kill it after 3 steps
            after_step(len(step_ms))
        sync()
        compute_ms.append((time.perf_counter() - start) * 1000)
        start = time.perf_counter()
        optimiser.zero_grad(set_to_none=True)
        with load.autocast:
            loss = training_loss(ddp(batch))
        load.scaler.scale(loss).backward()
        load.scaler.step(optimiser)
        load.scaler.update()
        sync()
        step_ms.append((time.perf_counter() - start) * 1000)
        if deadline is None:
            deadline = time.monotonic() + seconds
            setup_ms = (time.perf_counter() - built) * 1000     # the model's build, DDP's broadcast, the first step
    # the load's memory goes back to the GPU before the memory check sizes itself from what is free
    del ddp, model, optimiser, batch
    return {"steps": len(step_ms), "compute_ms": [round(v, 3) for v in compute_ms],
            "step_ms": [round(v, 3) for v in step_ms], "setup_ms": round(setup_ms, 1)}


def main() -> None:
    args = _arguments()
    import torch
    import torch.distributed as dist

    rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    local_rank = int(os.environ.get("LOCAL_RANK", 0))
    use_cuda = args.backend == "nccl" or (args.backend == "auto" and torch.cuda.is_available())
    backend = "nccl" if use_cuda else "gloo"
    device = torch.device(f"cuda:{local_rank}" if use_cuda else "cpu")
    if use_cuda:
        torch.cuda.set_device(device)
    dist.init_process_group(backend, timeout=dt.timedelta(seconds=args.timeout),
                            device_id=device if use_cuda else None)
    if local_rank == 0:
        _write(os.path.join(args.out, "joined"), {"rank": rank, "world_size": world})
    global _heartbeat
    progress = _heartbeat = Heartbeat(os.path.join(args.out, "progress.json") if local_rank == 0 else None)
    result = {"rank": rank, "world_size": world, "host": socket.gethostname(), "backend": backend,
              "device": str(device), "local_rank": local_rank, "env": _tuning_env()}
    load = _gpu_load(torch, device, local_rank, args.max_mib, result) if use_cuda else _cpu_load(torch, args.max_mib)
    result["load"] = load.plan.to_dict()
    phase = load.monitor.phase if load.monitor is not None else (lambda name: None)
    phase("training")
    result.update(_train(torch, dist, device, use_cuda, load, args.duration * 0.5, progress, _test_hook(rank)))
    phase("collectives")
    progress("all-reduce sweep", 0.0)
    result["allreduce"] = _sweep(torch, dist, device, world, load.max_mib, use_cuda, args.duration * SWEEP_SHARE)
    progress("all-gather / reduce-scatter", 0.0)
    result["collectives"] = _other_collectives(torch, dist, device, world, min(load.max_mib, OTHER_COLLECTIVES_MIB),
                                               use_cuda)
    progress("memory check", 0.0)
    phase("memory")
    result["memory"] = run_memory_check(torch, device, use_cuda, args.memory_mib << 20)
    if load.monitor is not None:
        result["gpu"] = load.monitor.finish()
    progress("done", 1.0)
    dist.barrier()
    _write(os.path.join(args.out, f"rank{rank}.json"), result)
    dist.destroy_process_group()


class Heartbeat:
    """Rank 0's progress file: the phase, its share done, and how many steps and collectives have completed (a
    collective completes on every rank or on none, so rank 0's count is the run's). The launcher tells a hang (no
    beat) from a slow run (beats, late) by it. Written at most once a second, and at each new phase."""

    def __init__(self, path: Optional[str]):
        self.path, self.beats, self.phase, self.done, self._written = path, 0, "setup", 0.0, 0.0

    def __call__(self, phase: Optional[str] = None, done: Optional[float] = None) -> None:
        self.beats += 1
        changed = phase is not None and phase != self.phase
        self.phase, self.done = phase or self.phase, self.done if done is None else done
        now = time.monotonic()
        if self.path and (changed or now - self._written >= 1.0):
            self._written = now
            _write(self.path, {"phase": self.phase, "done": round(self.done, 3), "beats": self.beats})


_heartbeat = Heartbeat(None)


def _write(path, data):
    from gpuprep.output import write_atomic
    write_atomic(path, json.dumps(data))


class _GpuMonitor:
    """NVML samples of this rank's GPU during the run (clocks, temperature, power against the limit,
    throttle reasons), tagged with the phase they fall in, and its ECC counters before and after,
    through gpuprep's one NVML module. The GPU is found by its UUID (CUDA's and NVML's index orders
    may differ)."""

    def __init__(self, index, uuid=None):
        import threading
        from gpuprep.probe.nvml import sample
        self._read = lambda: sample(index, uuid=uuid)
        self.before = self._read()
        self.samples = []
        self._phase = "setup"
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def phase(self, name):
        self._phase = name

    def _run(self):
        while not self._stop.wait(1.0):
            reading = self._read()
            if reading:
                self.samples.append(dict(reading, phase=self._phase))

    def finish(self):
        self._stop.set()
        self._thread.join(timeout=5)
        after = self._read() or {}
        training = [s for s in self.samples if s["phase"] == "training"]
        return {"before": self.before, "after": after, "samples": len(self.samples),
                "reasons_seen": _reasons(self.samples), "reason_counts": _reason_counts(self.samples),
                "max_temperature_c": _peak(self.samples, "temperature_c"),
                "max_power_w": _peak(self.samples, "power_draw_w"), "training_samples": len(training),
                "training_max_power_w": _peak(training, "power_draw_w"), "training_reasons": _reasons(training),
                "power_limit_w": (self.before or {}).get("power_limit_w"),
                "min_sm_clock_mhz": min((s.get("clock_sm_mhz") or 0 for s in self.samples), default=None),
                "failure": next((s["failure"] for s in [self.before or {}, *self.samples, after] if s.get("failure")),
                                None)}


def _peak(samples, key):
    return max((s.get(key) or 0 for s in samples), default=None)


def _reasons(samples):
    return sorted({r for s in samples for r in s.get("clock_event_reasons") or []})


def _reason_counts(samples):
    """How many samples reported each clock event reason (one sample of HW Slowdown can be a P-state change)."""
    counts = {}
    for sample in samples:
        for reason in sample.get("clock_event_reasons") or []:
            counts[reason] = counts.get(reason, 0) + 1
    return counts


def _other_collectives(torch, dist, device, world, max_mib, use_cuda):
    """All-gather and reduce-scatter at one large size; busbw = algbw x (n-1)/n for both (nccl-tests)."""
    size = max_mib << 20
    per_rank = size // world // 4
    rows = []
    for name in ("all_gather", "reduce_scatter"):
        shard = torch.ones(per_rank, dtype=torch.float32, device=device)
        full = torch.ones(per_rank * world, dtype=torch.float32, device=device)
        # torch 2.13 renamed these (the old names warn); older releases have only the old ones
        gather = getattr(dist, "all_gather_single", None) or dist.all_gather_into_tensor
        scatter = getattr(dist, "reduce_scatter_single", None) or dist.reduce_scatter_tensor
        op = (lambda: gather(full, shard)) if name == "all_gather" else (lambda: scatter(shard, full))
        try:
            op()
        except (RuntimeError, AttributeError) as exc:     # gloo lacks reduce_scatter_tensor
            rows.append({"collective": name, "bytes": per_rank * world * 4, "unsupported": str(exc).splitlines()[0][:120]})
            continue
        seconds = _timed(op, 5, torch.cuda.synchronize if use_cuda else (lambda: None), dist)
        algbw = per_rank * world * 4 / seconds / 1e9
        rows.append({"collective": name, "bytes": per_rank * world * 4, "time_us": seconds * 1e6,
                     "algbw_gbs": algbw, "busbw_gbs": algbw * (world - 1) / world})
    return rows


def _sweep(torch, dist, device, world, max_mib, use_cuda, budget_s):
    """Algorithm and bus bandwidth as nccl-tests define them: algbw = bytes / time,
    busbw = algbw * 2(n-1)/n for all-reduce. Each size is timed in several trials of equal length
    and the median trial counts, so one scheduler hiccup cannot move the figure."""
    sizes = []
    size = 4 << 10
    while size <= max_mib << 20:
        sizes.append(size)
        size *= 4
    trial_s = min(SWEEP_TRIAL_MAX_S, budget_s / (len(sizes) * SWEEP_TRIALS))
    sync = torch.cuda.synchronize if use_cuda else (lambda: None)
    rows = []
    for size in sizes:
        tensor = torch.ones(size // 4, dtype=torch.float32, device=device)
        run = lambda: dist.all_reduce(tensor)      # noqa: E731
        for _ in range(SWEEP_WARMUP):
            run()
        # every rank must run the same number of iterations: agree on the slowest rank's estimate
        estimate = torch.tensor([_timed(run, 1, sync, dist)], dtype=torch.float64, device=device)
        dist.all_reduce(estimate, op=dist.ReduceOp.MAX)
        iterations = max(SWEEP_MIN_ITERATIONS, min(SWEEP_MAX_ITERATIONS, int(trial_s / max(estimate.item(), 1e-6))))
        trials = sorted(_timed(run, iterations, sync, dist) for _ in range(SWEEP_TRIALS))
        seconds = trials[len(trials) // 2]
        algbw = size / seconds / 1e9
        rows.append({"bytes": size, "time_us": seconds * 1e6, "algbw_gbs": algbw,
                     "busbw_gbs": algbw * 2 * (world - 1) / world, "iterations": iterations,
                     "trials": len(trials), "spread": round(trials[-1] / trials[0], 3)})
    return rows


def _timed(run, iterations, sync, dist):
    """Mean seconds per call over `iterations` calls, started together on every rank."""
    dist.barrier()
    sync()
    start = time.perf_counter()
    for _ in range(iterations):
        run()
    sync()
    seconds = (time.perf_counter() - start) / iterations
    _heartbeat()
    return seconds


MEMORY_PATTERNS = ("zeros", "ones", "walking_ones", "address", "random")


def run_memory_check(torch, device, use_cuda, requested_bytes=0):
    """The memory check at its size: what was asked, or (GPU) 90% of free less a margin, (CPU) 64 MiB."""
    from gpuprep.burnin.load import CPU_MEMORY_BYTES, MEMORY_CHUNK, memory_check_bytes
    if requested_bytes:
        size = requested_bytes
    elif use_cuda:
        import gc
        gc.collect()                 # the training phase's objects (autograd graphs, DDP buckets) free their memory
        torch.cuda.empty_cache()     # ... which the caching allocator then gives back
        free, _total = torch.cuda.mem_get_info(device)
        size = memory_check_bytes(free)
    else:
        size = CPU_MEMORY_BYTES
    flip = os.environ.get("GPUPREP_BURNIN_TEST_FLIP_WORD")      # test-only: corrupt one word after writing
    def flipped(pattern, buf):
        if pattern == "random":
            buf[int(flip)] ^= 1
    after_write = flipped if flip is not None else None
    sync = torch.cuda.synchronize if use_cuda else (lambda: None)
    return memory_check(torch, device, size, min(MEMORY_CHUNK, size) or MEMORY_CHUNK, after_write=after_write,
                        sync=sync)


WORD_BYTES = 8      # 64-bit words: every bit of the word is driven (an int32 random_() never sets bit 31)


def memory_check(torch, device, buffer_bytes, chunk_bytes, seed=0x5EED, after_write=None, sync=lambda: None):
    """Fill one buffer with each pattern, then verify it in place, chunk by chunk; report the bad words.

    Peak extra memory: the buffer plus one chunk. Each chunk's expected words are generated into one
    scratch chunk, XORed in place with what memory holds, and the differing words counted there, so no
    operation allocates a full-size temporary. Patterns over 64-bit words: all zeros, all ones, walking ones
    (1 << i%64), each word's own index (its address, unique over the whole buffer, so a fault that aliases two
    addresses 4 GiB apart shows), and a seeded pseudo-random sequence over the full 64 bits."""
    start = time.perf_counter()
    chunk = max(64, chunk_bytes // WORD_BYTES // 64 * 64)    # words, a multiple of the walking-ones period
    words = buffer_bytes // WORD_BYTES // chunk * chunk
    if words == 0:
        return {"bytes": 0, "ok": True, "skipped": "no memory left to check"}
    buf = torch.empty(words, dtype=torch.int64, device=device)
    scratch = torch.empty(chunk, dtype=torch.int64, device=device)
    walking = torch.tensor([(1 << i) - (1 << 64 if i == 63 else 0) for i in range(64)], dtype=torch.int64,
                           device=device)
    generator = torch.Generator(device=device)

    def expected(pattern, lo):
        if pattern in ("zeros", "ones"):
            scratch.fill_(0 if pattern == "zeros" else -1)
        elif pattern == "walking_ones":
            scratch.view(-1, 64).copy_(walking.expand(chunk // 64, 64))
        elif pattern == "address":
            torch.arange(chunk, out=scratch)                 # arange(lo, lo + chunk) allocates a temporary
            scratch.add_(lo)
        else:
            generator.manual_seed(seed + lo // chunk)
            scratch.random_(-(1 << 63), None, generator=generator)    # torch's full 64-bit range
        return scratch

    rows = []
    for pattern in MEMORY_PATTERNS:
        for lo in range(0, words, chunk):
            buf[lo:lo + chunk].copy_(expected(pattern, lo))
        sync()
        if after_write is not None:
            after_write(pattern, buf)
        bad, first = 0, None
        for lo in range(0, words, chunk):
            diff = expected(pattern, lo).bitwise_xor_(buf[lo:lo + chunk])     # in place: no temporary
            count = int(torch.count_nonzero(diff).item())      # counts without a mask the size of the chunk
            if count:
                bad += count
                if first is None:
                    first = lo + int(torch.argmax(diff.ne_(0).to(torch.uint8)).item())
        rows.append({"pattern": pattern, "bad_words": bad, "first_bad_word": first})
    failing = [r for r in rows if r["bad_words"]]
    return {"bytes": words * WORD_BYTES, "chunk_bytes": chunk * WORD_BYTES, "ok": not failing, "patterns": rows,
            "bad_words": sum(r["bad_words"] for r in rows),
            "first_bad_offset": failing[0]["first_bad_word"] * WORD_BYTES if failing else None,
            "seconds": round(time.perf_counter() - start, 3)}


if __name__ == "__main__":
    main()
