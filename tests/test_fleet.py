"""`gpuprep apply` through ansible-runner against real systemd containers (docker connection):
one host fails halfway, one is stopped; the others converge, the summary and exit code tell the
truth, and a re-run finishes the job. Also --check --diff and revert through the CLI."""
import json
import os

import pytest

from conftest import run_cli
from containers import docker, docker_ready, node_exec, prepare, remove_nodes, start_nodes, write_inventory

pytestmark = [pytest.mark.docker, pytest.mark.slow,
              pytest.mark.skipif(not docker_ready(), reason="needs Docker and the base image (.ci/docker-setup.sh)")]

NAMES = [f"gpuprep-fleet-{i}-{os.getpid()}" for i in range(3)]


@pytest.fixture(scope="module")
def fleet(tmp_path_factory):
    start_nodes(NAMES)
    inventory = write_inventory(tmp_path_factory.mktemp("fleet") / "inventory.yml", NAMES)
    try:
        prepare(inventory)
        yield inventory
    finally:
        remove_nodes(NAMES)


def apply(*args):
    done = run_cli("apply", *args, "--json", timeout=900)
    assert "Traceback" not in done.stderr, done.stderr
    return done, (json.loads(done.stdout) if done.stdout.strip().startswith("{") else None)


def test_check_diff_changes_nothing_then_a_real_run_does(fleet, tmp_path):
    one = write_inventory(tmp_path / "one.yml", NAMES[:1])
    done = run_cli("apply", "-i", str(one), "--check", "--diff", "--tags", "nccl_env,system_tuning,container_toolkit",
                   timeout=900)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "+NCCL_SOCKET_IFNAME=\"=eth0\"" in done.stdout          # the diff of the env file
    assert '"nvidia"' in done.stdout                           # the daemon.json merge
    assert node_exec(NAMES[0], "test", "-e", "/etc/gpuprep/env").returncode != 0
    assert node_exec(NAMES[0], "cat", "/etc/docker/daemon.json").stdout == \
        node_exec(NAMES[0], "cat", "/root/daemon.json.orig").stdout
    real, doc = apply("-i", str(one), "--tags", "nccl_env,system_tuning,container_toolkit")
    assert real.returncode == 0 and doc["hosts"][NAMES[0]]["changed"] > 0
    assert "NCCL_SOCKET_IFNAME=\"=eth0\"" in node_exec(NAMES[0], "cat", "/etc/gpuprep/env").stdout


def test_failed_and_unreachable_hosts_are_reported_and_a_rerun_finishes(fleet, tmp_path):
    broken = write_inventory(tmp_path / "broken.yml", NAMES,
                             host_vars={NAMES[1]: {"nccl_env_file": "/proc/gpuprep/env"}})
    docker("stop", "-t", "1", NAMES[2])
    try:
        done, doc = apply("-i", str(broken))
        assert done.returncode == 1
        hosts = doc["hosts"]
        assert hosts[NAMES[0]]["failed"] == 0 and hosts[NAMES[0]]["unreachable"] == 0
        assert hosts[NAMES[1]]["failed"] == 1 and hosts[NAMES[1]]["changed"] > 0     # failed halfway, after changes
        assert "nccl_env" in hosts[NAMES[1]]["failed_tasks"][0]["task"] or \
            "directories" in hosts[NAMES[1]]["failed_tasks"][0]["task"]
        assert hosts[NAMES[2]]["unreachable"] == 1 and hosts[NAMES[2]]["failed_tasks"][0]["unreachable"]
        assert not doc["ok"]
        text = run_cli("apply", "-i", str(broken), "--tags", "nccl_env", timeout=900)
        assert "1 of 3 host(s) succeeded" in text.stdout and NAMES[2] in text.stdout
    finally:
        docker("start", NAMES[2])
    node_exec(NAMES[2], "systemctl", "is-system-running", "--wait")
    # the re-run of only the hosts that did not finish (the one that did is done; a re-run of a finished host is
    # test_a_rerun_checks_each_role_in_one_read_and_repairs_what_moved's, and Molecule's idempotence)
    fixed = write_inventory(tmp_path / "fixed.yml", NAMES)
    done, doc = apply("-i", str(fixed), "--limit", ",".join(NAMES[1:]))
    assert done.returncode == 0, doc
    assert sorted(doc["hosts"]) == sorted(NAMES[1:])
    assert all(h["failed"] == 0 and h["unreachable"] == 0 and h["changed"] > 0 for h in doc["hosts"].values())


