#!/usr/bin/env python3
"""The all-reduce bus bandwidth `gpuprep burnin` reports against a direct torch.distributed
measurement of the same sizes and backend, and burn-in wall time against its requested
duration, in one run. Goals: within 5%; wall time at most duration + 15 s.
Usage: python bench/burnin_overhead.py [--duration 20] [--nproc 2]"""
import argparse
import json
import os
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
rows, size = [], 4 << 10
while size <= 16 << 20:
    t = torch.ones(size // 4)
    dist.all_reduce(t)
    iters = 20 if size >= 1 << 20 else 50
    dist.barrier()
    start = time.perf_counter()
    for _ in range(iters):
        dist.all_reduce(t)
    sec = (time.perf_counter() - start) / iters
    algbw = size / sec / 1e9
    rows.append({"bytes": size, "busbw_gbs": algbw * 2 * (world - 1) / world})
    size *= 4
if rank == 0:
    json.dump(rows, open(sys.argv[1], "w"))
dist.destroy_process_group()
"""


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--duration", type=int, default=20)
    parser.add_argument("--nproc", type=int, default=2)
    parser.add_argument("--repeat", type=int, default=3, help="runs of each side; per-size medians are compared")
    args = parser.parse_args()
    env = dict(os.environ, OMP_NUM_THREADS="1")
    import statistics
    burnin_runs, direct_runs, walls = [], [], []
    with tempfile.TemporaryDirectory() as tmp:
        script = os.path.join(tmp, "direct.py")
        open(script, "w").write(DIRECT)
        for attempt in range(args.repeat):
            report = os.path.join(tmp, f"burnin{attempt}.json")
            start = time.perf_counter()
            subprocess.run([sys.executable, "-m", "gpuprep", "burnin", "--duration", f"{args.duration}s", "--nproc",
                            str(args.nproc), "--backend", "gloo", "--json", "-o", report],
                           stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=env, check=False)
            walls.append(time.perf_counter() - start)
            burnin_runs.append(json.load(open(report))["ranks"][0]["allreduce"])
            direct_out = os.path.join(tmp, f"direct{attempt}.json")
            subprocess.run([sys.executable, "-m", "torch.distributed.run", "--nproc-per-node", str(args.nproc),
                            "--rdzv-backend", "c10d", "--rdzv-endpoint", "127.0.0.1:0", script, direct_out],
                           stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=env, check=True)
            direct_runs.append(json.load(open(direct_out)))
    burnin = [{"bytes": rows[0]["bytes"], "busbw_gbs": statistics.median(r["busbw_gbs"] for r in rows)}
              for rows in zip(*burnin_runs)]
    direct = [{"bytes": rows[0]["bytes"], "busbw_gbs": statistics.median(r["busbw_gbs"] for r in rows)}
              for rows in zip(*direct_runs)]
    wall = statistics.median(walls)
    print(f"gloo, {args.nproc} ranks: all-reduce busbw, burnin vs direct torch.distributed (same sizes), "
          f"medians of {args.repeat} runs each, interleaved")
    print(f"{'bytes':>10}  {'burnin GB/s':>11}  {'direct GB/s':>11}  {'ratio':>6}")
    for b, d in zip(burnin, direct):
        print(f"{b['bytes']:>10}  {b['busbw_gbs']:>11.3f}  {d['busbw_gbs']:>11.3f}  {b['busbw_gbs'] / d['busbw_gbs']:>6.2f}")
    large = [b["busbw_gbs"] / d["busbw_gbs"] for b, d in zip(burnin, direct) if b["bytes"] >= 1 << 20]
    print(f"largest message ({burnin[-1]['bytes'] >> 20} MiB, the figure the verdict uses): burnin/direct = "
          f"{burnin[-1]['busbw_gbs'] / direct[-1]['busbw_gbs']:.3f}   (goal: within 5%)")
    print(f"messages >= 1 MiB, mean ratio: {sum(large) / len(large):.3f}")
    print(f"median wall time {wall:.1f} s for --duration {args.duration}s: overhead {wall - args.duration:.1f} s   "
          f"(goal: at most 15 s)")


if __name__ == "__main__":
    main()
