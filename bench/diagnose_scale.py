#!/usr/bin/env python3
"""gpuprep diagnose at job scale (issue 44), side by side in one run, on the largest trace in the repository and on
a directory of 8 copies of it (ranks renamed, files only copied):
- gpuprep's time against HTA's (goal >= 10x);
- gpuprep's time against only decompressing and JSON-parsing the same bytes with the fastest parser installed
  (orjson if installed, else msgspec, else the standard json module): that is the limit (goal <= 2x);
- gpuprep's peak memory, less a bare interpreter's, against the largest decompressed trace (goal <= 1x), for one
  trace and for the 8-rank directory, where ranks are parsed in forked worker processes: the peak of the sum over
  the whole process tree, sampled every 10 ms (the kernel's max RSS is per process), both of RSS and of PSS (a page
  the workers share with their parent counts once in PSS, once per process in RSS);
- the 8-rank directory on this machine's cores (goal <= 10 s on 2 cores).
Each figure is the best of RUNS fresh processes; interpreter start-up is in every time, as a user meets it.
Usage: python bench/diagnose_scale.py [--runs 3]"""
import argparse
import importlib.util
import gzip
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Tuple

sys.path.insert(0, str(Path(__file__).resolve().parent))
from diagnose_vs_hta import CHILD_ENV, measure  # noqa: E402 (one way to run a fresh process, for both benches)

REPO = Path(__file__).resolve().parent.parent
LARGEST = max((REPO / "tests" / "traces").glob("*/*.json.gz"), key=lambda p: p.stat().st_size)

GPUPREP = "import sys\nfrom gpuprep import api\napi.diagnose(sys.argv[1:])\n"
# the fastest whole-document parser installed: orjson (in the test extras, for this reference only), else msgspec's
# untyped decode (0.72 against orjson's 0.51 s on the largest trace), else the standard library's
PARSER = next((name for name in ("orjson", "msgspec") if importlib.util.find_spec(name)), "json")
PARSE = f"""import gzip, sys
import {PARSER}
loads = {PARSER + ".json.decode" if PARSER == "msgspec" else PARSER + ".loads"}
for path in sys.argv[1:]:
    with gzip.open(path, "rb") as fh:
        loads(fh.read())
"""
BARE = "import time\ntime.sleep(0.5)\n"      # long enough for the 10 ms sampler to see it
HTA = """import logging, sys, warnings
logging.disable(logging.CRITICAL); warnings.simplefilter("ignore")
from hta.trace_analysis import TraceAnalysis
analysis = TraceAnalysis(trace_dir=sys.argv[1])
for breakdown in (analysis.get_temporal_breakdown, analysis.get_idle_time_breakdown):
    try:
        breakdown(visualize=False)
    except Exception:
        pass
"""


def tree_peak(code: str, args) -> Tuple[float, float]:
    """The peaks, in MiB, of the summed RSS and of the summed PSS of a fresh process and all its descendants,
    sampled every 10 ms. Forked workers share their parent's pages (the interpreter, the imported modules) until
    they write them: the RSS sum counts each shared page once per process, PSS divides it among its sharers, so the
    PSS sum is what the tree takes from the machine."""
    import psutil
    proc = subprocess.Popen([sys.executable, "-c", code, *map(str, args)], stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL, env=CHILD_ENV)
    top, rss_peak, pss_peak = psutil.Process(proc.pid), 0, 0
    while proc.poll() is None:
        try:
            family = [top] + top.children(recursive=True)
            rss_peak = max(rss_peak, sum(p.memory_info().rss for p in family))
            pss_peak = max(pss_peak, sum(p.memory_full_info().pss for p in family))
        except psutil.NoSuchProcess:
            pass
        time.sleep(0.01)
    if proc.returncode != 0:
        raise SystemExit(f"{args}: the run failed (status {proc.returncode})")
    return rss_peak / (1 << 20), pss_peak / (1 << 20)


def least(code: str, args, runs: int) -> Tuple[float, float]:
    """The least (RSS, PSS) peaks of `runs` fresh runs."""
    peaks = [tree_peak(code, args) for _ in range(runs)]
    return min(p[0] for p in peaks), min(p[1] for p in peaks)


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--runs", type=int, default=3)
    runs = parser.parse_args().runs
    decompressed = len(gzip.open(LARGEST).read()) / (1 << 20)
    with tempfile.TemporaryDirectory() as tmp:
        one, eight = Path(tmp) / "one", Path(tmp) / "eight"
        one.mkdir()
        eight.mkdir()
        shutil.copy(LARGEST, one / LARGEST.name)
        for rank in range(8):
            shutil.copy(LARGEST, eight / f"rank{rank}.pt.trace.json.gz")
        # memory by sampling each run's process tree: a child's own max RSS (wait4) counts the parent it was forked
        # from (Linux carries the high-water mark across exec), so every figure read ~80 MiB, a bare interpreter too
        bare_mb = least(BARE, [], runs)
        ours_s, _ = measure(GPUPREP, [LARGEST], runs)
        ours_mb = least(GPUPREP, [LARGEST], runs)
        parse_s, _ = measure(PARSE, [LARGEST], runs)
        dir_s, _ = measure(GPUPREP, [eight], runs)
        dir_parse_s, _ = measure(PARSE, sorted(eight.iterdir()), runs)
        dir_mb = least(GPUPREP, [eight], runs)
        try:
            import hta  # noqa: F401
            hta_s, _ = measure(HTA, [one], runs)
            hta_dir_s, _ = measure(HTA, [eight], 1)
        except ImportError:
            hta_s = hta_dir_s = None
    print(f"largest trace: {LARGEST.relative_to(REPO)} ({LARGEST.stat().st_size >> 10} KiB, {decompressed:.0f} MiB "
          f"decompressed); best of {runs} fresh processes; {os.cpu_count()} cores")
    print(f"parse: decompressing and parsing the same bytes with {PARSER}")
    print(f"{'':28} {'gpuprep s':>9} {'HTA s':>7} {'vs HTA':>7} {'parse s':>8} {'vs parse':>8}")
    for label, ours, theirs, parse in (("one trace", ours_s, hta_s, parse_s), ("8 ranks (a directory)", dir_s,
                                                                              hta_dir_s, dir_parse_s)):
        versus = f"{theirs / ours:6.1f}x" if theirs else "    n/a"
        if theirs and label.startswith("8"):
            versus += "*"
        print(f"{label:28} {ours:9.2f} {theirs or float('nan'):7.2f} {versus} {parse:8.2f} {ours / parse:7.2f}x")
    for label, (rss, pss) in (("one trace", ours_mb), ("8 ranks, the whole process tree", dir_mb)):
        print(f"peak memory, {label}: RSS summed {rss:.0f} MiB ({(rss - bare_mb[0]) / decompressed:.2f}x), PSS summed "
              f"{pss:.0f} MiB ({(pss - bare_mb[1]) / decompressed:.2f}x) the largest decompressed trace, less a bare "
              f"interpreter ({bare_mb[0]:.0f} MiB RSS, {bare_mb[1]:.0f} MiB PSS)")
    print("* HTA keys ranks by the rank number inside each trace: the 8 copies hold one number, so it reads one")
    print("goals: vs HTA >= 10x; vs parse <= 2x; memory <= 1x; 8 ranks <= 10 s on 2 cores")


if __name__ == "__main__":
    main()
