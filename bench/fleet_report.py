#!/usr/bin/env python3
"""`gpuprep fleet report` over a results store of RUNS burn-in runs x 8 GPUs (issue 46: 100,000 runs, goal <= 2 s):
the store is filled once (1,000 hosts of 8 H100s, each run a host's 8 GPUs, one GPU slow), then the report is timed
as a user meets it (a fresh `gpuprep fleet report` process) and in-process (api.fleet_report), best of 3 each.
Usage: python bench/fleet_report.py [--runs 100000]"""
import argparse
import datetime as dt
import os
import sqlite3
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))


def fill(path: str, runs: int) -> None:
    from gpuprep.store import GpuRun, open_store, record_rows
    start = dt.datetime.now(dt.timezone.utc) - dt.timedelta(days=80)
    with open_store(path) as db:        # what record() writes for each report, one host's run at a time
        for run in range(runs):
            host = run % 1000
            when = (start + dt.timedelta(seconds=run * 60)).isoformat()
            record_rows(db, [GpuRun(when, f"node{host:04d}", f"GPU-{host:04d}-{gpu}", "NVIDIA H100 80GB HBM3",
                                    "570.86.15", (118.0 if host == 7 and gpu == 3 else 100.0) + (run * 7 + gpu) % 5 * 0.3,
                                    400.0, 690.0, 1980.0) for gpu in range(8)])


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--runs", type=int, default=100_000)
    runs = parser.parse_args().runs
    from gpuprep import api
    with tempfile.TemporaryDirectory() as tmp:
        store = os.path.join(tmp, "results.sqlite")
        began = time.perf_counter()
        fill(store, runs)
        filled = time.perf_counter() - began
        rows = sqlite3.connect(store).execute("SELECT count(*) FROM gpu_runs").fetchone()[0]
        cli, inproc = [], []
        for _ in range(3):
            t = time.perf_counter()
            done = subprocess.run([sys.executable, "-m", "gpuprep", "fleet", "report", store, "--json"],
                                  capture_output=True, text=True)
            cli.append(time.perf_counter() - t)
            t = time.perf_counter()
            document = api.fleet_report(store)
            inproc.append(time.perf_counter() - t)
        named = [f["subject"] for f in document["findings"] if f["severity"] == "warn"]
    print(f"store: {runs} runs x 8 GPUs = {rows} rows, filled in {filled:.1f} s")
    print(f"fleet report: fresh process {min(cli):.2f} s, in-process {min(inproc):.2f} s (goal <= 2 s); exit "
          f"{done.returncode}; named: {', '.join(named) or 'none'}")


if __name__ == "__main__":
    main()
