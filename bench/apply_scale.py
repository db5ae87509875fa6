#!/usr/bin/env python3
"""Converge and idempotent re-run wall times of `gpuprep apply` for 1, 4 and 8 nodes (systemd
containers with the fake GPU tools), and the same playbooks under plain `ansible-playbook`
defaults (forks 5, no pipelining, full fact gathering), measured side by side in one run.

Goals: 8 nodes within 2.5x of 1 node; an idempotent re-run at most half a converge; gpuprep's
settings at least 1.5x faster than Ansible's defaults.

Beside them it measures Ansible's own floor on this machine: a play of as many no-op remote tasks
as gpuprep's re-run executes, with gpuprep's settings, on the same nodes. No playbook of that
length can scale better from 1 to N nodes than that floor does here, and it prints how busy the machine's
cores were during each size's runs.  Needs Docker and the base image
(.ci/docker-setup.sh).  Usage: python bench/apply_scale.py [--sizes 1,4,8]"""
import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "tests"))
from containers import prepare, remove_nodes, start_nodes, write_inventory  # noqa: E402
from gpuprep.resources import collections_path  # noqa: E402


def cpu_ticks():
    """(busy, total) jiffies of the whole machine: controller and node containers share these cores."""
    fields = [int(v) for v in Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:]]
    idle = fields[3] + fields[4]
    return sum(fields) - idle, sum(fields)


BUSY = {}   # run label -> share of the machine's CPU time that was busy during it
CONTROLLER_CPU = {}   # run label -> CPU seconds of the command's whole process tree (the controller's cost)


def children_cpu() -> float:
    import resource
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def timed(argv, env=None, output=False, label=None):
    start, (busy0, total0), cpu0 = time.perf_counter(), cpu_ticks(), children_cpu()
    done = subprocess.run(argv, capture_output=True, text=True, env=env)
    seconds = time.perf_counter() - start
    busy1, total1 = cpu_ticks()
    if label:
        BUSY[label] = (busy1 - busy0) / max(1, total1 - total0)
        CONTROLLER_CPU[label] = children_cpu() - cpu0
    if done.returncode != 0:
        raise SystemExit(f"{' '.join(argv[:4])} failed:\n{done.stdout[-2000:]}{done.stderr[-2000:]}")
    return (seconds, done.stdout) if output else seconds


def floor_play(tmp: Path, tasks: int) -> Path:
    """A play of `tasks` no-op remote tasks: what Ansible itself costs per task and host here."""
    body = "".join(f"    - name: no-op {i}\n      ansible.builtin.command: /bin/true\n      changed_when: false\n"
                   for i in range(tasks))
    path = tmp / f"floor-{tasks}.yml"
    path.write_text(f"- hosts: all\n  gather_facts: true\n  gather_subset: [min, hardware, network, virtual]\n"
                    f"  tasks:\n{body}")
    return path


def floor_time(inventory: Path, play: Path, forks: int) -> float:
    """The floor play under gpuprep's settings (Mitogen's strategy, forks sized to the inventory)."""
    from gpuprep.ansible.runner import mitogen_env
    bindir = os.path.dirname(sys.executable)
    env = dict(os.environ, ANSIBLE_PIPELINING="True", ANSIBLE_HOST_KEY_CHECKING="False", **mitogen_env(),
               PATH=bindir + os.pathsep + os.environ["PATH"])
    return timed([os.path.join(bindir, "ansible-playbook"), "-i", str(inventory), "-f", str(forks), str(play)], env)


def defaults_copy(tmp: Path) -> Path:
    """The same collection playbook (its roles from the collection), minus gpuprep's speed settings
    (gather_subset, pipelining, forks)."""
    copy = tmp / "playbooks"
    copy.mkdir(parents=True)
    text = (REPO / "collection" / "playbooks" / "apply.yml").read_text().replace("  gather_subset: [min, hardware, network, virtual]\n", "")
    (copy / "apply.yml").write_text(text)
    (copy / "ansible.cfg").write_text("[defaults]\nhost_key_checking = False\n")
    return copy


