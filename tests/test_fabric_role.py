"""The fabric_manager role on a real systemd container: stand-in packages laid out as NVIDIA's (tests/fakes/
make-apt-repo) in a local APT repository, nvidia-smi answering from a real capture (driver 590.44.01). Nothing
where there is no NVSwitch; a version other than the driver's refused with nothing changed; --check --diff changes
nothing; converge, idempotence, revert. The RHEL path the same way, with Debian's own dnf and rpm driving a real RPM
database and a local RPM repository of a stand-in laid out as NVIDIA's yum packaging (tests/fakes/
nvidia-fabricmanager.spec)."""
import json
import subprocess

import pytest

from conftest import run_cli
from containers import (DNF_IMAGE, REPO, docker, docker_ready, node_exec, prepare, remove_nodes, start_nodes,
                        write_inventory)

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


def run(inventory, *args, playbook="apply", variables=None, name=NODE):
    extra = ["-e", json.dumps(variables)] if variables else []
    done = run_cli(playbook, "-i", str(inventory), "--tags", "fabric_manager", *extra, *args, "--json", timeout=900)
    assert done.stdout.strip().startswith("{"), done.stdout[-2000:] + done.stderr[-2000:]
    return done.returncode, json.loads(done.stdout)["hosts"][name]


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


def test_driver_pin_keeps_the_holds_it_did_not_set(node):
    """driver_pin holds the Fabric Manager package with the driver's, and runs first: on the second apply it finds the
    package fabric_manager installed and held. It records only the holds it set itself, so that run changes nothing,
    and revert leaves an admin's hold on the driver as it found it."""
    variables = json.dumps(dict(LOCAL, fabric_manager_only_with_nvswitch=False))
    node_exec(NODE, "apt-mark", "hold", "nvidia-driver-535", check=True)
    try:
        changes = []
        for _ in range(2):
            done = run_cli("apply", "-i", str(node), "--tags", "driver_pin,fabric_manager", "-e", variables, "--json",
                           timeout=900)
            host = json.loads(done.stdout)["hosts"][NODE]
            assert done.returncode == 0, host["failed_tasks"]
            changes.append(host["changed_tasks"])
        assert changes[0] and not changes[1], changes[1]
        assert installed() == "hold ok installed 590.44.01-1"
        assert node_exec(NODE, "cat", "/var/lib/gpuprep/driver_pin.held").stdout.strip() == ""
        done = run_cli("revert", "-i", str(node), "--tags", "driver_pin,fabric_manager", "--json", timeout=900)
        assert done.returncode == 0, done.stdout[-2000:]
        assert installed() is None
        assert node_exec(NODE, "dpkg", "--get-selections", "nvidia-driver-535").stdout.split() == [
            "nvidia-driver-535", "hold"]
    finally:
        node_exec(NODE, "apt-mark", "unhold", "nvidia-driver-535")


RPM_NODE = "gpfabric-rpm"
RPM_REPO = "/srv/gpuprep-rpm-repo"
RPM_LOCAL = {"fabric_manager_packager": "dnf", "fabric_manager_repo_url": f"file://{RPM_REPO}",
             "fabric_manager_repo_trusted": True, "fabric_manager_only_with_nvswitch": False}


@pytest.fixture(scope="module")
def rpm_node(tmp_path_factory):
    """A node whose packages are dnf's: the stand-in RPMs of the driver's version and a later one, in a repository."""
    if docker("image", "inspect", DNF_IMAGE, check=False).returncode != 0:
        pytest.fail(f"{DNF_IMAGE} missing: run .ci/docker-setup.sh")
    start_nodes([RPM_NODE], image=DNF_IMAGE)
    inventory = write_inventory(tmp_path_factory.mktemp("inv") / "fabric-rpm.yml", [RPM_NODE])
    prepare(inventory)
    spec = (REPO / "tests" / "fakes" / "nvidia-fabricmanager.spec").read_text()
    build = (f"mkdir -p /root/rpmbuild/SPECS {RPM_REPO} && cat > /root/rpmbuild/SPECS/fm.spec && "
             "for v in 590.44.01 590.48.01; do rpmbuild -bb --quiet --define \"fmversion $v\" --define 'branch 590' "
             f"/root/rpmbuild/SPECS/fm.spec || exit 1; done && cp /root/rpmbuild/RPMS/x86_64/*.rpm {RPM_REPO}/ && "
             f"createrepo_c -q {RPM_REPO}")
    done = subprocess.run(["docker", "exec", "-i", RPM_NODE, "sh", "-c", build], input=spec, capture_output=True,
                          text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    yield inventory
    remove_nodes([RPM_NODE])


def rpm_installed():
    done = node_exec(RPM_NODE, "rpm", "-q", "--qf", "%{VERSION}-%{RELEASE}", "nvidia-fabricmanager")
    return done.stdout if done.returncode == 0 else None


def version_locks():
    return [line for line in node_exec(RPM_NODE, "dnf", "-q", "versionlock", "list").stdout.splitlines() if line]


def test_the_rhel_path_installs_the_drivers_rpm_locks_it_is_idempotent_and_reverts(rpm_node):
    code, host = run(rpm_node, "--check", "--diff", variables=RPM_LOCAL, name=RPM_NODE)
    assert code == 0 and host["changed"] > 0, host
    assert rpm_installed() is None and version_locks() == []                        # --check changed nothing
    assert node_exec(RPM_NODE, "test", "-e", "/etc/yum.repos.d/gpuprep-fabric-manager.repo").returncode != 0
    code, host = run(rpm_node, variables=RPM_LOCAL, name=RPM_NODE)
    assert code == 0 and host["changed"] > 0, host["failed_tasks"]
    assert rpm_installed() == "590.44.01-1"                        # the driver's version, not the newer 590.48.01
    assert version_locks() == ["nvidia-fabricmanager-0:590.44.01-1.*"]
    assert node_exec(RPM_NODE, "systemctl", "is-active", "nvidia-fabricmanager").stdout.strip() == "active"
    upgrade = node_exec(RPM_NODE, "dnf", "-y", "-q", "upgrade", "nvidia-fabricmanager")
    assert upgrade.returncode == 0 and rpm_installed() == "590.44.01-1", upgrade.stderr     # the lock holds
    code, host = run(rpm_node, variables=RPM_LOCAL, name=RPM_NODE)
    assert code == 0 and host["changed"] == 0, host["changed_tasks"]                 # idempotent
    code, host = run(rpm_node, playbook="revert", name=RPM_NODE)
    assert code == 0, host
    assert rpm_installed() is None and version_locks() == []
    assert node_exec(RPM_NODE, "test", "-e", "/etc/yum.repos.d/gpuprep-fabric-manager.repo").returncode != 0
    assert node_exec(RPM_NODE, "systemctl", "is-active", "nvidia-fabricmanager").stdout.strip() != "active"
