"""`gpuprep check -i` and `snapshot -i` over real systemd containers: the probe zipapp runs on every host
with its python3 (nothing installed there), snapshots come back, a stopped host and a host whose probe
cannot run are reported as such while the rest finish, and drift names the host that differs."""
import json

import pytest

from conftest import run_cli
from containers import docker, docker_ready, node_exec, remove_nodes, start_nodes, write_inventory

pytestmark = [pytest.mark.docker, pytest.mark.slow,
              pytest.mark.skipif(not docker_ready(), reason="needs Docker and the base image (.ci/docker-setup.sh)")]

GOOD = ["gpfc-a", "gpfc-b", "gpfc-c"]
NO_PYTHON, STOPPED, HUNG = "gpfc-nopy", "gpfc-down", "gpfc-hung"
ALL = GOOD + [NO_PYTHON, STOPPED, HUNG]


@pytest.fixture(scope="module")
def fleet(tmp_path_factory):
    start_nodes(ALL)
    # gpfc-c runs another OS point release (drift.os); gpfc-nopy has no python3 at all; gpfc-down is stopped
    node_exec("gpfc-c", "sed", "-i", 's/^VERSION_ID=.*/VERSION_ID="12.99"/', "/etc/os-release", check=True)
    node_exec(NO_PYTHON, "sh", "-c", "rm -f /usr/bin/python3 /usr/bin/python3.*", check=True)
    docker("stop", "-t", "1", STOPPED)
    # gpfc-hung's probe never returns (as when NVML hangs on a GPU that fell off the bus)
    node_exec(HUNG, "sh", "-c", "printf '#!/bin/sh\nexec sleep 600\n' > /usr/local/bin/hung && chmod +x /usr/local/bin/hung",
              check=True)
    inventory = write_inventory(tmp_path_factory.mktemp("inv") / "fleet.yml", ALL,
                                host_vars={HUNG: {"gpuprep_probe_python": "/usr/local/bin/hung"}},
                                group_vars={"gpuprep_probe_timeout": 8})
    yield inventory
    remove_nodes(ALL)


def test_check_inventory_judges_each_host_and_reports_the_ones_it_could_not(fleet):
    done = run_cli("check", "-i", str(fleet), "--json", timeout=900)
    assert done.returncode == 1, done.stderr[-2000:]
    doc = json.loads(done.stdout)
    assert doc["schema"] == "gpuprep.fleet/1" and doc["verdict"] == "fail"
    hosts = doc["hosts"]
    assert set(hosts) == set(ALL)
    for name in GOOD:
        assert hosts[name]["status"] == "checked", hosts[name]
        snapshot = hosts[name]["check"]["snapshot"]
        assert snapshot["system"]["hostname"] == name          # gathered on that host, not the controller
        assert snapshot["sources"][0] == f"ansible:{name}"
    assert hosts[NO_PYTHON]["status"] == "probe-failed" and "no Python 3" in hosts[NO_PYTHON]["problem"]
    assert hosts[STOPPED]["status"] == "unreachable"
    assert hosts[HUNG]["status"] == "probe-failed" and "timed out after 8 s" in hosts[HUNG]["problem"]
    assert doc["summary"]["hosts_unchecked"] == 3
    os_drift = [f for f in doc["drift"]["facts"] if f["id"] == "drift.os"]
    assert os_drift and os_drift[0]["odd_hosts"] == ["gpfc-c"] and os_drift[0]["reference"].endswith(" 12")
    drifting = {f["id"] for f in doc["drift"]["facts"]}
    assert drifting == {"drift.os"}, doc["drift"]["facts"]


def test_snapshot_inventory_saves_a_fleet_that_check_judges_offline(fleet, tmp_path):
    done = run_cli("snapshot", "-i", str(fleet), "-o", str(tmp_path), timeout=900)
    assert done.returncode == 1, done.stderr[-2000:]            # two hosts have no snapshot
    files = sorted(p.name for p in tmp_path.iterdir())
    assert files == sorted(f"{n}.json" for n in ALL)
    offline = run_cli("check", "--from", str(tmp_path), "--json")
    doc = json.loads(offline.stdout)
    assert offline.returncode == 1
    assert {n: h["status"] for n, h in doc["hosts"].items()} == {
        **{n: "checked" for n in GOOD}, NO_PYTHON: "probe-failed", STOPPED: "unreachable", HUNG: "probe-failed"}
    assert [f["odd_hosts"] for f in doc["drift"]["facts"]] == [["gpfc-c"]]
    # --baseline: measured against the odd host, the other two differ
    against = json.loads(run_cli("check", "--from", str(tmp_path), "--baseline", "gpfc-c", "--json").stdout)
    assert [f["odd_hosts"] for f in against["drift"]["facts"]] == [["gpfc-a", "gpfc-b"]]
