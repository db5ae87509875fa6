#!/usr/bin/env python3
"""What watching costs the job: a real CPU training loop (tests/data/jobs/train.py compute-bound, 1-thread torch)
run alone and under `gpuprep watch -- ...` (py-spy --nonblocking once a second, /proc and NVML once a second),
interleaved in alternating order, in one run; prints each run's median step time and the paired ratio.
Goal (issue 38): watched at most 2% slower."""
import os
import re
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
TRAIN = REPO / "tests" / "data" / "jobs" / "train.py"
PAIRS = 4
STEPS = "600"


def median_step(argv) -> float:
    env = dict(os.environ, TRAIN_STEPS=STEPS, OMP_NUM_THREADS="1")
    done = subprocess.run(argv, capture_output=True, text=True, env=env, timeout=600)
    match = re.search(r"STEP_MS ([0-9.]+)", done.stdout)
    if not match:
        raise SystemExit(f"the job did not report its step time: {done.stderr[-400:]}")
    return float(match.group(1))


def main():
    job = [sys.executable, str(TRAIN), "compute-bound", tempfile.mkdtemp()]
    watched = [sys.executable, "-m", "gpuprep", "watch", "--format", "json", "-o", os.devnull, "--", *job]
    ratios, alone, under = [], [], []
    for pair in range(PAIRS):
        order = (job, watched) if pair % 2 == 0 else (watched, job)
        times = {id(argv): median_step(argv) for argv in order}
        alone.append(times[id(job)])
        under.append(times[id(watched)])
        ratios.append(under[-1] / alone[-1])
    print(f"median step of the job, {PAIRS} interleaved pairs ({STEPS} steps each)")
    print(f"alone           {statistics.median(alone):8.3f} ms   (runs: {', '.join(f'{t:.2f}' for t in alone)})")
    print(f"under watch     {statistics.median(under):8.3f} ms   (runs: {', '.join(f'{t:.2f}' for t in under)})")
    print(f"watched / alone {statistics.median(ratios):8.3f}x   (goal <= 1.02x; pairs: "
          f"{', '.join(f'{r:.3f}' for r in ratios)})")


if __name__ == "__main__":
    main()
