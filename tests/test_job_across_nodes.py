"""`gpuprep watch --job` on a real Slurm (Debian's 22.05) of three nodes on one machine: one systemd container a
node on the host's network namespace, node i at 127.0.2.i with its own slurmd port, host name and PID namespace.
A real gloo data-parallel job (tests/data/jobs/fault_job.py) runs across the nodes through srun, one rank a node,
and a fault from the labelled suite (tests/data/jobs/faults.csv) is put into it. Every node has the C stand-in of
libnvidia-ml as its GPU (a real A10's capture); one case's node reports HW slowdown. gpuprep watch --job is run on
the first node, as an admin would; it must name the class of the incident, the rank, its node and GPU, and say
node, code or not known. One cluster serves every case."""
import contextlib
import csv
import json
import os
import subprocess
import sys
import time

import pytest

from conftest import CORPUS, REPO
from containers import docker_ready, node_exec, remove_nodes, slurm_ready, start_slurm_cluster

pytestmark = [pytest.mark.docker, pytest.mark.slow,
              pytest.mark.skipif(not (docker_ready() and slurm_ready()),
                                 reason="needs Docker and the Slurm image (.ci/docker-setup.sh)"),
              pytest.mark.skipif(__import__("importlib.util").util.find_spec("torch") is None,
                                 reason="a real gloo job")]

NODES = ["gpjob1", "gpjob2", "gpjob3"]
CONFIG = "/etc/gpuprep/nvml.conf"           # each node's stand-in GPU (GPUPREP_FAKE_NVML)
FAULTS = REPO / "tests" / "data" / "jobs" / "faults.csv"
JOB = REPO / "tests" / "data" / "jobs" / "fault_job.py"
CAPTURE = "a10.nvidia-smi-q.txt"
HEALTHY_STEPS = 150
BOUND = 240


def cases():
    with open(FAULTS, newline="") as fh:
        return [row for row in csv.DictReader(fh) if not row["case"].startswith("#")]


def sh(node, script, check=True, timeout=120):
    done = subprocess.run(["docker", "exec", node, "sh", "-c", script], capture_output=True, text=True,
                          timeout=timeout)
    if check and done.returncode != 0:
        raise AssertionError(f"{node}: {script}\n{done.stdout}{done.stderr}")
    return done


def _write(node, path, text):
    done = subprocess.run(["docker", "exec", "-i", node, "sh", "-c", f"mkdir -p $(dirname {path}) && cat > {path}"],
                          input=text, text=True, capture_output=True, timeout=60)
    assert done.returncode == 0, done.stderr


@contextlib.contextmanager
def bed():
    """The cluster up, every node's stand-in GPU healthy; removed after."""
    import nvml_stub
    from gpuprep.parsers import import_files
    lib = nvml_stub.build(570)
    mounts = [f"{path}:{path}:ro" for path in (str(REPO), sys.prefix) + (
        (sys.base_prefix,) if sys.base_prefix not in ("/usr", "/usr/local", "/") else ())]
    start_slurm_cluster(NODES, mounts=mounts)
    config = nvml_stub.config_for(import_files([str(CORPUS / CAPTURE)]))
    for node in NODES:
        _write(node, CONFIG, config + "\ngpu 0 util 35,10\ngpu 0 reasons 0x0\n")
    _wait(lambda: sh(NODES[0], "sinfo -h -N -o %T", check=False).stdout.split().count("idle") == len(NODES),
          "three idle nodes")
    try:
        yield {"lib": str(lib)}
    finally:
        remove_nodes(NODES)


@pytest.fixture(scope="module")
def cluster():
    with bed() as up:
        yield up


def _wait(condition, what, timeout=120):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if condition():
            return
        time.sleep(0.5)
    raise AssertionError(f"timed out waiting for {what}")


def submit(case, port):
    """The job, one rank a node, through sbatch and srun as a user would; the moment of its fault in /tmp/fault.log
    on the faulty rank's node. A healthy job runs HEALTHY_STEPS steps and ends; a faulty one runs until stopped."""
    steps = HEALTHY_STEPS if case["fault"] == "healthy" else 0
    env = (f"FAULT={case['fault']} FAULT_RANK={case['rank']} FAULT_STEP={case['step']} FAULT_LOG=/tmp/fault.log "
           f"STEPS={steps} MASTER_ADDR=127.0.2.1 MASTER_PORT={port} GLOO_SOCKET_IFNAME=lo OMP_NUM_THREADS=1")
    script = (f"#!/bin/sh\nexport {env}\nexec srun --kill-on-bad-exit=0 {sys.executable} {JOB}\n")
    _write(NODES[0], "/tmp/job.sh", script)
    for node in NODES:
        sh(node, "rm -f /tmp/fault.log")
    done = sh(NODES[0], f"sbatch --parsable -N {len(NODES)} --ntasks-per-node=1 -o /tmp/job.%j.out /tmp/job.sh")
    return done.stdout.strip().split(";")[0]


