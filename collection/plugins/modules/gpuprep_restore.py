#!/usr/bin/python
# Copyright: gpuprep contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)

"""Ansible module: put back what gpuprep_record recorded for one role (files, unit enablement
and activity, sysfs values), then forget the record."""

DOCUMENTATION = r"""
module: gpuprep_restore
short_description: Undo gpuprep's changes for one role from its record
version_added: 0.1.0
description:
  - Puts back what M(gpuprep.node.gpuprep_record) recorded for O(role) - files byte for byte with their mode, units'
    enablement and activity, sysfs values, each GPU's power limit and application clocks (by UUID), and releases the
    clock locks gpuprep set - then removes the record.
  - A damaged record fails without changing anything and keeps the originals.
author: gpuprep contributors (@gpuprep)
attributes:
  check_mode:
    support: full
    description: Lists what it would restore.
  diff_mode:
    support: none
    description: The actions are listed instead.
options:
  role:
    description: The role to revert.
    type: str
    required: true
  state_dir:
    description: Where the records are kept.
    type: path
    default: /var/lib/gpuprep
  nvidia_smi:
    description: Path or name of the nvidia-smi that restores GPU settings.
    type: str
    default: nvidia-smi
  setpci:
    description: Path or name of the setpci that restores PCIe switch ports' ACS Control registers.
    type: str
    default: setpci
"""

EXAMPLES = r"""
- name: Revert the GPU clocks gpuprep set
  gpuprep.node.gpuprep_restore:
    role: gpu_clocks
"""

RETURN = r"""
actions:
  description: What was restored, one line each.
  type: list
  elements: str
  returned: success
"""

import os
import re
import shutil
import subprocess

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.gpuprep.node.plugins.module_utils.gpuprep_lspci import (
    ACS_CTL_REGISTER, setpci_acs_ctl,
)
from ansible_collections.gpuprep.node.plugins.module_utils.gpuprep_revert_record import (
    DamagedRecord, damaged_message, load, write_atomic,
)


def systemctl(*args):
    return subprocess.run(["systemctl", *args], capture_output=True, text=True, check=False)


def restore_gpus(recorded, nvidia_smi, check_mode):
    """Each recorded GPU (found by UUID wherever it sits now) back to its recorded power limit and application
    clocks, and its clocks unlocked where gpuprep locked them. Returns (actions, refusals)."""
    actions, refused = [], []
    for uuid, was in sorted(recorded.items()):
        steps = []
        if was.get("locked"):
            steps.append(["-rgc"])
        if was.get("locked_memory"):
            steps.append(["-rmc"])
        if was.get("app_graphics") and was.get("app_memory"):
            steps.append(["-ac", "%d,%d" % (was["app_memory"], was["app_graphics"])])
        if was.get("power_limit"):
            steps.append(["-pl", "%g" % was["power_limit"]])
        for step in steps:
            actions.append("GPU %s: nvidia-smi %s" % (uuid, " ".join(step)))
            if check_mode:
                continue
            done = subprocess.run([nvidia_smi, "-i", uuid] + step, capture_output=True, text=True, check=False)
            if done.returncode != 0:
                said = (done.stderr or done.stdout).strip().splitlines()
                refused.append("GPU %s refused %s: %s" % (uuid, " ".join(step), said[-1] if said else done.returncode))
    return actions, refused


def restore_acs(recorded, setpci, check_mode):
    """Each recorded switch port's ACS Control register back to its recorded word, where it differs now.
    Returns (actions, refusals)."""
    actions, refused = [], []
    for bdf, word in sorted(recorded.items()):
        try:
            if setpci_acs_ctl(setpci, bdf) == int(word, 16):
                continue
            actions.append("PCI %s: setpci %s=%s" % (bdf, ACS_CTL_REGISTER, word))
            if not check_mode:
                setpci_acs_ctl(setpci, bdf, int(word, 16))
        except ValueError as exc:
            refused.append("PCI %s: cannot restore its ACS Control register (%s): %s" % (bdf, word, exc))
    return actions, refused


def unit_state(unit):
    return (systemctl("is-enabled", unit).stdout.strip() or "unknown",
            systemctl("is-active", unit).stdout.strip() or "unknown")