def run_size(n: int, tmp: Path, mode: str):
    names = [f"gpuprep-bench-{i}" for i in range(n)]
    start_nodes(names)
    try:
        inventory = write_inventory(tmp / f"inv-{n}-{mode}.yml", names)
        prepare(inventory, forks=max(n, 5))
        bindir = os.path.dirname(sys.executable)
        if mode == "gpuprep":
            argv = [os.path.join(bindir, "gpuprep"), "apply", "-i", str(inventory), "--json"]
            env = None
        else:
            playbooks = defaults_copy(tmp / f"defaults-{n}")
            argv = [os.path.join(bindir, "ansible-playbook"), "-i", str(inventory), str(playbooks / "apply.yml")]
            env = dict(os.environ, ANSIBLE_CONFIG=str(playbooks / "ansible.cfg"), ANSIBLE_COLLECTIONS_PATH=str(collections_path()),
                       PATH=bindir + os.pathsep + os.environ["PATH"])
        converge = timed(argv, env, label=(n, mode, "converge"))
        rerun, report = timed(argv, env, output=True, label=(n, mode, "re-run"))
        floor = None
        if mode == "gpuprep":
            hosts = json.loads(report)["hosts"]
            executed = max(h["ok"] for h in hosts.values())
            floor = floor_time(inventory, floor_play(tmp, executed), max(n, 5))
        return converge, rerun, floor
    finally:
        remove_nodes(names)


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--sizes", default="1,4,8")
    sizes = [int(s) for s in parser.parse_args().sizes.split(",")]
    results = {}
    with tempfile.TemporaryDirectory() as tmp:
        for n in sizes:
            for mode in ("gpuprep", "ansible-defaults"):
                results[(n, mode)] = run_size(n, Path(tmp), mode)
                converge, rerun, floor = results[(n, mode)]
                print(f"  measured {mode:16s} {n} node(s): converge {converge:6.1f} s, re-run {rerun:6.1f} s"
                      + (f", no-op floor {floor:6.1f} s" if floor else ""), flush=True)
    print()
    print(f"{'nodes':>5}  {'gpuprep converge':>16}  {'re-run':>7}  {'re-run/converge':>15}  "
          f"{'defaults converge':>17}  {'defaults/gpuprep':>16}")
    for n in sizes:
        g, d = results[(n, "gpuprep")], results[(n, "ansible-defaults")]
        print(f"{n:>5}  {g[0]:>15.1f}s  {g[1]:>6.1f}s  {g[1] / g[0]:>15.2f}  {d[0]:>16.1f}s  {d[0] / g[0]:>16.2f}")
    if 1 in sizes and max(sizes) > 1:
        big = max(sizes)
        print(f"\n{big} nodes vs 1 node (gpuprep converge): {results[(big, 'gpuprep')][0] / results[(1, 'gpuprep')][0]:.2f}x"
              f", re-run: {results[(big, 'gpuprep')][1] / results[(1, 'gpuprep')][1]:.2f}x   (goal <= 2.5x)")
        print(f"  Ansible's floor here (no-op play of the re-run's length, same settings): "
              f"{results[(1, 'gpuprep')][2]:.1f} s on 1 node, {results[(big, 'gpuprep')][2]:.1f} s on {big}: "
              f"{results[(big, 'gpuprep')][2] / results[(1, 'gpuprep')][2]:.2f}x")
    print(f"  CPU busy during gpuprep's runs ({os.cpu_count()} cores shared by controller and nodes): "
          + ", ".join(f"{n} node(s) converge {BUSY[(n, 'gpuprep', 'converge')]:.0%} re-run {BUSY[(n, 'gpuprep', 're-run')]:.0%}"
                      for n in sizes))
    print(f"\n{'nodes':>5}  {'controller CPU s/host converge':>30}  {'vs 1':>6}  {'re-run':>7}  {'vs 1':>6}")
    for n in sizes:
        converge, rerun = (CONTROLLER_CPU[(n, "gpuprep", kind)] / n for kind in ("converge", "re-run"))
        first = [CONTROLLER_CPU[(sizes[0], "gpuprep", kind)] / sizes[0] for kind in ("converge", "re-run")]
        print(f"{n:>5}  {converge:>30.2f}  {converge / first[0]:>5.2f}x  {rerun:>7.2f}  {rerun / first[1]:>5.2f}x")
    print("  (goal: per-host controller CPU at the largest size within 1.2x of the smallest)")
    print("idempotent re-run / converge (gpuprep): "
          + ", ".join(f"{n}: {results[(n, 'gpuprep')][1] / results[(n, 'gpuprep')][0]:.2f}" for n in sizes)
          + "   (goal <= 0.5)")
    print("Ansible defaults / gpuprep (converge): "
          + ", ".join(f"{n}: {results[(n, 'ansible-defaults')][0] / results[(n, 'gpuprep')][0]:.2f}x" for n in sizes)
          + "   (goal >= 1.5x)")


if __name__ == "__main__":
    main()