def job_state(job_id):
    text = sh(NODES[0], f"scontrol show job -o {job_id}", check=False).stdout
    return next((w.split("=", 1)[1] for w in text.split() if w.startswith("JobState=")), "?")


def watch(cluster, job_id, until):
    """gpuprep watch --job on the first node: until the job ends (a healthy one), or until a problem stands
    (--until warn); BOUND is a hang guard, never what a verdict waits for."""
    done = sh(NODES[0], f"LD_LIBRARY_PATH={cluster['lib']} GPUPREP_FAKE_NVML={CONFIG} "
              f"{sys.executable} -m gpuprep watch --job {job_id} --duration {BOUND}s --json" +
              (f" --until {until}" if until else ""), check=False, timeout=BOUND + 120)
    assert done.returncode in (0, 1), done.stderr[-3000:]
    return json.loads(done.stdout), done


def free_port():
    import socket
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.mark.parametrize("case", cases(), ids=lambda c: c["case"])
def test_each_labelled_fault_is_named_with_its_rank_node_and_gpu(cluster, case):
    node = NODES[int(case["rank"])]
    if case["node_signal"]:
        sh(node, f"sed -i 's/^gpu 0 reasons .*/gpu 0 reasons {case['node_signal']}/' {CONFIG}")
    try:
        job_id = submit(case, free_port())
        _wait(lambda: job_state(job_id) == "RUNNING", f"job {job_id} to run")
        report, done = watch(cluster, job_id, case["until"] or None)
    finally:
        sh(node, f"sed -i 's/^gpu 0 reasons .*/gpu 0 reasons 0x0/' {CONFIG}")
        # SIGKILL: a stopped rank (the sigstop case) takes no SIGTERM, and Slurm would wait KillWait for it
        sh(NODES[0], "scancel --full --signal=KILL $(squeue -h -o %i) 2>/dev/null; true", check=False)
    right, _ = judged_right(case, report)
    said = [f"{f['severity']} {f['id']} {f['subject']}: {f['title']}" for f in report["findings"] if f["severity"] != "pass"]
    ranks = [(r["rank"], r["host"], r["main_thread"], r["last_stack"]) for r in report["ranks"]]
    answers = [f["evidence"] for f in report["findings"] if f["id"] == "job.node-or-code"]
    assert right, "\n".join([case["case"], *map(str, answers), *said, *map(str, ranks), done.stderr[-1000:]])


def judged_right(case, report):
    """(whether the report names the case as its label says, when the watch first saw the problem named): the
    class's id; the rank, its node and its GPU; the answer node, code or not known. A healthy case: no warning
    and no failure at all."""
    bad = [f for f in report["findings"] if f["severity"] in ("warn", "fail")]
    if case["expect"] == "healthy":
        return not bad and report["verdict"] in ("pass", "info"), None
    rank, node = int(case["rank"]), NODES[int(case["rank"])]
    named = [f for f in bad if f["id"] == case["expect"] and f["evidence"].get("rank") == rank
             and f["evidence"].get("host") == node and f["evidence"].get("gpu")]
    answer = [f for f in report["findings"] if f["id"] == "job.node-or-code" and f["evidence"].get("rank") == rank]
    right = bool(named) and bool(answer) and answer[0]["evidence"]["fault"] == case["fault_at"]
    return right, named[0]["evidence"].get("seen_at") if named else None


def test_a_job_that_is_not_running_is_refused_in_one_line(cluster):
    job_id = sh(NODES[0], "sbatch --parsable -N 1 --wrap 'sleep 1' -o /dev/null").stdout.strip().split(";")[0]
    _wait(lambda: job_state(job_id) not in ("PENDING", "RUNNING", "COMPLETING"), "the job to end")
    done = sh(NODES[0], f"{sys.executable} -m gpuprep watch --job {job_id}", check=False)
    assert done.returncode == 2 and "not running" in done.stderr and len(done.stderr.strip().splitlines()) == 1


