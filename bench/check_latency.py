#!/usr/bin/env python3
"""Whole-process time of `gpuprep check --json --from <8-GPU capture>` against a bare interpreter
start and `python -m torch.utils.collect_env`, measured side by side in one run.
Goal: gpuprep under 5x a bare interpreter start."""
import statistics
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
CORPUS = REPO / "tests" / "corpus"
CAPTURES = [CORPUS / "h100-sxm-x8.nvidia-smi-q.txt", CORPUS / "h100-x8-stas.topo-m.txt"]
RUNS = 7


def timed(argv):
    samples = []
    for _ in range(RUNS):
        start = time.perf_counter()
        subprocess.run(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=False)
        samples.append(time.perf_counter() - start)
    return statistics.median(samples)


def main():
    python = sys.executable
    bare = timed([python, "-c", "pass"])
    check = timed([python, "-m", "gpuprep", "check", "--json"] + [a for c in CAPTURES for a in ("--from", str(c))])
    try:
        import torch  # noqa: F401
        collect_env = timed([python, "-m", "torch.utils.collect_env"])
    except ImportError:
        collect_env = None
    print(f"median of {RUNS} runs each")
    print(f"python -c pass                        {bare * 1000:8.1f} ms   1.00x")
    print(f"gpuprep check --json --from 8-GPU     {check * 1000:8.1f} ms   {check / bare:5.2f}x bare   (goal < 5x)")
    if collect_env is not None:
        print(f"python -m torch.utils.collect_env     {collect_env * 1000:8.1f} ms   {collect_env / bare:5.2f}x bare   "
              f"(gpuprep is {collect_env / check:.1f}x faster)")
    else:
        print("torch not installed: collect_env not measured")


if __name__ == "__main__":
    main()
