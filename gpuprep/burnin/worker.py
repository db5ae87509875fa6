"""One burn-in rank, started by torchrun. The only module of gpuprep that imports torch.

Phases within the time budget: a DDP training loop (per-step compute time measured under
`no_sync`, so a slow rank shows as itself and not as everyone's wait), an all-reduce sweep with
nccl-tests' bandwidth definitions, and a memory pattern check. Results go to one JSON file per rank.
"""
from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import socket
import time

SWEEP_TRIALS = 5             # timed trials per message size; the median trial is reported
SWEEP_WARMUP = 5
SWEEP_TRIAL_MAX_S = 0.1      # long enough to average many calls, short enough for the budget
SWEEP_MIN_ITERATIONS, SWEEP_MAX_ITERATIONS = 3, 2000
SWEEP_SHARE = 0.3            # of --duration, for the whole sweep


def _test_hooks(rank: int):
    """Test-only switches (CI has no faulty hardware): slow one rank, or kill it mid-run."""
    slow = os.environ.get("GPUPREP_BURNIN_TEST_SLOW_RANK")
    die = os.environ.get("GPUPREP_BURNIN_TEST_DIE_RANK")
    return (slow is not None and int(slow) == rank), (die is not None and int(die) == rank)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--duration", type=float, required=True)
    parser.add_argument("--out", required=True)
    parser.add_argument("--backend", default="auto")
    parser.add_argument("--max-mib", type=int, default=64)
    parser.add_argument("--timeout", type=float, default=60)
    args = parser.parse_args()

    import torch
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel as DDP

    rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    local_rank = int(os.environ.get("LOCAL_RANK", 0))
    use_cuda = args.backend == "nccl" or (args.backend == "auto" and torch.cuda.is_available())
    backend = "nccl" if use_cuda else "gloo"
    device = torch.device(f"cuda:{local_rank}" if use_cuda else "cpu")
    if use_cuda:
        torch.cuda.set_device(device)
    dist.init_process_group(backend, timeout=dt.timedelta(seconds=args.timeout))
    if local_rank == 0:
        _write(os.path.join(args.out, "joined"), {"rank": rank, "world_size": world})
    slow, die = _test_hooks(rank)
    progress = (lambda phase, done: _write(os.path.join(args.out, "progress.json"),
                                           {"phase": phase, "done": round(done, 3)})) if local_rank == 0 else (lambda *a: None)
    monitor = _GpuMonitor(local_rank) if use_cuda else None
    result = {"rank": rank, "world_size": world, "host": socket.gethostname(), "backend": backend,
              "device": str(device), "local_rank": local_rank}
    if use_cuda:
        result["gpu_index"] = local_rank
        result["gpu_name"] = torch.cuda.get_device_name(device)
        props = torch.cuda.get_device_properties(device)
        result["pci_bus_id"] = f"{props.pci_domain_id:08X}:{props.pci_bus_id:02X}:{props.pci_device_id:02X}.0" \
            if hasattr(props, "pci_bus_id") else None

    deadline_train = time.monotonic() + args.duration * 0.5
    torch.manual_seed(1234)
    width = 1024 if use_cuda else 256
    model = torch.nn.Sequential(torch.nn.Linear(width, width), torch.nn.ReLU(), torch.nn.Linear(width, width)).to(device)
    ddp = DDP(model, device_ids=[local_rank] if use_cuda else None)
    optimiser = torch.optim.SGD(ddp.parameters(), lr=0.01)
    batch = torch.randn(64, width, device=device)
    autocast = torch.autocast(device_type="cuda", dtype=torch.bfloat16) if use_cuda and torch.cuda.is_bf16_supported() \
        else torch.autocast(device_type="cpu", enabled=False)
    compute_ms, step_ms = [], []
    steps = 0
    while True:
        # every rank must agree on the step count, so the deadline is decided collectively
        go = torch.tensor([1.0 if time.monotonic() < deadline_train else 0.0], device=device)
        dist.all_reduce(go, op=dist.ReduceOp.MIN)
        if go.item() == 0.0:
            break
        if steps % 10 == 0:
            progress("training", 1 - max(0.0, deadline_train - time.monotonic()) / (args.duration * 0.5))
        start = time.perf_counter()
        with ddp.no_sync():
            with autocast:
                loss = ddp(batch).float().pow(2).mean()
            loss.backward()
        if slow:
            time.sleep(0.03)
        if use_cuda:
            torch.cuda.synchronize()
        compute_ms.append((time.perf_counter() - start) * 1000)
        start = time.perf_counter()
        optimiser.zero_grad(set_to_none=True)
        with autocast:
            loss = ddp(batch).float().pow(2).mean()
        loss.backward()
        optimiser.step()
        if use_cuda:
            torch.cuda.synchronize()
        step_ms.append((time.perf_counter() - start) * 1000)
        steps += 1
        if die and steps == 3:
            os._exit(17)
    result["steps"] = steps
    result["compute_ms"] = [round(v, 3) for v in compute_ms]
    result["step_ms"] = [round(v, 3) for v in step_ms]

    progress("all-reduce sweep", 0.0)
    result["allreduce"] = _sweep(torch, dist, device, world, args.max_mib, use_cuda,
                                  args.duration * SWEEP_SHARE)
    progress("all-gather / reduce-scatter", 0.0)
    result["collectives"] = _other_collectives(torch, dist, device, world, args.max_mib, use_cuda)
    progress("memory check", 0.0)
    result["memory"] = _memory_check(torch, device, use_cuda)
    if monitor is not None:
        result["gpu"] = monitor.finish()
    progress("done", 1.0)
    dist.barrier()
    with open(os.path.join(args.out, f"rank{rank}.json"), "w") as fh:
        json.dump(result, fh)
    dist.destroy_process_group()


