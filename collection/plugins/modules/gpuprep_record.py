#!/usr/bin/python
# Copyright: gpuprep contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)

"""Ansible module: record files, unit states and sysfs values before gpuprep first changes them,
under STATE_DIR/ROLE/, so that `revert.yml` (module gpuprep_restore) can put them back.
Only the first record of a thing is kept: re-running apply never overwrites the original, and a damaged
record stops the role (nothing changed) instead of being rebuilt from the already-changed host."""

DOCUMENTATION = r"""
module: gpuprep_record
short_description: Remember the state of files, units, sysfs values and GPU settings before gpuprep changes them
version_added: 0.1.0
description:
  - Records files (content and mode), unit enablement and activity, sysfs values and each GPU's power limit and clocks
    (by UUID) and PCIe switch ports' ACS Control registers (by PCI address) under O(state_dir)/O(role)/, so
    M(gpuprep.node.gpuprep_restore) can put them back.
  - Only the first record of a thing is kept, so re-running never overwrites an original with an already-changed state.
  - A damaged record stops the role before anything changes, instead of being rebuilt from the changed host.
author: gpuprep contributors (@gpuprep)
attributes:
  check_mode:
    support: full
    description: Reports what it would record and writes nothing.
  diff_mode:
    support: none
    description: The record is bookkeeping, not host configuration.
options:
  role:
    description: The role whose record this is (a directory under O(state_dir)).
    type: str
    required: true
  state_dir:
    description: Where records are kept.
    type: path
    default: /var/lib/gpuprep
  files:
    description: Files the role will write or remove; an absent file is recorded as absent.
    type: list
    elements: path
    default: []
  units:
    description: systemd units whose enablement and activity the role will change.
    type: list
    elements: str
    default: []
  values:
    description: sysfs or procfs files whose value the role will change.
    type: list
    elements: path
    default: []
  gpus:
    description: GPUs from M(gpuprep.node.gpuprep_gpu_facts), whose power limit and clocks are kept by UUID.
    type: list
    elements: dict
    default: []
  gpu_plan:
    description: The plan from M(gpuprep.node.gpuprep_clock_plan), what gpuprep will set on each GPU.
    type: list
    elements: dict
    default: []
  acs_ports:
    description:
      - PCI addresses of switch ports (from M(gpuprep.node.gpuprep_pcie_acs)) whose ACS Control register gpuprep will
        clear; the register is read here with C(setpci) and kept by address.
      - A register that cannot be read fails the task before anything is changed.
    type: list
    elements: str
    default: []
  setpci:
    description: The setpci command that reads O(acs_ports).
    type: str
    default: setpci
"""

EXAMPLES = r"""
- name: Record the files before writing them
  gpuprep.node.gpuprep_record:
    role: nccl_env
    files: [/etc/gpuprep/env, /etc/profile.d/gpuprep.sh]
"""

RETURN = r"""
recorded:
  description: The paths, units, GPU UUIDs and PCI addresses this call added to the record (things recorded before are kept as they were).
  type: list
  elements: str
  returned: success
"""

import os
import subprocess

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.gpuprep.node.plugins.module_utils.gpuprep_lspci import setpci_acs_ctl
from ansible_collections.gpuprep.node.plugins.module_utils.gpuprep_revert_record import (
    DamagedRecord, copy_atomic, damaged_message, load, save,
)


def unit_state(name):
    def ask(verb):
        done = subprocess.run(["systemctl", verb, name], capture_output=True, text=True, check=False)
        return (done.stdout.strip() or "unknown").splitlines()[0]
    return {"enabled": ask("is-enabled"), "active": ask("is-active")}


def record_gpus(recorded, gpus, plan):
    """Each GPU's power limit and application clocks before gpuprep first sets them, by UUID (indices can
    change between boots), and whether gpuprep locks its clocks (the driver cannot report an earlier lock,
    so revert releases the locks gpuprep set and restores the rest exactly)."""
    planned = {p["index"]: p for p in plan}
    added = []
    for gpu in gpus:
        uuid = gpu.get("uuid")
        if not uuid or uuid in recorded:
            continue
        method = planned.get(gpu.get("index"), {}).get("method", "none")
        recorded[uuid] = {"index": gpu.get("index"), "name": gpu.get("name"), "power_limit": gpu.get("power_limit"),
                          "app_graphics": gpu.get("app_graphics"), "app_memory": gpu.get("app_memory"),
                          "locked": method == "locked",
                          "locked_memory": bool(planned.get(gpu.get("index"), {}).get("lock_memory"))}
        added.append(uuid)
    return added


def record_acs(recorded, ports, setpci):
    """Each port's ACS Control register before gpuprep first clears it, as four hex digits by PCI address.
    RuntimeError (nothing recorded, nothing changed yet) when setpci cannot read one."""
    words = {}
    for bdf in ports:
        if bdf not in recorded:
            try:
                words[bdf] = "%04x" % setpci_acs_ctl(setpci, bdf)
            except ValueError as exc:
                raise RuntimeError("cannot read the ACS Control register of %s before changing it: %s" % (bdf, exc))
    recorded.update(words)
    return sorted(words)


def main():
    module = AnsibleModule(argument_spec={
        "role": {"type": "str", "required": True},
        "state_dir": {"type": "path", "default": "/var/lib/gpuprep"},
        "files": {"type": "list", "elements": "path", "default": []},
        "units": {"type": "list", "elements": "str", "default": []},
        "values": {"type": "list", "elements": "path", "default": []},
        "gpus": {"type": "list", "elements": "dict", "default": []},
        "gpu_plan": {"type": "list", "elements": "dict", "default": []},
        "acs_ports": {"type": "list", "elements": "str", "default": []},
        "setpci": {"type": "str", "default": "setpci"},
    }, supports_check_mode=True)
    role_dir = os.path.join(module.params["state_dir"], module.params["role"])
    try:
        manifest = load(role_dir)
    except DamagedRecord as exc:
        module.fail_json(msg=damaged_message(role_dir, exc))
    # GPUs are recorded with the role's first record only (or when the record already keeps GPUs): a record
    # written by an older gpuprep that kept none was made after its GPUs had been changed
    keeps_gpus = not manifest["files"] or bool(manifest["gpus"])
    added = []
    for path in module.params["files"]:
        if path in manifest["files"]:
            continue
        entry = {"existed": os.path.exists(path)}
        if entry["existed"]:
            stat = os.stat(path)
            entry.update(mode=stat.st_mode & 0o7777, uid=stat.st_uid, gid=stat.st_gid,
                         copy="file-%d" % len(manifest["files"]))
            if not module.check_mode:
                os.makedirs(role_dir, mode=0o700, exist_ok=True)
                entry["sha256"] = copy_atomic(path, os.path.join(role_dir, entry["copy"]))
        manifest["files"][path] = entry
        added.append(path)
    for unit in module.params["units"]:
        if unit not in manifest["units"]:
            manifest["units"][unit] = unit_state(unit)
            added.append(unit)
    for path in module.params["values"]:
        if path not in manifest["values"] and os.path.exists(path):
            with open(path) as fh:
                manifest["values"][path] = fh.read().strip()
            added.append(path)
    if keeps_gpus:
        added += record_gpus(manifest["gpus"], module.params["gpus"], module.params["gpu_plan"])
    try:
        added += record_acs(manifest["pci"], module.params["acs_ports"], module.params["setpci"])
    except RuntimeError as exc:
        module.fail_json(msg=str(exc))
    if added and not module.check_mode:
        save(role_dir, manifest)
    module.exit_json(changed=bool(added), recorded=added)


if __name__ == "__main__":
    main()
