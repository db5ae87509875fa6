"""The gpuprep_agent role on a real systemd container: the probe zipapp and a timer that writes node_exporter's
textfile (parsed with prometheus_client), idempotent, and gone again after revert."""
import json
import time

import pytest

from conftest import run_cli
from containers import docker_ready, node_exec, remove_nodes, start_nodes, write_inventory

pytestmark = [pytest.mark.docker, pytest.mark.slow,
              pytest.mark.skipif(not docker_ready(), reason="needs Docker and the base image (.ci/docker-setup.sh)")]

NODE = "gpagent-a"
PROM = "/var/lib/node_exporter/textfile_collector/gpuprep.prom"


@pytest.fixture(scope="module")
def node(tmp_path_factory):
    start_nodes([NODE])
    yield write_inventory(tmp_path_factory.mktemp("inv") / "agent.yml", [NODE])
    remove_nodes([NODE])


def apply(inventory, *args):
    done = run_cli("apply", "-i", str(inventory), "--tags", "gpuprep_agent", *args, "--json", timeout=900)
    return done, json.loads(done.stdout) if done.stdout.strip().startswith("{") else None


def textfile():
    from prometheus_client.parser import text_string_to_metric_families
    text = node_exec(NODE, "cat", PROM).stdout
    return {(s.name, tuple(sorted(s.labels.items()))): s.value
            for family in text_string_to_metric_families(text) for s in family.samples}


def test_agent_writes_the_textfile_on_a_timer_and_reverts(node):
    done, doc = apply(node, "-e", "gpuprep_agent_interval_minutes=2")
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-2000:]
    assert node_exec(NODE, "systemctl", "is-enabled", "gpuprep-agent.timer").stdout.strip() == "enabled"
    assert node_exec(NODE, "systemctl", "is-active", "gpuprep-agent.timer").stdout.strip() == "active"
    timer = node_exec(NODE, "systemctl", "cat", "gpuprep-agent.timer").stdout
    assert "OnUnitActiveSec=2min" in timer
    samples = {}
    for _ in range(60):          # the service was started by the handler; a busy machine may take a moment
        if node_exec(NODE, "test", "-s", PROM).returncode == 0:
            samples = textfile()
            break
        time.sleep(1)
    assert samples[("gpuprep_host_checked", (("host", NODE),))] == 1      # judged on the node itself
    assert samples[("gpuprep_last_run_timestamp_seconds", (("command", "check"),))] > 1.7e9
    assert node_exec(NODE, "sh", "-c", "ls -A /var/lib/node_exporter/textfile_collector").stdout.split() == ["gpuprep.prom"]

    again, doc = apply(node, "-e", "gpuprep_agent_interval_minutes=2")
    assert again.returncode == 0 and doc["hosts"][NODE]["changed"] == 0, doc["hosts"][NODE]["changed_tasks"]

    back = run_cli("revert", "-i", str(node), "--tags", "gpuprep_agent", "--json", timeout=900)
    assert back.returncode == 0, back.stdout[-3000:]
    for path in (PROM, "/etc/systemd/system/gpuprep-agent.timer", "/etc/systemd/system/gpuprep-agent.service",
                 "/usr/local/lib/gpuprep/gpuprep-probe.pyz"):
        assert node_exec(NODE, "test", "-e", path).returncode == 1, path
    assert node_exec(NODE, "systemctl", "is-active", "gpuprep-agent.timer").stdout.strip() in ("inactive", "unknown")


def test_agent_without_a_zipapp_changes_nothing(node, tmp_path):
    done, doc = apply(node, "-e", f"gpuprep_agent_pyz={tmp_path}/missing.pyz")
    assert done.returncode == 1
    message = doc["hosts"][NODE]["failed_tasks"][0]["message"]
    assert "gpuprep zipapp -o" in message and "Nothing was changed" in message
    assert node_exec(NODE, "test", "-e", "/etc/systemd/system/gpuprep-agent.timer").returncode == 1


def test_one_state_directory_for_apply_and_revert(node):
    """gpuprep_state_dir moves every role's revert record; revert reads the same variable."""
    state = "/srv/gpuprep-state"
    done = run_cli("apply", "-i", str(node), "--tags", "nccl_env", "-e", f"gpuprep_state_dir={state}", "--json",
                   timeout=900)
    assert done.returncode == 0, done.stdout[-3000:]
    assert node_exec(NODE, "test", "-s", f"{state}/nccl_env/manifest.json").returncode == 0
    assert node_exec(NODE, "test", "-e", "/var/lib/gpuprep/nccl_env").returncode == 1
    back = run_cli("revert", "-i", str(node), "--tags", "nccl_env", "-e", f"gpuprep_state_dir={state}", "--json",
                   timeout=900)
    assert back.returncode == 0, back.stdout[-3000:]
    assert node_exec(NODE, "test", "-e", "/etc/gpuprep/env").returncode == 1
