#!/usr/bin/env python3
"""gpuprep diagnose against HTA (HolisticTraceAnalysis) on the same real traces, side by side in one run: the
wall time and peak memory (max RSS) of a fresh process that reads one trace and computes the per-rank temporal and
idle-time breakdowns, each run in its own child. Goal (issue 37): gpuprep at least 5x faster than HTA and at most
half its peak memory on the largest corpus trace. Interpreter start-up is in both numbers, as a user meets it."""
import os
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
TRACES = sorted((REPO / "tests" / "traces").glob("*/*.json.gz"), key=lambda p: p.stat().st_size)
RUNS = 3
# each child as on a user's machine, where pip compiled every module at install: bytecode is written on the first run
# and read after (an environment that forbids writing it would time the compiler, for the editable checkout only)
CHILD_ENV = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}

GPUPREP = """
import sys
from gpuprep import api
api.diagnose([sys.argv[1]])
"""
HTA = """
import logging, shutil, sys, tempfile, warnings
logging.disable(logging.CRITICAL); warnings.simplefilter("ignore")
from hta.trace_analysis import TraceAnalysis
with tempfile.TemporaryDirectory() as tmp:
    shutil.copy(sys.argv[1], tmp)
    analysis = TraceAnalysis(trace_dir=tmp)
    for breakdown in (analysis.get_temporal_breakdown, analysis.get_idle_time_breakdown):
        try:                # HTA raises on some real traces (no kernels, its idle breakdown on trace_diff)
            breakdown(visualize=False)
        except Exception:
            pass
"""


def measure(code: str, trace, runs: int = RUNS):
    """(seconds, peak RSS in MiB): the best of `runs` fresh processes given `trace` (a path, or a list of them)."""
    best = None
    args = [str(a) for a in (trace if isinstance(trace, list) else [trace])]
    subprocess.run([sys.executable, "-c", code, *args], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                   env=CHILD_ENV)    # a warm-up, untimed: bytecode and the page cache, for both tools alike
    for _ in range(runs):
        start = time.perf_counter()
        proc = subprocess.Popen([sys.executable, "-c", code, *args], stdout=subprocess.DEVNULL,
                                stderr=subprocess.DEVNULL, env=CHILD_ENV)
        _, status, usage = os.wait4(proc.pid, 0)
        seconds = time.perf_counter() - start
        if status != 0:
            raise SystemExit(f"{args}: the run failed (status {status})")
        sample = (seconds, usage.ru_maxrss / 1024)
        best = sample if best is None else (min(best[0], sample[0]), min(best[1], sample[1]))
    return best


def main():
    try:
        import hta  # noqa: F401
    except ImportError:
        raise SystemExit("HTA is not installed: pip install HolisticTraceAnalysis")
    print(f"best of {RUNS} fresh processes each; trace sizes compressed")
    print(f"{'trace':46} {'size':>8} {'HTA s':>7} {'gpuprep s':>9} {'speed-up':>8} {'HTA MiB':>8} {'gpuprep MiB':>11} "
          f"{'memory':>7}")
    for trace in TRACES:
        hta_s, hta_mb = measure(HTA, trace)
        ours_s, ours_mb = measure(GPUPREP, trace)
        print(f"{trace.name[:46]:46} {trace.stat().st_size >> 10:>6}Ki {hta_s:7.2f} {ours_s:9.2f} "
              f"{hta_s / ours_s:7.1f}x {hta_mb:8.0f} {ours_mb:11.0f} {ours_mb / hta_mb:6.2f}x")
    print("goal on the largest trace (last row): speed-up >= 5x, memory <= 0.50x")


if __name__ == "__main__":
    main()