def stop_units(units, check_mode):
    """Units gpuprep turned on that were not on before: stopped and disabled while their files exist."""
    actions = []
    for unit, state in sorted(units.items()):
        enabled, active = unit_state(unit)
        if state["active"] != "active" and active in ("active", "activating", "failed"):
            actions.append(f"stop {unit}")
            if not check_mode:
                systemctl("stop", unit)
                systemctl("reset-failed", unit)
        if state["enabled"] != "enabled" and enabled == "enabled":
            actions.append(f"disable {unit}")
            if not check_mode:
                systemctl("disable", unit)
    return actions


def restore_file(path, entry, role_dir, check_mode):
    """The file back as it was (or gone, if gpuprep created it); the action taken, or None."""
    if not entry["existed"]:
        if not os.path.lexists(path):
            return None
        if not check_mode:
            os.remove(path)
        return f"remove {path}"
    with open(os.path.join(role_dir, entry["copy"]), "rb") as fh:
        original = fh.read()
    if os.path.exists(path) and open(path, "rb").read() == original:
        return None
    if not check_mode:
        write_atomic(path, original, entry["mode"])
        os.chown(path, entry["uid"], entry["gid"])
    return f"restore {path}"


def start_units(units, check_mode):
    """Units that were on before: on again."""
    actions = []
    for unit, state in sorted(units.items()):
        enabled, _active = unit_state(unit)
        if state["enabled"] == "enabled" and enabled != "enabled":
            actions.append(f"enable {unit}")
            if not check_mode:
                systemctl("enable", unit)
        if state["active"] == "active":
            actions.append(f"restart {unit}")
            if not check_mode:
                systemctl("restart", unit)
    return actions


def restore_values(values, check_mode):
    """Kernel values (/sys, /proc) back to their recorded words. OSError names the file it could not write."""
    actions = []
    for path, value in sorted(values.items()):
        now = open(path).read().strip() if os.path.exists(path) else None
        wanted = re.sub(r".*\[(\w+)\].*", r"\1", value)     # THP files show "always [madvise] never"
        if now is not None and now != value:
            actions.append(f"write {path}={wanted}")
            if not check_mode:
                try:
                    with open(path, "w") as fh:
                        fh.write(wanted)
                except OSError as exc:
                    raise OSError(f"cannot restore {path}: {exc}") from None
    return actions


def main():
    module = AnsibleModule(argument_spec={"role": {"type": "str", "required": True},
                                          "state_dir": {"type": "path", "default": "/var/lib/gpuprep"},
                                          "nvidia_smi": {"type": "str", "default": "nvidia-smi"},
                                          "setpci": {"type": "str", "default": "setpci"}},
                           supports_check_mode=True)
    role_dir = os.path.join(module.params["state_dir"], module.params["role"])
    check_mode = module.check_mode
    try:
        manifest = load(role_dir)
    except DamagedRecord as exc:
        module.fail_json(msg=damaged_message(role_dir, exc, reverting=True))
    if not any(manifest.values()):
        module.exit_json(changed=False, msg="nothing recorded for this role")
    actions, refused = restore_gpus(manifest.get("gpus", {}), module.params["nvidia_smi"], check_mode)
    units = manifest.get("units", {})
    actions += stop_units(units, check_mode)
    actions += [a for path, entry in sorted(manifest.get("files", {}).items())
                for a in [restore_file(path, entry, role_dir, check_mode)] if a]
    if actions and not check_mode:
        systemctl("daemon-reload")
    actions += start_units(units, check_mode)
    try:
        actions += restore_values(manifest.get("values", {}), check_mode)
    except OSError as exc:
        module.fail_json(msg=str(exc), actions=actions)
    acs_actions, acs_refused = restore_acs(manifest.get("pci", {}), module.params["setpci"], check_mode)
    actions += acs_actions
    refused += acs_refused
    if refused:
        # the record stays, so a revert after the GPU is back restores what is left
        module.fail_json(msg="; ".join(refused), actions=actions, changed=bool(actions))
    if not check_mode:
        shutil.rmtree(role_dir, ignore_errors=True)
    module.exit_json(changed=bool(actions), actions=actions)


if __name__ == "__main__":
    main()
