#!/usr/bin/env python3
"""Wall time of gpuprep as Slurm's HealthCheckProgram (the node probe's zipapp, `slurm healthcheck`, judging an 8-GPU
H100 capture and asking scontrol for the node's state) next to a bare interpreter start and a plain `gpuprep check`
of the same capture, measured side by side in one run. Slurm runs the health check on every node at once, every
interval. Goal: under 2 s on an 8-GPU node.

scontrol is stood in by a script printing what Debian's Slurm 22.05 prints for an idle node (tests/data/slurm), so the
bench runs on a machine without Slurm; on a Slurm node pass --scontrol scontrol to time the real one.
Usage: python bench/slurm_healthcheck.py [--scontrol PATH]"""
import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
CORPUS = REPO / "tests" / "corpus"
CAPTURES = [CORPUS / "h100-sxm-x8.nvidia-smi-q.txt", CORPUS / "h100-x8-stas.topo-m.txt"]
IDLE = REPO / "tests" / "data" / "slurm" / "scontrol-show-node-idle.txt"
RUNS = 7


def timed(argv, env=None):
    samples = []
    for _ in range(RUNS):
        start = time.perf_counter()
        subprocess.run(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=False, env=env)
        samples.append(time.perf_counter() - start)
    return statistics.median(samples)


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--scontrol", help="the scontrol to call (default: a stand-in printing an idle node)")
    args = parser.parse_args()
    sys.path.insert(0, str(REPO))
    from gpuprep.zipapp import probe_zipapp
    pyz = probe_zipapp()
    sources = [a for c in CAPTURES for a in ("--from", str(c))]
    with tempfile.TemporaryDirectory() as tmp:
        scontrol = args.scontrol
        if not scontrol:
            scontrol = os.path.join(tmp, "scontrol")
            with open(scontrol, "w") as fh:
                fh.write(f"#!/bin/sh\n[ \"$1\" = show ] && exec cat {IDLE}\nexit 0\n")
            os.chmod(scontrol, 0o755)
        env = dict(os.environ, SLURMD_NODENAME="node1")
        python = "python3"
        bare = timed([python, "-c", "pass"])
        hook = timed([python, pyz, "slurm", "healthcheck", "--scontrol", scontrol, *sources], env)
        npd = timed([python, pyz, "npd", *sources])
        check = timed([sys.executable, "-m", "gpuprep", "check", "--json", *sources])
    print(f"median of {RUNS} runs each (8x H100 capture)")
    print(f"python3 -c pass                          {bare * 1000:8.1f} ms   1.00x")
    print(f"gpuprep-probe.pyz slurm healthcheck      {hook * 1000:8.1f} ms   {hook / bare:5.2f}x bare   (goal < 2000 ms)")
    print(f"gpuprep-probe.pyz npd                    {npd * 1000:8.1f} ms   {npd / bare:5.2f}x bare")
    print(f"gpuprep check --json                     {check * 1000:8.1f} ms   {check / bare:5.2f}x bare")


if __name__ == "__main__":
    main()