def _graphics_clocks(name):
    from gpuprep.parsers.nvsmi import parse_xml
    _header, gpus = parse_xml(node_exec(name, "nvidia-smi", "-q", "-x").stdout)
    return [fields["clock_graphics_mhz"] for _bus, fields, _element in gpus]


def test_clocks_reset_by_hand_are_reapplied(fleet, tmp_path):
    one = write_inventory(tmp_path / "one.yml", NAMES[:1])
    assert apply("-i", str(one), "--tags", "gpu_clocks")[0].returncode == 0
    planned = node_exec(NAMES[0], "nvidia-smi", "-q", "-x").stdout
    node_exec(NAMES[0], "nvidia-smi", "-rgc", check=True)         # drift: config files all unchanged
    assert _graphics_clocks(NAMES[0]) == [210, 210]      # the capture's idle clocks: the lock is gone
    done, doc = apply("-i", str(one), "--tags", "gpu_clocks")
    assert done.returncode == 0 and doc["hosts"][NAMES[0]]["changed"] > 0, doc
    assert node_exec(NAMES[0], "nvidia-smi", "-q", "-x").stdout == planned
    assert _graphics_clocks(NAMES[0]) == [2100, 2100]
    again, doc = apply("-i", str(one), "--tags", "gpu_clocks")
    assert again.returncode == 0 and doc["hosts"][NAMES[0]]["changed"] == 0, doc


def test_a_rerun_checks_each_role_in_one_read_and_repairs_what_moved(fleet, tmp_path):
    one = write_inventory(tmp_path / "one.yml", NAMES[:1])
    assert apply("-i", str(one))[0].returncode == 0
    fast, doc = apply("-i", str(one))
    assert fast.returncode == 0 and doc["hosts"][NAMES[0]]["changed"] == 0, doc
    full, full_doc = apply("-i", str(one), "--full")
    assert full.returncode == 0 and full_doc["hosts"][NAMES[0]]["changed"] == 0, full_doc
    assert doc["hosts"][NAMES[0]]["ok"] * 2 < full_doc["hosts"][NAMES[0]]["ok"]      # the roles ended early
    assert doc["hosts"][NAMES[0]]["unmoved_roles"] == ["driver_pin", "gpu_persistence", "gpu_clocks",
                                                       "container_toolkit", "nccl_env", "system_tuning"]
    assert full_doc["hosts"][NAMES[0]]["unmoved_roles"] == []

    sysctl = node_exec(NAMES[0], "cat", "/etc/sysctl.d/90-gpuprep.conf").stdout
    node_exec(NAMES[0], "sh", "-c", "echo kernel.numa_balancing=1 >> /etc/sysctl.d/90-gpuprep.conf", check=True)
    node_exec(NAMES[0], "systemctl", "stop", "nvidia-persistenced", check=True)
    node_exec(NAMES[0], "apt-mark", "unhold", "nvidia-driver-535", check=True)
    done, doc = apply("-i", str(one))
    assert done.returncode == 0, doc
    repaired = " | ".join(doc["hosts"][NAMES[0]]["changed_tasks"])
    assert "sysctl" in repaired and "persistence service" in repaired and "Hold" in repaired, repaired
    assert doc["hosts"][NAMES[0]]["unmoved_roles"] == ["gpu_clocks", "container_toolkit", "nccl_env"]
    assert sorted(doc["hosts"][NAMES[0]]["drift"]) == ["driver_pin", "gpu_persistence", "system_tuning"]
    assert node_exec(NAMES[0], "cat", "/etc/sysctl.d/90-gpuprep.conf").stdout == sysctl
    assert node_exec(NAMES[0], "systemctl", "is-active", "nvidia-persistenced").stdout.strip() == "active"
    assert node_exec(NAMES[0], "dpkg-query", "-W", "-f=${db:Status-Want}", "nvidia-driver-535").stdout == "hold"
    again, doc = apply("-i", str(one), "-e", "nccl_env_overrides={NCCL_DEBUG: WARN}")
    changed = doc["hosts"][NAMES[0]]["changed_tasks"]
    assert again.returncode == 0 and len(changed) == 1 and "environment file" in changed[0], changed
    assert "NCCL_DEBUG=\"WARN\"" in node_exec(NAMES[0], "cat", "/etc/gpuprep/env").stdout


