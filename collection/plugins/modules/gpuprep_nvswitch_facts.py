#!/usr/bin/python
# Copyright: gpuprep contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)

"""Ansible module: whether this host is an NVSwitch system, which needs NVIDIA Fabric Manager. The same three
signs `gpuprep check` reads (fabric.manager), from the shared readers: NVSwitch device nodes, NVSwitches on the PCIe
bus (module_utils/gpuprep_lspci; they are there before the device nodes, on a fresh HGX A100/H100), and 8 or more
GPUs of an NVSwitch board (module_utils/gpuprep_gputable; Blackwell's switches are no PCIe devices of the host).
Read-only, safe in check mode."""

DOCUMENTATION = r"""
module: gpuprep_nvswitch_facts
short_description: Whether this host is an NVSwitch system (HGX/DGX A100, H100, H200, B200), which needs Fabric Manager
version_added: 0.1.0
description:
  - Looks, in this order, for NVSwitch device nodes (C(/dev/nvidia-nvswitch*)), NVSwitches on the PCIe bus (C(lspci)
    on HGX-2, A100 and H100 generation boards), and 8 or more GPUs of an NVSwitch board (C(nvidia-smi -L) against the
    GPU table, SXM baseboard GPUs of NVLink 3 or later; B200/B300 switches sit behind a ConnectX-7 bridge and are no
    PCIe devices of the host).
  - A missing C(lspci) or C(nvidia-smi) leaves that sign unknown; it is not an error.
  - Changes nothing.
author: gpuprep contributors (@gpuprep)
attributes:
  check_mode:
    support: full
    description: Read-only; runs the same in check mode.
  diff_mode:
    support: none
    description: Changes nothing.
  facts:
    support: full
    description: Sets C(gpuprep_nvswitch).
options:
  gpu_table:
    description: The GPU table (the content of C(files/gpus.csv)), which says which GPU models sit on NVSwitch boards.
    type: str
    required: true
  lspci:
    description: The lspci command (pciutils).
    type: str
    default: lspci
  nvidia_smi:
    description: The nvidia-smi command.
    type: str
    default: nvidia-smi
"""

EXAMPLES = r"""
- name: Is this an NVSwitch system?
  gpuprep.node.gpuprep_nvswitch_facts:
    gpu_table: "{{ lookup('ansible.builtin.file', 'gpus.csv') }}"

- name: Install Fabric Manager only there
  ansible.builtin.debug:
    msg: "NVSwitch system: {{ gpuprep_nvswitch.why }}"
  when: gpuprep_nvswitch.present
"""

RETURN = r"""
ansible_facts:
  description: Facts set for the play.
  returned: always
  type: dict
  contains:
    gpuprep_nvswitch:
      description: C(present) (bool) and C(why) (the sign that says so, or null).
      type: dict
"""

import glob
import shutil
import subprocess

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.gpuprep.node.plugins.module_utils.gpuprep_container_smoke import parse_gpu_list
from ansible_collections.gpuprep.node.plugins.module_utils.gpuprep_gputable import nvswitch_board, read_table
from ansible_collections.gpuprep.node.plugins.module_utils.gpuprep_lspci import is_nvswitch, parse_lspci_vvv

TIMEOUT = 60


def output(argv):
    """What a command printed, or None when it is missing or fails."""
    exe = shutil.which(argv[0])
    if exe is None:
        return None
    try:
        done = subprocess.run([exe] + argv[1:], capture_output=True, text=True, timeout=TIMEOUT, check=False)
    except (OSError, subprocess.SubprocessError):
        return None
    return done.stdout if done.returncode == 0 else None


def device_nodes():
    nodes = glob.glob("/dev/nvidia-nvswitch[0-9]*")
    return "%d NVSwitch device node(s) (/dev/nvidia-nvswitch*)" % len(nodes) if nodes else None


def on_the_bus(lspci):
    switches = [d for d in parse_lspci_vvv(output([lspci]) or "") if is_nvswitch(d)]
    return "%d NVSwitch(es) on the PCIe bus (lspci)" % len(switches) if switches else None


def by_gpus(nvidia_smi, table):
    names = [name for _index, name, _uuid in parse_gpu_list(output([nvidia_smi, "-L"]) or "")]
    return nvswitch_board(read_table(table), names)


def main():
    module = AnsibleModule(argument_spec={"gpu_table": {"type": "str", "required": True},
                                          "lspci": {"type": "str", "default": "lspci"},
                                          "nvidia_smi": {"type": "str", "default": "nvidia-smi"}},
                           supports_check_mode=True)
    params = module.params
    why = device_nodes() or on_the_bus(params["lspci"]) or by_gpus(params["nvidia_smi"], params["gpu_table"])
    module.exit_json(changed=False, ansible_facts={"gpuprep_nvswitch": {"present": bool(why), "why": why}})


if __name__ == "__main__":
    main()
