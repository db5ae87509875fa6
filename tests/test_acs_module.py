"""The ACS modules (gpuprep_pcie_acs, and gpuprep_record / gpuprep_restore's PCI part) run by real Ansible on this
machine against lspci and setpci that answer from captures (tests/fakes/pciutils, tests/data/pci), with
pciutils 3.9.0's own messages: the ports above GPUs and NICs and their words; no root, no pciutils and a port
that is gone are errors that name why; revert writes the recorded words back and keeps the record when it cannot."""
import json
import os
import shutil
import subprocess
import sys

import pytest

from conftest import REPO
from gpuprep.resources import collections_path

DATA = REPO / "tests" / "data" / "pci"
PORTS = ["0000:03:08.0", "0000:03:10.0"]


@pytest.fixture
def pci(tmp_path):
    """lspci and setpci on a bin directory of their own, their capture and register state under tmp_path."""
    bindir = tmp_path / "bin"
    bindir.mkdir()
    for name in ("lspci", "setpci"):
        shutil.copy(REPO / "tests" / "fakes" / "pciutils", bindir / name)
    env = {"FAKE_PCI_CAPTURE": str(DATA / "pex8747-titanx-cx6-acs-redirect.lspci-vvv.txt"),
           "FAKE_PCI_STATE": str(tmp_path / "acs.json"), "BIN": str(bindir)}
    return env


def module(pci, name, **args):
    bindir = os.path.dirname(sys.executable)
    env = dict(os.environ, ANSIBLE_COLLECTIONS_PATH=str(collections_path()), ANSIBLE_LOAD_CALLBACK_PLUGINS="1",
               ANSIBLE_STDOUT_CALLBACK="json", ANSIBLE_PYTHON_INTERPRETER=sys.executable, **pci)
    done = subprocess.run([os.path.join(bindir, "ansible"), "localhost", "-c", "local", "-m", f"gpuprep.node.{name}",
                           "-a", json.dumps(args)], capture_output=True, text=True, env=env, timeout=120)
    return json.loads(done.stdout)["plays"][0]["tasks"][0]["hosts"]["localhost"]


def setpci(pci, bdf, value=None):
    register = "ECAP_ACS+0x6.w" + ("" if value is None else "=" + value)
    return subprocess.run([os.path.join(pci["BIN"], "setpci"), "-s", bdf, register], capture_output=True,
                          text=True, env=dict(os.environ, **pci), check=True).stdout.strip()


def tools(pci):
    return {"lspci": os.path.join(pci["BIN"], "lspci"), "setpci": os.path.join(pci["BIN"], "setpci")}


def test_the_ports_above_the_gpu_and_the_nic_with_their_registers(pci):
    setpci(pci, PORTS[0], "0000")
    found = module(pci, "gpuprep_pcie_acs", **tools(pci))
    assert not found.get("failed") and found["changed"] is False, found
    assert [(p["bdf"], p["word"], p["redirect"], p["below"]) for p in found["ports"]] == [
        ("0000:03:08.0", "0000", [], ["0000:04:00.0"]),
        ("0000:03:10.0", "001d", ["ReqRedir", "CmpltRedir"], ["0000:05:00.0"])]
    assert found["acs_on"] == ["0000:03:10.0"]
    assert found["ports"][1]["clear_argv"] == [tools(pci)["setpci"], "-s", "0000:03:10.0", "ECAP_ACS+0x6.w=0000"]


def test_without_root_or_pciutils_it_fails_saying_why(pci):
    pci["FAKE_PCI_CAPTURE"] = str(DATA / "pex8747-titanx-not-root.lspci-vvv.txt")
    denied = module(pci, "gpuprep_pcie_acs", **tools(pci))
    assert denied["failed"] and "run as root" in denied["msg"]
    missing = module(pci, "gpuprep_pcie_acs", lspci=tools(pci)["lspci"], setpci="/nonexistent/setpci")
    assert missing["failed"] and missing["msg"] == "/nonexistent/setpci not found: install pciutils"


def test_revert_writes_the_recorded_words_back(pci, tmp_path):
    state = str(tmp_path / "state")
    recorded = module(pci, "gpuprep_record", role="system_tuning", state_dir=state, acs_ports=PORTS,
                      setpci=tools(pci)["setpci"])
    assert recorded["changed"] and sorted(recorded["recorded"]) == PORTS, recorded
    for bdf in PORTS:
        setpci(pci, bdf, "0000")
    # a second record keeps the first words, not the cleared ones
    assert module(pci, "gpuprep_record", role="system_tuning", state_dir=state, acs_ports=PORTS,
                  setpci=tools(pci)["setpci"])["changed"] is False
    restored = module(pci, "gpuprep_restore", role="system_tuning", state_dir=state, setpci=tools(pci)["setpci"])
    assert restored["actions"] == [f"PCI {bdf}: setpci ECAP_ACS+0x6.w=001d" for bdf in PORTS], restored
    assert [setpci(pci, bdf) for bdf in PORTS] == ["001d", "001d"]
    assert not os.path.exists(os.path.join(state, "system_tuning"))


def test_a_port_that_is_gone_fails_the_record_and_keeps_the_revert_record(pci, tmp_path):
    state = str(tmp_path / "state")
    gone = module(pci, "gpuprep_record", role="system_tuning", state_dir=state, acs_ports=["0000:09:00.0"],
                  setpci=tools(pci)["setpci"])
    assert gone["failed"] and "0000:09:00.0" in gone["msg"] and "No devices selected" in gone["msg"], gone
    module(pci, "gpuprep_record", role="system_tuning", state_dir=state, acs_ports=PORTS, setpci=tools(pci)["setpci"])
    setpci(pci, PORTS[0], "0000")
    # the card behind 03:10.0 was moved: its port left the tree
    pci["FAKE_PCI_CAPTURE"] = str(DATA / "pex8747-titanx-acs-redirect.lspci-vvv.txt")
    restored = module(pci, "gpuprep_restore", role="system_tuning", state_dir=state, setpci=tools(pci)["setpci"])
    assert restored["failed"] and "PCI 0000:03:10.0: cannot restore" in restored["msg"], restored
    assert restored["actions"] == ["PCI 0000:03:08.0: setpci ECAP_ACS+0x6.w=001d"]
    assert setpci(pci, PORTS[0]) == "001d"
    assert os.path.exists(os.path.join(state, "system_tuning", "manifest.json"))
