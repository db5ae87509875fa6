"""The NVSwitch module (plugins/modules/gpuprep_nvswitch_facts.py) the fabric_manager role decides by, run by real
Ansible on this machine: NVSwitches in lspci (NVIDIA's Fabric Manager guide's HGX H100 listing, answered by a
stand-in lspci), else 8 GPUs of an NVSwitch board by their names (the stand-in nvidia-smi answering -L from real
captures). An 8-GPU V100 SXM2 board (DGX-1) has NVLink but no NVSwitch."""
import json
import os
import subprocess
import sys

import pytest

from conftest import CORPUS, REPO, corpus
from gpuprep.resources import collections_path

FM_GUIDE_H100 = CORPUS / "fabric" / "nvidia-fm-guide-hgx-h100-4-nvswitches.lspci.txt"


def facts(tmp_path, lspci=None, capture=None):
    """gpuprep_nvswitch as the module sets it, with a stand-in lspci printing `lspci` (the pasted command line
    dropped) and the stand-in nvidia-smi answering from `capture` (None: no such command)."""
    args = {"gpu_table": (REPO / "gpuprep" / "data" / "gpus.csv").read_text(),
            "lspci": str(tmp_path / "no-lspci"), "nvidia_smi": str(tmp_path / "no-nvidia-smi")}
    env = dict(os.environ, ANSIBLE_COLLECTIONS_PATH=str(collections_path()), ANSIBLE_LOAD_CALLBACK_PLUGINS="1",
               ANSIBLE_STDOUT_CALLBACK="json", ANSIBLE_PYTHON_INTERPRETER=sys.executable)
    if lspci:
        listing = "".join(lspci.read_text().splitlines(keepends=True)[1:])
        (tmp_path / "listing.txt").write_text(listing)
        args["lspci"] = str(tmp_path / "lspci")
        (tmp_path / "lspci").write_text(f"#!/bin/sh\ncat {tmp_path / 'listing.txt'}\n")
        (tmp_path / "lspci").chmod(0o755)
    if capture:
        args["nvidia_smi"] = str(REPO / "tests" / "fakes" / "nvidia-smi")
        env.update(FAKE_NVIDIA_CAPTURE=corpus(capture), FAKE_NVIDIA_STATE=str(tmp_path / "state.json"))
    done = subprocess.run([os.path.join(os.path.dirname(sys.executable), "ansible"), "localhost", "-c", "local",
                           "-m", "gpuprep.node.gpuprep_nvswitch_facts", "-a", json.dumps(args)],
                          capture_output=True, text=True, env=env, timeout=120)
    result = json.loads(done.stdout)["plays"][0]["tasks"][0]["hosts"]["localhost"]
    assert not result.get("failed"), result
    return result["ansible_facts"]["gpuprep_nvswitch"]


def test_nvswitches_on_the_pcie_bus(tmp_path):
    assert facts(tmp_path, lspci=FM_GUIDE_H100) == {"present": True, "why": "4 NVSwitch(es) on the PCIe bus (lspci)"}


@pytest.mark.parametrize("capture, why", [
    ("h100-sxm-x8.nvidia-smi-q.txt", "8 NVIDIA H100 80GB HBM3 baseboard GPUs (HGX/DGX)"),
    ("v100-sxm2-x8-vm.nvidia-smi-q.txt", None),             # DGX-1's cube mesh: NVLink, no NVSwitch
    ("dual-rtx-a5000.nvidia-smi-q.xml", None),
])
def test_an_nvswitch_board_by_its_gpus(tmp_path, capture, why):
    assert facts(tmp_path, capture=capture) == {"present": why is not None, "why": why}


def test_without_lspci_or_nvidia_smi_there_is_no_sign(tmp_path):
    assert facts(tmp_path) == {"present": False, "why": None}