def test_revert_through_the_cli(fleet, tmp_path):
    one = write_inventory(tmp_path / "one.yml", NAMES[:1])
    assert apply("-i", str(one))[0].returncode == 0
    done = run_cli("revert", "-i", str(one), "--json", timeout=900)
    assert done.returncode == 0 and json.loads(done.stdout)["ok"], done.stdout + done.stderr
    assert node_exec(NAMES[0], "cmp", "/etc/docker/daemon.json", "/root/daemon.json.orig").returncode == 0
    assert node_exec(NAMES[0], "test", "-e", "/etc/gpuprep/env").returncode != 0
    held = node_exec(NAMES[0], "dpkg-query", "-W", "-f=${db:Status-Want}", "nvidia-driver-535").stdout
    assert held == "install"


def test_bad_inventory_and_tags(tmp_path):
    bad = tmp_path / "bad.ini"
    bad.write_text("[gpu\nnode1 ansible_host=\n")
    done = run_cli("apply", "-i", str(bad))
    assert done.returncode == 2 and done.stderr.startswith("gpuprep: error: inventory") and \
        done.stderr.count("\n") == 1
    missing = run_cli("apply", "-i", str(tmp_path / "nope.yml"))
    assert missing.returncode == 2 and "no such file" in missing.stderr
    tags = run_cli("apply", "--local", "--tags", "gpu_clockz")
    assert tags.returncode == 2 and "unknown tag(s) gpu_clockz" in tags.stderr


def test_unsupported_clock_pair_fails_before_anything_changes(fleet, tmp_path):
    one = write_inventory(tmp_path / "one.yml", NAMES[:1])
    node_exec(NAMES[0], "rm", "-rf", "/var/lib/gpuprep/gpu_clocks")
    before = node_exec(NAMES[0], "cat", "/var/lib/fake-nvidia/state.json").stdout
    had_config = node_exec(NAMES[0], "test", "-e", "/etc/gpuprep/clocks.conf").returncode == 0
    done, doc = apply("-i", str(one), "--tags", "gpu_clocks", "-e", "gpu_clocks_graphics_mhz=2101")
    assert done.returncode == 1
    (failure,) = doc["hosts"][NAMES[0]]["failed_tasks"]
    assert "2101 MHz is not supported" in failure["message"] and "2100" in failure["message"]
    assert doc["hosts"][NAMES[0]]["changed"] == 0
    assert node_exec(NAMES[0], "cat", "/var/lib/fake-nvidia/state.json").stdout == before
    assert (node_exec(NAMES[0], "test", "-e", "/etc/gpuprep/clocks.conf").returncode == 0) == had_config
    assert node_exec(NAMES[0], "test", "-e", "/var/lib/gpuprep/gpu_clocks").returncode != 0


def test_host_without_gpus_skips_the_gpu_roles(tmp_path):
    name = f"gpuprep-nogpu-{os.getpid()}"
    start_nodes([name])
    try:
        node_exec(name, "systemctl", "is-system-running", "--wait")
        inventory = write_inventory(tmp_path / "nogpu.yml", [name])
        done, doc = apply("-i", str(inventory), "--tags", "gpu_persistence,gpu_clocks,nccl_env,container_toolkit")
        assert done.returncode == 0, doc
        # the toolkit is for GPU hosts: it installed its repository and package on any host
        assert node_exec(name, "test", "-e", "/etc/apt/sources.list.d/nvidia-container-toolkit.list").returncode != 0
        assert not [t for t in doc["hosts"][name]["changed_tasks"] if "container_toolkit" in t]
        listing = node_exec(name, "lscpu", "-p=CORE,SOCKET").stdout.splitlines()
        cores = len({line for line in listing if not line.startswith("#")})     # no GPU: all physical cores
        assert f'OMP_NUM_THREADS="{cores}"' in node_exec(name, "cat", "/etc/gpuprep/env").stdout.splitlines()
        assert node_exec(name, "test", "-e", "/etc/systemd/system/gpuprep-clocks.service").returncode != 0
        assert node_exec(name, "test", "-e", "/var/lib/gpuprep/gpu_persistence").returncode != 0
    finally:
        remove_nodes([name])


def test_local_check_run_on_this_machine_changes_nothing():
    existed = os.path.exists("/etc/gpuprep/env")
    done = run_cli("apply", "--local", "--check", "--tags", "nccl_env,gpu_persistence", "--json", timeout=600)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    doc = json.loads(done.stdout)
    assert list(doc["hosts"]) == ["localhost"] and doc["check"] is True
    assert os.path.exists("/etc/gpuprep/env") == existed