def _write(path, data):
    with open(path + ".tmp", "w") as fh:
        json.dump(data, fh)
    os.replace(path + ".tmp", path)


class _GpuMonitor:
    """NVML samples of this rank's GPU during the run (clocks, temperature, power, throttle reasons)
    and its ECC counters before and after, through gpuprep's one NVML module."""

    def __init__(self, index):
        import threading
        from gpuprep.probe.nvml import sample
        self._sample, self._index = sample, index
        self.before = sample(index)
        self.samples = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self):
        while not self._stop.wait(1.0):
            reading = self._sample(self._index)
            if reading:
                self.samples.append(reading)

    def finish(self):
        self._stop.set()
        self._thread.join(timeout=5)
        after = self._sample(self._index) or {}
        reasons = sorted({r for s in self.samples for r in s.get("clock_event_reasons") or []})
        return {"before": self.before, "after": after, "samples": len(self.samples), "reasons_seen": reasons,
                "max_temperature_c": max((s.get("temperature_c") or 0 for s in self.samples), default=None),
                "max_power_w": max((s.get("power_draw_w") or 0 for s in self.samples), default=None),
                "min_sm_clock_mhz": min((s.get("clock_sm_mhz") or 0 for s in self.samples), default=None)}


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
    return (time.perf_counter() - start) / iterations


def _memory_check(torch, device, use_cuda):
    if use_cuda:
        free, _ = torch.cuda.mem_get_info(device)
        elements = int(free * 0.8) // 4
    else:
        elements = 16 << 20       # 64 MiB of host memory per rank is enough to exercise the path
    pattern = torch.arange(elements, dtype=torch.int32, device=device) ^ 0x5A5A5A5A
    expected_sum = int(pattern.to(torch.int64).sum().item())
    again = int((torch.arange(elements, dtype=torch.int32, device=device) ^ 0x5A5A5A5A).to(torch.int64).sum().item())
    ok = bool(torch.equal(pattern, torch.arange(elements, dtype=torch.int32, device=device) ^ 0x5A5A5A5A)) \
        and expected_sum == again
    return {"bytes": elements * 4, "ok": ok}


if __name__ == "__main__":
    main()
