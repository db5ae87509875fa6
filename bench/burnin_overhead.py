#!/usr/bin/env python3
"""The all-reduce bus bandwidth `gpuprep burnin` reports against a direct torch.distributed
measurement of the same sizes and backend, and burn-in wall time against its requested
duration, in one run. Goals: within 5%; wall time at most duration + 15 s.

Both sides time each size the same way (warm-up, iterations agreed across ranks, five equal
trials, the median trial). Runs alternate burnin/direct so slow spells of the machine hit both.
Each burnin run is compared with the direct run beside it, which goes second in one pair and
first in the next; the median of those paired ratios is the figure, and the ratio of the
per-size medians is printed beside it. The direct runs' own spread (median distance from their
median) is printed as this machine's noise floor: a ratio can only be read to within that.
Usage: python bench/burnin_overhead.py [--duration 15] [--nproc 2] [--repeat 12]"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

DIRECT = r"""
import json, os, sys, time, datetime
import torch, torch.distributed as dist
dist.init_process_group("gloo", timeout=datetime.timedelta(seconds=60))
world, rank = dist.get_world_size(), dist.get_rank()
warm = torch.ones(4 << 20)          # burnin sweeps after its training phase: warm the transport the same way
for _ in range(50):
    dist.all_reduce(warm)

def timed(t, iterations):
    dist.barrier()
    start = time.perf_counter()
    for _ in range(iterations):
        dist.all_reduce(t)
    return (time.perf_counter() - start) / iterations

rows, size = [], 4 << 10
while size <= 16 << 20:
    t = torch.ones(size // 4)
    for _ in range(5):
        dist.all_reduce(t)
    estimate = torch.tensor([timed(t, 1)], dtype=torch.float64)
    dist.all_reduce(estimate, op=dist.ReduceOp.MAX)
    iterations = max(3, min(2000, int(0.1 / max(estimate.item(), 1e-6))))
    trials = sorted(timed(t, iterations) for _ in range(5))
    algbw = size / trials[2] / 1e9
    rows.append({"bytes": size, "busbw_gbs": algbw * 2 * (world - 1) / world})
    size *= 4
if rank == 0:
    json.dump(rows, open(sys.argv[1], "w"))
dist.destroy_process_group()
"""


def per_size_median(runs):
    return [{"bytes": rows[0]["bytes"], "busbw_gbs": statistics.median(r["busbw_gbs"] for r in rows)}
            for rows in zip(*runs)]


def ratios(a, b):
    return [x["busbw_gbs"] / y["busbw_gbs"] for x, y in zip(a, b)]


def paired_ratio(burnin_runs, direct_runs):
    """Per size, the median over runs of burnin/direct within one adjacent pair."""
    per_run = [ratios(b, d) for b, d in zip(burnin_runs, direct_runs)]
    return [statistics.median(column) for column in zip(*per_run)]


def spread(runs):
    """Per size, the median relative distance of a run from the runs' median."""
    out = []
    for rows in zip(*runs):
        values = [r["busbw_gbs"] for r in rows]
        middle = statistics.median(values)
        out.append(statistics.median(abs(v / middle - 1) for v in values))
    return out


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--duration", type=int, default=15)
    parser.add_argument("--nproc", type=int, default=2)
    parser.add_argument("--repeat", type=int, default=12, help="runs of each side, interleaved")
    args = parser.parse_args()
    env = dict(os.environ, OMP_NUM_THREADS="1")
    burnin_runs, direct_runs, walls = [], [], []
    with tempfile.TemporaryDirectory() as tmp:
        script = os.path.join(tmp, "direct.py")
        open(script, "w").write(DIRECT)
        def burnin_run(attempt):
            report = os.path.join(tmp, f"burnin{attempt}.json")
            start = time.perf_counter()
            subprocess.run([sys.executable, "-m", "gpuprep", "burnin", "--duration", f"{args.duration}s", "--nproc",
                            str(args.nproc), "--backend", "gloo", "--json", "-o", report],
                           stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=env, check=False)
            walls.append(time.perf_counter() - start)
            burnin_runs.append(json.load(open(report))["ranks"][0]["allreduce"])

        def direct_run(attempt):
            direct_out = os.path.join(tmp, f"direct{attempt}.json")
            subprocess.run([sys.executable, "-m", "torch.distributed.run", "--nproc-per-node", str(args.nproc),
                            "--rdzv-backend", "c10d", "--rdzv-endpoint", "127.0.0.1:0", script, direct_out],
                           stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=env, check=True)
            direct_runs.append(json.load(open(direct_out)))

        for attempt in range(args.repeat):
            # the order alternates within pairs, so an effect of going first or second cancels out
            for side in ((burnin_run, direct_run) if attempt % 2 == 0 else (direct_run, burnin_run)):
                side(attempt)
            print(f"  run {attempt + 1}/{args.repeat}: 16 MiB busbw burnin {burnin_runs[-1][-1]['busbw_gbs']:.3f}, "
                  f"direct {direct_runs[-1][-1]['busbw_gbs']:.3f} GB/s", flush=True)
    burnin, direct = per_size_median(burnin_runs), per_size_median(direct_runs)
    paired, noise = paired_ratio(burnin_runs, direct_runs), spread(direct_runs)
    wall = statistics.median(walls)
    print(f"gloo, {args.nproc} ranks: all-reduce busbw, burnin vs direct torch.distributed (same sizes), "
          f"{args.repeat} interleaved runs each")
    print(f"{'bytes':>10}  {'burnin GB/s':>11}  {'direct GB/s':>11}  {'paired ratio':>12}  {'ratio of medians':>16}  "
          f"{'direct spread':>13}")
    for b, d, p, r, n in zip(burnin, direct, paired, ratios(burnin, direct), noise):
        print(f"{b['bytes']:>10}  {b['busbw_gbs']:>11.3f}  {d['busbw_gbs']:>11.3f}  {p:>12.3f}  {r:>16.3f}  "
              f"{n * 100:>12.1f}%")
    large = [p for b, p in zip(burnin, paired) if b["bytes"] >= 1 << 20]
    print(f"largest message ({burnin[-1]['bytes'] >> 20} MiB, the figure the verdict uses): burnin/direct paired = "
          f"{paired[-1]:.3f}, direct runs spread +-{noise[-1] * 100:.1f}%   (goal: within 5%)")
    print(f"messages >= 1 MiB, mean paired ratio: {sum(large) / len(large):.3f}")
    print(f"median wall time {wall:.1f} s for --duration {args.duration}s: overhead {wall - args.duration:.1f} s   "
          f"(goal: at most 15 s)")


if __name__ == "__main__":
    main()
