#!/usr/bin/env python3
"""`gpuprep check -i` over 1, 4 and 8 nodes (systemd containers, reached through docker exec): wall time and
the controller's CPU seconds per host, side by side in one run.

Controller CPU is what limits a large fleet (Ansible forks a worker per host and task, and every connection
runs a client process on the controller); unlike wall time it can be measured on two shared cores: it is
the CPU time of the whole `gpuprep check` process tree (getrusage of the waited-for children). The nodes' own
work (the probe, here inside the containers via dockerd) is not controller time.

Goal: controller CPU per host at 8 hosts within 1.2x of 1 host. From the numbers it prints what a
1,000-node check costs on a 16-core controller and which --forks keeps those cores busy.
Needs Docker and the base image (.ci/docker-setup.sh).  Usage: python bench/check_fleet.py [--sizes 1,4,8]"""
import argparse
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "tests"))
from containers import remove_nodes, start_nodes, write_inventory  # noqa: E402


def children_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def main_process_cpu(proc, seen):
    """The CPU time of ansible-playbook's main process itself (not its workers): it is single-threaded and
    every host's results pass through it, so it is the serial part of a fleet run."""
    import psutil
    try:
        for child in psutil.Process(proc.pid).children(recursive=True):
            if "ansible-playbook" in " ".join(child.cmdline()[:2]) and child.ppid() != 1:
                times = child.cpu_times()
                if child.parent() and "ansible-playbook" not in " ".join(child.parent().cmdline()[:2]):
                    seen[child.pid] = times.user + times.system
    except psutil.Error:
        pass


def measured(argv, ok=(0, 1)):
    """(wall seconds, controller CPU seconds, ansible-playbook main process CPU seconds) of one command."""
    cpu0, start = children_cpu(), time.perf_counter()
    proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    seen = {}
    while proc.poll() is None:
        main_process_cpu(proc, seen)
        time.sleep(0.05)
    out, err = proc.communicate()
    wall, cpu = time.perf_counter() - start, children_cpu() - cpu0
    if proc.returncode not in ok:
        raise SystemExit(f"{' '.join(argv[:4])} failed ({proc.returncode}):\n{out[-2000:]}{err[-2000:]}")
    return wall, cpu, max(seen.values(), default=0.0)


def run_size(n: int, tmp: Path, repeats: int):
    names = [f"gpuprep-fleetbench-{i}" for i in range(n)]
    start_nodes(names)
    try:
        inventory = write_inventory(tmp / f"inv-{n}.yml", names)
        gpuprep = os.path.join(os.path.dirname(sys.executable), "gpuprep")
        argv = [gpuprep, "check", "-i", str(inventory), "--json"]
        measured(argv)                       # warm: the zipapp cache, the page cache
        runs = [measured(argv) for _ in range(repeats)]
        return tuple(min(r[i] for r in runs) for i in range(3))
    finally:
        remove_nodes(names)


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--sizes", default="1,4,8")
    parser.add_argument("--repeats", type=int, default=3, help="runs per size; the least is kept (noise only adds)")
    args = parser.parse_args()
    sizes = [int(s) for s in args.sizes.split(",")]
    results = {}
    with tempfile.TemporaryDirectory() as tmp:
        for n in sizes:
            results[n] = run_size(n, Path(tmp), args.repeats)
            print(f"  measured {n} host(s): wall {results[n][0]:.2f} s, controller CPU {results[n][1]:.2f} s", flush=True)
    print()
    print(f"{'hosts':>5}  {'wall s':>7}  {'controller CPU s':>16}  {'CPU s/host':>10}  {'CPU/host vs 1':>13}  "
          f"{'marginal CPU s/host':>19}  {'main process CPU s':>18}")
    small, big = sizes[0], max(sizes)
    base = results[small][1] / small
    for n in sizes:
        wall, cpu, main_cpu = results[n]
        marginal = (cpu - results[small][1]) / (n - small) if n > small else float("nan")
        print(f"{n:>5}  {wall:>7.2f}  {cpu:>16.2f}  {cpu / n:>10.3f}  {cpu / n / base:>12.2f}x  {marginal:>19.3f}  "
              f"{main_cpu:>18.2f}")
    per_host = results[big][1] / big
    print(f"\ncontroller CPU per host at {big} hosts vs {small}: {per_host / base:.2f}x   (goal <= 1.2x)")
    if big > small:
        _estimate(results, small, big)


def _estimate(results, small, big, hosts=1000, cores=16):
    """What `hosts` cost from the fixed and per-host parts measured here."""
    marginal = (results[big][1] - results[small][1]) / (big - small)
    fixed = results[small][1] - small * marginal
    serial = max(0.0, (results[big][2] - results[small][2]) / (big - small))   # main process, per host
    total = fixed + hosts * marginal
    floor = max(total / cores, hosts * serial)
    wall_one = results[small][0]
    forks = max(1, round(cores * wall_one / marginal))
    print(f"{hosts:,} hosts on a {cores}-core controller: {fixed:.1f} CPU s fixed + {marginal:.3f} per host = "
          f"{total:.0f} CPU s; at least {total / cores:.0f} s with all cores busy, and ansible-playbook's "
          f"single-threaded main process needs {serial:.3f} s per host = {hosts * serial:.0f} s: expect >= {floor:.0f} s. "
          f"One host takes {wall_one:.1f} s end to end, so --forks {min(forks, 500)} keeps {cores} cores busy.")


if __name__ == "__main__":
    main()
