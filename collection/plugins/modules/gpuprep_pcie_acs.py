#!/usr/bin/python
# Copyright: gpuprep contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)

"""Ansible module: the PCIe switch ports above the host's NVIDIA GPUs and RDMA NICs and their ACS Control
registers, chosen with the shared `lspci -vvv` reader (module_utils/gpuprep_lspci), the same choice as
`gpuprep check`'s topo.pcie-acs. Read-only: the system_tuning role's ACS concern records the words, writes
the boot unit that clears them and clears them through it. Safe in check mode."""

DOCUMENTATION = r"""
module: gpuprep_pcie_acs
short_description: The PCIe switch ports above NVIDIA GPUs and RDMA NICs, and their ACS Control registers
version_added: 0.1.0
description:
  - Reads C(lspci -D -vvv) and picks the PCIe switch ports (upstream and downstream, not root ports) above every NVIDIA
    GPU and every RDMA NIC (InfiniBand, ConnectX, BlueField) that have an ACS capability.
  - Reads each port's ACS Control register with C(setpci -s BDF ECAP_ACS+0x6.w), the exact word revert writes back.
  - Fails, naming why, when lspci could not read capabilities (not root), or lspci or setpci is missing or fails.
  - Changes nothing.
author: gpuprep contributors (@gpuprep)
attributes:
  check_mode:
    support: full
    description: Read-only; runs the same in check mode.
  diff_mode:
    support: none
    description: Changes nothing.
options:
  lspci:
    description: The lspci command (pciutils).
    type: str
    default: lspci
  setpci:
    description: The setpci command (pciutils).
    type: str
    default: setpci
"""

EXAMPLES = r"""
- name: Find the switch ports whose ACS gpuprep would clear
  gpuprep.node.gpuprep_pcie_acs:
  register: acs
"""

RETURN = r"""
ports:
  description: The switch ports above GPUs and RDMA NICs that have an ACS capability, in PCI address order.
  type: list
  elements: dict
  returned: success
  contains:
    bdf: {description: "The port's PCI address (domain:bus:device.function).", type: str}
    name: {description: "lspci's name of the bridge.", type: str}
    word: {description: "The ACS Control register now, four hex digits.", type: str}
    redirect: {description: "The redirect bits set now (ReqRedir, CmpltRedir).", type: list, elements: str}
    below: {description: "The GPUs and RDMA NICs under the port.", type: list, elements: str}
    clear_argv: {description: "The argument list that clears the port's ACS Control register.", type: list, elements: str}
acs_on:
  description: The ports whose ACS Control register is not zero now.
  type: list
  elements: str
  returned: success
setpci:
  description: The setpci that read the registers (its full path).
  type: str
  returned: success
"""

import shutil
import subprocess

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.gpuprep.node.plugins.module_utils.gpuprep_lspci import (
    acs_ctl_argv, acs_ctl_flags, acs_unreadable, parse_lspci_vvv, redirecting, setpci_acs_ctl, switch_ports_above,
)

TIMEOUT = 60


def run(argv):
    """stdout of a command that must succeed, or RuntimeError with what it said."""
    try:
        done = subprocess.run(argv, capture_output=True, text=True, timeout=TIMEOUT, check=False)
    except subprocess.TimeoutExpired:
        raise RuntimeError("%s did not answer in %d s" % (" ".join(argv), TIMEOUT))
    if done.returncode != 0:
        said = (done.stderr or done.stdout).strip().splitlines()
        raise RuntimeError("%s failed (exit %d): %s" % (" ".join(argv), done.returncode, said[-1] if said else ""))
    return done.stdout


def acs_ports(lspci_text):
    """The switch ports above GPUs and RDMA NICs that have an ACS capability; ValueError when lspci could not
    read capabilities."""
    devices = parse_lspci_vvv(lspci_text)
    ports = switch_ports_above(devices)
    if acs_unreadable(devices, ports):
        raise ValueError("lspci could not read PCI capabilities (<access denied>): run as root (become)")
    return [ports[bdf] for bdf in sorted(ports) if ports[bdf]["acs_ctl"] is not None]


def main():
    module = AnsibleModule(argument_spec={"lspci": {"type": "str", "default": "lspci"},
                                          "setpci": {"type": "str", "default": "setpci"}},
                           supports_check_mode=True)
    tools = {name: shutil.which(module.params[name]) for name in ("lspci", "setpci")}
    missing = [module.params[name] for name, path in sorted(tools.items()) if path is None]
    if missing:
        module.fail_json(msg="%s not found: install pciutils" % " and ".join(missing))
    try:
        found = []
        for port in acs_ports(run([tools["lspci"], "-D", "-vvv"])):
            word = setpci_acs_ctl(tools["setpci"], port["bdf"])
            found.append({"bdf": port["bdf"], "name": port["name"], "word": "%04x" % word,
                          "redirect": redirecting({"acs_ctl": acs_ctl_flags(word)}), "below": port["below"],
                          "clear_argv": acs_ctl_argv(tools["setpci"], port["bdf"], 0)})
    except (RuntimeError, ValueError) as exc:
        module.fail_json(msg=str(exc))
    module.exit_json(changed=False, ports=found, acs_on=[p["bdf"] for p in found if int(p["word"], 16)],
                     setpci=tools["setpci"])


if __name__ == "__main__":
    main()
