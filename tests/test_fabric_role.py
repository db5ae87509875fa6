"""The fabric_manager role on a real systemd container: stand-in packages laid out as NVIDIA's (tests/fakes/
make-apt-repo) in a local APT repository, nvidia-smi answering from a real capture (driver 590.44.01). Nothing
where there is no NVSwitch; a version other than the driver's refused with nothing changed; --check --diff changes
nothing; converge, idempotence, revert."""
import json

import pytest

from conftest import run_cli
from containers import docker_ready, node_exec, prepare, remove_nodes, start_nodes, write_inventory

pytestmark = [pytest.mark.docker, pytest.mark.slow,
              pytest.mark.skipif(not docker_ready(), reason="needs Docker and the base image (.ci/docker-setup.sh)")]

NODE = "gpfabric-a"
PACKAGE = "nvidia-fabricmanager-590"
LOCAL = {"fabric_manager_repo_url": "file:/srv/gpuprep-repo", "fabric_manager_repo_trusted": True}


@pytest.fixture(scope="module")
def node(tmp_path_factory):
    start_nodes([NODE])
    inventory = write_inventory(tmp_path_factory.mktemp("inv") / "fabric.yml", [NODE])
    prepare(inventory)
    yield inventory
    remove_nodes([NODE])


def run(inventory, *args, playbook="apply", variables=None):
    extra = ["-e", json.dumps(variables)] if variables else []
    done = run_cli(playbook, "-i", str(inventory), "--tags", "fabric_manager", *extra, *args, "--json", timeout=900)
    assert done.stdout.strip().startswith("{"), done.stdout[-2000:] + done.stderr[-2000:]
    return done.returncode, json.loads(done.stdout)["hosts"][NODE]


def installed():
    done = node_exec(NODE, "dpkg-query", "-W", "-f", "${Status} ${Version}", PACKAGE)
    return done.stdout if done.returncode == 0 and " ok installed" in done.stdout else None


def test_nothing_where_there_is_no_nvswitch(node):
    code, host = run(node, variables=LOCAL)
    assert code == 0 and host["changed"] == 0, host["changed_tasks"]
    assert installed() is None


def test_a_version_other_than_the_drivers_is_refused_and_nothing_changes(node):
    code, host = run(node, variables=dict(LOCAL, fabric_manager_only_with_nvswitch=False,
                                          fabric_manager_version="590.48.01"))
    assert code == 1, host
    (failure,) = host["failed_tasks"]
    assert "does not match the driver 590.44.01" in failure["message"] and "Nothing was changed" in failure["message"]
    assert host["changed"] == 0 and installed() is None
    assert node_exec(NODE, "test", "-e", "/etc/apt/sources.list.d/gpuprep-fabric-manager.list").returncode != 0


def test_converges_to_the_drivers_version_held_and_running_idempotent_and_reverts(node):
    variables = dict(LOCAL, fabric_manager_only_with_nvswitch=False)
    code, host = run(node, "--check", "--diff", variables=variables)
    assert code == 0 and host["changed"] > 0, host
    assert installed() is None                                                      # --check changed nothing
    code, host = run(node, variables=variables)
    assert code == 0 and host["changed"] > 0, host["failed_tasks"]
    assert installed() == "hold ok installed 590.44.01-1"          # the driver's version, not 590.48.01; held
    assert node_exec(NODE, "dpkg", "--get-selections", PACKAGE).stdout.split() == [PACKAGE, "hold"]
    assert node_exec(NODE, "systemctl", "is-active", "nvidia-fabricmanager").stdout.strip() == "active"
    assert node_exec(NODE, "systemctl", "is-enabled", "nvidia-fabricmanager").stdout.strip() == "enabled"
    code, host = run(node, variables=variables)
    assert code == 0 and host["changed"] == 0, host["changed_tasks"]                 # idempotent
    code, host = run(node, playbook="revert")
    assert code == 0, host
    assert installed() is None
    assert node_exec(NODE, "test", "-e", "/etc/apt/sources.list.d/gpuprep-fabric-manager.list").returncode != 0
    assert node_exec(NODE, "systemctl", "is-active", "nvidia-fabricmanager").stdout.strip() != "active"
