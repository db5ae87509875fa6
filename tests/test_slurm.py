"""gpuprep against a real Slurm: Debian's slurmctld, slurmd and munge (22.05) in a systemd container with no
network, gpuprep's node probe (the zipapp) as HealthCheckProgram and Prolog, judging real captures in place of
GPUs. A broken node is drained with gpuprep's reason, resumed once fixed (and, where asked, only after a passing
burn-in); an admin's drain survives every run; a failing prolog requeues the job and drains the node; a burn-in
runs under srun."""
import json
import os
import subprocess
import sys
import time

import pytest

from conftest import CORPUS, REPO
from containers import SLURM_COMMON, docker, docker_ready, node_exec, remove_nodes, slurm_ready, start_slurm_node

pytestmark = [pytest.mark.docker, pytest.mark.slow,
              pytest.mark.skipif(not (docker_ready() and slurm_ready()),
                                 reason="needs Docker and the Slurm image (.ci/docker-setup.sh)")]

NODE = "gpslurm1"
INTERVAL = 5                      # HealthCheckInterval, seconds
PYZ = "/opt/gpuprep/gpuprep-probe.pyz"
FACTS = "/etc/gpuprep/facts.txt"   # what the hooks judge: a capture copied in by each test
FAILING = "a100-sxm4-x4.nvidia-smi-q.txt"      # gpu.row-remap fails
HEALTHY = "a10.nvidia-smi-q.txt"
REPORT = "/var/lib/gpuprep/burnin.json"

SLURM_CONF = f"""ClusterName=gpuprep
SlurmctldHost={NODE}
{SLURM_COMMON}HealthCheckProgram=/usr/local/sbin/gpuprep-healthcheck
HealthCheckInterval={INTERVAL}
HealthCheckNodeState=ANY
Prolog=/usr/local/sbin/gpuprep-prolog
NodeName={NODE} CPUs=2 RealMemory=1000 State=UNKNOWN
PartitionName=debug Nodes={NODE} Default=YES MaxTime=INFINITE State=UP
"""


def sh(script, check=True):
    done = node_exec(NODE, "sh", "-c", script)
    if check and done.returncode != 0:
        raise AssertionError(f"{script}\n{done.stdout}{done.stderr}")
    return done


def hook(name, extra=""):
    return f"#!/bin/sh\nexec python3 {PYZ} slurm {name} --from {FACTS} {extra}\n"


def write(path, text, mode="0644"):
    done = subprocess.run(["docker", "exec", "-i", NODE, "sh", "-c",
                           f"mkdir -p \"$(dirname {path})\" && cat > {path} && chmod {mode} {path}"],
                          input=text, text=True, capture_output=True, timeout=60)
    assert done.returncode == 0, done.stderr


@pytest.fixture(scope="module")
def slurm():
    from gpuprep.zipapp import probe_zipapp
    # this checkout and its venv (torch included) at the same paths, for the burn-in under srun; the venv's
    # interpreter too, unless it is the system's (/usr: the container's own Debian python3 is the same one)
    mounts = [f"{path}:{path}:ro" for path in (str(REPO), sys.prefix) + (
        (sys.base_prefix,) if sys.base_prefix not in ("/usr", "/usr/local", "/") else ())]
    start_slurm_node(NODE, mounts=mounts)
    sh(f"mkdir -p {os.path.dirname(PYZ)} /etc/gpuprep /var/lib/gpuprep")
    docker("cp", probe_zipapp(), f"{NODE}:{PYZ}", check=True)
    facts(HEALTHY)
    write("/usr/local/sbin/gpuprep-healthcheck", hook("healthcheck"), "0755")
    write("/usr/local/sbin/gpuprep-prolog", hook("prolog"), "0755")
    write("/etc/slurm/slurm.conf", SLURM_CONF)
    sh("systemctl start slurmctld slurmd")
    wait_for(lambda: "idle" in sh(f"sinfo -h -N -n {NODE} -o %T", check=False).stdout, "the node to come up idle")
    yield NODE
    remove_nodes([NODE])


def facts(capture):
    docker("cp", str(CORPUS / capture), f"{NODE}:{FACTS}", check=True)


def state():
    """(flags, reason) as scontrol shows them."""
    from gpuprep.slurm import parse_node
    node = parse_node(sh(f"scontrol show node {NODE}").stdout, NODE)
    return node.flags, node.reason