def test_a_job_started_without_slurm_is_watched_through_the_inventory_and_its_hung_rank_named(cluster, tmp_path):
    """The -i path, for clusters without Slurm: the same gloo job started on each node by hand (RANK, WORLD_SIZE,
    MASTER_ADDR:MASTER_PORT in its environment, no Slurm step), rank 1 stopping before the loss all_reduce.
    `watch -i` runs one watcher a node through Ansible (the docker connection), each finds the ranks that meet at
    MASTER_ADDR:MASTER_PORT, and the merged watch names rank 1, its node and GPU as the hung rank."""
    port = free_port()
    env = (f"WORLD_SIZE={len(NODES)} LOCAL_RANK=0 MASTER_ADDR=127.0.2.1 MASTER_PORT={port} FAULT=stop FAULT_RANK=1 "
           "FAULT_STEP=8 FAULT_LOG=/tmp/fault.log STEPS=0 GLOO_SOCKET_IFNAME=lo OMP_NUM_THREADS=1")
    inventory = tmp_path / "inventory.yml"
    hosts = {node: {"ansible_connection": "docker", "ansible_python_interpreter": sys.executable,
                    "watch_gpuprep": os.path.join(os.path.dirname(sys.executable), "gpuprep"),
                    "gpuprep_watch_become": False,
                    "watch_environment": {"LD_LIBRARY_PATH": cluster["lib"], "GPUPREP_FAKE_NVML": CONFIG}}
             for node in NODES}
    inventory.write_text(json.dumps({"all": {"hosts": hosts}}))
    try:
        for rank, node in enumerate(NODES):
            sh(node, "rm -f /tmp/fault.log")
            subprocess.run(["docker", "exec", "-d", node, "sh", "-c",
                            f"RANK={rank} {env} exec {sys.executable} {JOB} > /tmp/rank.log 2>&1"], check=True,
                           timeout=60)
        _wait(lambda: sh(NODES[1], "test -s /tmp/fault.log", check=False).returncode == 0, "rank 1 to stop")
        done = subprocess.run([sys.executable, "-m", "gpuprep", "watch", "-i", str(inventory), "--master",
                               f"127.0.2.1:{port}", "--duration", "12s", "--json"], capture_output=True, text=True,
                              timeout=300, cwd=str(tmp_path))
    finally:
        for node in NODES:
            sh(node, f"pkill -KILL -f {JOB} ; true", check=False)
    assert done.returncode == 1, done.stderr[-3000:]
    report = json.loads(done.stdout)
    assert sorted((r["rank"], r["host"]) for r in report["ranks"]) == [(0, "gpjob1"), (1, "gpjob2"), (2, "gpjob3")]
    right, _ = judged_right({"expect": "job.hung-rank", "rank": "1", "fault_at": "code"}, report)
    said = [f"{f['severity']} {f['id']} {f['subject']}: {f['title']}" for f in report["findings"]]
    assert right, "\n".join(said)


def test_srun_s_pieces_of_long_lines_from_every_node_are_joined_back_whole(cluster):
    """slurmstepd hands srun a task's output in messages of at most 1024 bytes, and srun writes the messages of
    all tasks as they come: a watcher's line longer than that (a node's own check) reached the merger torn, and the
    node's check was dropped as "not JSON". Through the real srun --label, every line of every node comes back
    whole, in its order."""
    from gpuprep.job.slurmjob import TaskLines
    writer = ("import json, os, sys\n"
              "for i in range(40):\n"
              "    sys.stdout.write(json.dumps({'v': 1, 'host': os.uname().nodename, 'i': i,\n"
              "                                 'pad': str(i) * (700 * (i % 7))}, separators=(',', ':')) + '\\n')\n"
              "    sys.stdout.flush()\n")
    _write(NODES[0], "/tmp/long_lines.py", writer)
    for node in NODES[1:]:
        _write(node, "/tmp/long_lines.py", writer)
    done = sh(NODES[0], f"srun -N {len(NODES)} -n {len(NODES)} --ntasks-per-node=1 --label --quiet "
              f"{sys.executable} /tmp/long_lines.py", timeout=120)
    raw = done.stdout.splitlines(keepends=True)
    tasks = TaskLines()
    lines = [line for piece in raw for line in tasks.feed(piece)] + tasks.rest()
    documents = [json.loads(line) for line in lines]
    by_host = {host: [d["i"] for d in documents if d["host"] == host] for host in NODES}
    assert by_host == {host: list(range(40)) for host in NODES}, by_host
    assert len(raw) > len(lines), "srun wrote no line in pieces: the premise of this test no longer holds"
