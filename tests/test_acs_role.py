"""The system_tuning role's PCIe ACS concern through `gpuprep apply` on a real systemd container whose lspci and
setpci answer from a capture (tests/fakes/pciutils, tests/data/pci): two PLX switch ports with ACS redirect on,
one above a GPU and one above a ConnectX. --check --diff shows the boot unit and changes nothing; apply records
the registers, clears them and `gpuprep check` on the node's lspci output turns from warn to pass; a second run
changes nothing; ACS set again (a BIOS reset) is cleared by the next run; a reboot runs the unit; revert writes
the recorded registers back and removes the unit."""
import json
import os
import subprocess
import sys

import pytest

from conftest import REPO, run_cli
from gpuprep.resources import collections_path
from containers import docker, docker_ready, node_exec, remove_nodes, start_nodes, write_inventory

pytestmark = [pytest.mark.docker, pytest.mark.slow,
              pytest.mark.skipif(not docker_ready(), reason="needs Docker and the base image (.ci/docker-setup.sh)")]

NODE = "gpacs-a"
CAPTURE = "pex8747-titanx-cx6-acs-redirect.lspci-vvv.txt"
PORTS = ["0000:03:08.0", "0000:03:10.0"]
UNIT = "/etc/systemd/system/gpuprep-pcie-acs.service"
# what topo.pcie-acs's remedy says to run
ONLY_ACS = ["--tags", "system_tuning_acs", "-e", "system_tuning_acs_enabled=true"]


@pytest.fixture(scope="module")
def inventory(tmp_path_factory):
    start_nodes([NODE])
    node_exec(NODE, "mkdir", "-p", "/etc/fake-pci", check=True)
    for dest in ("/usr/bin/lspci", "/usr/bin/setpci"):
        docker("cp", str(REPO / "tests" / "fakes" / "pciutils"), f"{NODE}:{dest}")
    docker("cp", str(REPO / "tests" / "data" / "pci" / CAPTURE), f"{NODE}:/etc/fake-pci/{CAPTURE}")
    node_exec(NODE, "sh", "-c", f"echo /etc/fake-pci/{CAPTURE} > /etc/fake-pci/capture", check=True)
    yield write_inventory(tmp_path_factory.mktemp("inv") / "acs.yml", [NODE])
    remove_nodes([NODE])


def gpuprep(command, inventory, state, *argv):
    env = dict(os.environ, XDG_STATE_HOME=str(state))
    return subprocess.run([sys.executable, "-m", "gpuprep", command, "-i", str(inventory), *argv],
                          capture_output=True, text=True, env=env, timeout=900)


def registers():
    return [node_exec(NODE, "setpci", "-s", bdf, "ECAP_ACS+0x6.w", check=True).stdout.strip() for bdf in PORTS]


def acs_verdict(tmp_path):
    """topo.pcie-acs as `gpuprep check` judges the node's own `lspci -vvv` output now."""
    capture = tmp_path / "node.lspci-vvv.txt"
    capture.write_text(node_exec(NODE, "lspci", "-vvv", check=True).stdout)
    done = run_cli("check", "--from", str(capture), "--json")
    (found,) = [f for f in json.loads(done.stdout)["findings"] if f["id"] == "topo.pcie-acs"]
    return found["severity"]


def unit_state():
    return (node_exec(NODE, "systemctl", "is-enabled", "gpuprep-pcie-acs").stdout.strip(),
            node_exec(NODE, "systemctl", "is-active", "gpuprep-pcie-acs").stdout.strip())


def test_acs_is_cleared_at_every_boot_and_reverted(inventory, tmp_path):
    assert registers() == ["001d", "001d"] and acs_verdict(tmp_path) == "warn"

    # 1. --check --diff: the unit's lines, nothing changed
    done = gpuprep("apply", inventory, tmp_path, *ONLY_ACS, "--check", "--diff")
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-2000:]
    for bdf in PORTS:
        assert f"+ExecStart=/usr/bin/setpci -s {bdf} ECAP_ACS+0x6.w=0000" in done.stdout
    assert registers() == ["001d", "001d"]
    assert node_exec(NODE, "test", "-e", UNIT).returncode == 1

    # 2. applied: registers clear, the check passes, the unit runs at boot; a second run changes nothing
    done = gpuprep("apply", inventory, tmp_path, *ONLY_ACS, "--json")
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-2000:]
    assert registers() == ["0000", "0000"] and acs_verdict(tmp_path) == "pass"
    assert unit_state() == ("enabled", "active")
    again = json.loads(gpuprep("apply", inventory, tmp_path, *ONLY_ACS, "--json", "--full").stdout)
    assert again["hosts"][NODE]["changed"] == 0, again["hosts"]

    # 3. something set ACS again (a BIOS reset, a hot-plug): the next run, fast path or not, clears it
    node_exec(NODE, "setpci", "-s", PORTS[1], "ECAP_ACS+0x6.w=001d", check=True)
    done = json.loads(gpuprep("apply", inventory, tmp_path, *ONLY_ACS, "--json").stdout)
    assert done["hosts"][NODE]["changed"] > 0 and registers() == ["0000", "0000"], done["hosts"]

    # 4. a reboot with ACS back on (as the firmware sets it): the enabled unit clears it while the node boots
    node_exec(NODE, "setpci", "-s", PORTS[0], "ECAP_ACS+0x6.w=001d", check=True)
    docker("restart", NODE, timeout=180)
    node_exec(NODE, "timeout", "120", "sh", "-c",
              "until systemctl is-active -q gpuprep-pcie-acs; do sleep 1; done", check=True)
    assert registers() == ["0000", "0000"]

    # 5. revert: the recorded registers are back, the unit is gone
    done = gpuprep("revert", inventory, tmp_path, "--tags", "system_tuning")
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-2000:]
    assert registers() == ["001d", "001d"] and acs_verdict(tmp_path) == "warn"
    assert node_exec(NODE, "test", "-e", UNIT).returncode == 1
    assert unit_state()[0] != "enabled"


def test_a_virtual_machine_is_left_alone(inventory, tmp_path):
    """The role run by plain ansible-playbook with the facts a KVM guest reports: ACS is the hypervisor's there."""
    playbook = tmp_path / "vm.yml"
    playbook.write_text(
        "- hosts: all\n  gather_facts: true\n  gather_subset: [min, virtual]\n  tasks:\n"
        "    - ansible.builtin.set_fact: {virtualization_role: guest, virtualization_type: kvm, cacheable: true}\n"
        "    - ansible.builtin.include_role: {name: gpuprep.node.system_tuning}\n"
        "      vars: {system_tuning_acs_enabled: true, system_tuning_governor_enabled: false,\n"
        "             system_tuning_sysctl_enabled: false, system_tuning_memlock_enabled: false,\n"
        "             system_tuning_nouveau_enabled: false, system_tuning_thp_enabled: false}\n")
    bindir = os.path.dirname(sys.executable)
    env = dict(os.environ, ANSIBLE_COLLECTIONS_PATH=str(collections_path()), ANSIBLE_NOCOLOR="1")
    done = subprocess.run([os.path.join(bindir, "ansible-playbook"), "-i", str(inventory), str(playbook)],
                          capture_output=True, text=True, env=env, timeout=600)
    assert done.returncode == 0, done.stdout[-3000:]
    assert "is a virtual machine (kvm): PCIe ACS is the hypervisor's, left alone" in done.stdout
    assert registers() == ["001d", "001d"] and node_exec(NODE, "test", "-e", UNIT).returncode == 1