def wait_for(condition, what, timeout=90):
    """Poll until `condition()`: a hang bound, never a timing assertion (the node acts within an interval, but CI
    machines are busy)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = condition()
        if value:
            return value
        time.sleep(1)
    raise AssertionError(f"timed out waiting for {what}; node: {state() if what != 'the node to come up idle' else ''}"
                         f"\n{sh('journalctl -t gpuprep --no-pager -n 20', check=False).stdout}")


def drained_by_gpuprep():
    from gpuprep.adapters import is_own_reason
    flags, reason = state()
    return "DRAIN" in flags and is_own_reason(reason)


def healthy_and_open():
    flags, _ = state()
    return "DRAIN" not in flags


def test_a_broken_node_is_drained_with_gpupreps_reason_and_resumed_once_fixed(slurm):
    facts(FAILING)
    wait_for(drained_by_gpuprep, "gpuprep to drain the node")
    flags, reason = state()
    assert reason.startswith("gpu.row-remap GPU1") and reason.endswith(" (gpuprep)")
    assert sh("sinfo -R -h -o '%20E'").stdout.strip().startswith("gpu.row-remap GPU1")   # sinfo's 20 characters
    journal = sh("journalctl -t gpuprep --no-pager -n 50").stdout
    assert "drain: failing" in journal and "gpu.row-remap fail GPU1" in journal          # the full list is logged
    facts(HEALTHY)
    wait_for(healthy_and_open, "gpuprep to resume the node")


def test_an_admins_drain_survives_every_run(slurm):
    facts(HEALTHY)
    wait_for(healthy_and_open, "a healthy open node")
    sh(f"scontrol update NodeName={NODE} State=DRAIN Reason='bad DIMM, ticket 4711'")
    try:
        for capture in (HEALTHY, FAILING, HEALTHY):
            facts(capture)
            before = sh("journalctl -t gpuprep --no-pager -o cat | wc -l").stdout.strip()
            wait_for(lambda: sh("journalctl -t gpuprep --no-pager -o cat | wc -l").stdout.strip() != before,
                     "the health check to run")
            time.sleep(1)
            flags, reason = state()
            assert "DRAIN" in flags and reason == "bad DIMM, ticket 4711", (capture, flags, reason)
        assert "drained by someone else" in sh("journalctl -t gpuprep --no-pager -n 5 -o cat").stdout
    finally:
        sh(f"scontrol update NodeName={NODE} State=RESUME")


def test_return_to_service_waits_for_a_passing_burnin(slurm):
    write("/usr/local/sbin/gpuprep-healthcheck",
          hook("healthcheck", f"--require-burnin {REPORT} --burnin-within 24h"), "0755")
    try:
        facts(FAILING)
        wait_for(drained_by_gpuprep, "gpuprep to drain the node")
        facts(HEALTHY)
        wait_for(lambda: "no readable burn-in report" in sh("journalctl -t gpuprep --no-pager -n 5 -o cat").stdout,
                 "the health check to see the healthy node")
        assert drained_by_gpuprep()                     # healthy, but no burn-in yet: stays out of service
        stamp = time.strftime("%Y-%m-%dT%H:%M:%S+00:00", time.gmtime())
        from gpuprep.parsers import import_files
        gpu = import_files([str(CORPUS / HEALTHY)]).gpus[0]
        ranks = [{"rank": 0, "world_size": 1, "host": sh("hostname").stdout.strip(), "device": "cuda:0",
                  "gpu_uuid": gpu.uuid, "pci_bus_id": gpu.pci_bus_id, "steps": 20, "step_ms": [5.0] * 20}]
        write(REPORT, json.dumps({"schema": "gpuprep.burnin/1", "verdict": "fail", "generated_at": stamp,
                                  "ranks": ranks}))
        wait_for(lambda: "did not pass" in sh("journalctl -t gpuprep --no-pager -n 5 -o cat").stdout,
                 "the health check to read the failed burn-in")
        assert drained_by_gpuprep()
        other = [dict(ranks[0], host="some-other-node")]   # a pass from another node (a shared file system)
        write(REPORT, json.dumps({"schema": "gpuprep.burnin/1", "verdict": "pass", "generated_at": stamp,
                                  "ranks": other}))
        wait_for(lambda: "not on this node" in sh("journalctl -t gpuprep --no-pager -n 5 -o cat").stdout,
                 "the health check to refuse another node's burn-in")
        assert drained_by_gpuprep()
        stamp = time.strftime("%Y-%m-%dT%H:%M:%S+00:00", time.gmtime(time.time() + 1))
        write(REPORT, json.dumps({"schema": "gpuprep.burnin/1", "verdict": "pass", "generated_at": stamp,
                                  "ranks": ranks}))
        wait_for(healthy_and_open, "the node to return after a passing burn-in")
    finally:
        write("/usr/local/sbin/gpuprep-healthcheck", hook("healthcheck"), "0755")
        sh(f"rm -f {REPORT}")


def test_a_failing_prolog_requeues_the_job_and_drains_the_node(slurm):
    facts(HEALTHY)
    wait_for(healthy_and_open, "a healthy open node")
    facts(FAILING)
    job = sh("sbatch --parsable --wrap 'sleep 1'").stdout.strip().split(";")[0]
    wait_for(drained_by_gpuprep, "the prolog (or health check) to drain the node")
    shown = wait_for(lambda: (lambda text: text if "Restarts=0" not in text or "JobState=PENDING" in text
                              else None)(sh(f"scontrol show job {job}").stdout), "the job to be requeued")
    assert "JobState=PENDING" in shown or "Restarts=1" in shown, shown
    assert "JobState=COMPLETED" not in shown
    facts(HEALTHY)
    wait_for(healthy_and_open, "gpuprep to resume the node")
    sh(f"scancel {job}", check=False)


def test_a_burnin_under_srun_with_two_gloo_ranks(slurm):
    facts(HEALTHY)
    wait_for(healthy_and_open, "a healthy open node")
    gpuprep = os.path.join(sys.prefix, "bin", "gpuprep")
    done = sh(f"srun -N1 -n1 --time=5 {gpuprep} burnin --duration 10s --backend gloo --nproc 2 --json "
              f"-o /tmp/burnin.json; echo rc=$?", check=False)
    assert "rc=0" in done.stdout, done.stdout[-3000:] + done.stderr[-3000:]
    report = json.loads(sh("cat /tmp/burnin.json").stdout)
    assert report["schema"] == "gpuprep.burnin/1" and len(report["ranks"]) == 2, done.stdout + done.stderr
    assert report["verdict"] in ("pass", "warn"), report["findings"]


def test_slurms_allocation_names_the_nodes_and_this_nodes_rank(slurm):
    """Inside an allocation of several nodes, the burn-in takes its node count, rank and rendezvous from Slurm's
    environment and `scontrol show hostnames` (the real one)."""
    script = ("from gpuprep.slurm import allocation; import json; "
              "print(json.dumps(allocation({'SLURM_JOB_ID': '7', 'SLURM_NNODES': '3', 'SLURM_NODEID': '2', "
              "'SLURM_JOB_NODELIST': 'gpu[07-08],dgx1'})))")
    done = sh(f"PYTHONPATH={PYZ} python3 -c \"{script}\"")
    assert json.loads(done.stdout) == [3, 2, "gpu07"]


BASE_CONF = "\n".join(line for line in SLURM_CONF.splitlines()
                      if not line.startswith(("HealthCheck", "Prolog"))) + "\n"


def test_the_slurm_health_role_converges_is_idempotent_and_reverts(slurm, tmp_path):
    from conftest import run_cli
    from containers import write_inventory
    write("/etc/slurm/slurm.conf", BASE_CONF)
    sh("scontrol reconfigure")
    facts(HEALTHY)
    inventory = write_inventory(tmp_path / "slurm.yml", [NODE])
    settings = ["-e", json.dumps({"slurm_health_interval": INTERVAL, "slurm_health_sources": [FACTS],
                                  "slurm_health_prolog": True})]

    def apply(*args, playbook="apply"):
        done = run_cli(playbook, "-i", str(inventory), "--tags", "slurm_health", *args, "--json", timeout=600)
        assert done.stdout.strip().startswith("{"), done.stdout[-2000:] + done.stderr[-2000:]
        return done.returncode, json.loads(done.stdout)["hosts"][NODE]

    code, host = apply(*settings, "--check", "--diff")
    assert code == 0 and host["changed"] > 0, host["failed_tasks"]
    assert sh("cat /etc/slurm/slurm.conf").stdout == BASE_CONF        # --check changed nothing
    code, host = apply(*settings)
    assert code == 0 and host["changed"] > 0, host
    assert sh("cat /etc/slurm/slurm.conf").stdout.endswith("Include /etc/slurm/gpuprep.conf\n")
    config = sh("scontrol show config").stdout
    assert "/usr/local/sbin/gpuprep-slurm-healthcheck" in config and "/usr/local/sbin/gpuprep-slurm-prolog" in config
    code, host = apply(*settings)
    assert code == 0 and host["changed"] == 0, host["changed_tasks"]                # idempotent
    facts(FAILING)
    wait_for(drained_by_gpuprep, "the role's health check to drain the node")
    facts(HEALTHY)
    wait_for(healthy_and_open, "the role's health check to resume the node")
    code, host = apply(playbook="revert")
    assert code == 0, host
    assert sh("cat /etc/slurm/slurm.conf").stdout == BASE_CONF
    assert sh("ls /etc/slurm/gpuprep.conf /usr/local/sbin/gpuprep-slurm-healthcheck", check=False).returncode != 0
    assert "gpuprep-slurm" not in sh("scontrol show config").stdout         # HealthCheckProgram, Prolog unset
