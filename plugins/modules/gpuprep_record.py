#!/usr/bin/python
"""Ansible module: record files, unit states and sysfs values before gpuprep first changes them,
under STATE_DIR/ROLE/, so that `revert.yml` (module gpuprep_restore) can put them back.
Only the first record of a thing is kept: re-running apply never overwrites the original, and a damaged
record stops the role (nothing changed) instead of being rebuilt from the already-changed host."""
import os
import subprocess

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.gpuprep.node.plugins.module_utils.gpuprep_revert_record import DamagedRecord, copy_atomic, damaged_message, load, save

DOCUMENTATION = r"""
module: gpuprep_record
short_description: Remember the state before gpuprep changes it
options:
  role: {type: str, required: true}
  state_dir: {type: path, default: /var/lib/gpuprep}
  files: {type: list, elements: path, default: []}
  units: {type: list, elements: str, default: []}
  values: {type: list, elements: path, default: []}
  gpus: {type: list, elements: dict, default: [], description: gpuprep_gpu_facts GPUs; power limit and clocks kept by UUID}
  gpu_plan: {type: list, elements: dict, default: [], description: gpuprep_clock_plan's plan (what gpuprep will set)}
"""


def unit_state(name):
    def ask(verb):
        done = subprocess.run(["systemctl", verb, name], capture_output=True, text=True)
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


def main():
    module = AnsibleModule(argument_spec={
        "role": {"type": "str", "required": True},
        "state_dir": {"type": "path", "default": "/var/lib/gpuprep"},
        "files": {"type": "list", "elements": "path", "default": []},
        "units": {"type": "list", "elements": "str", "default": []},
        "values": {"type": "list", "elements": "path", "default": []},
        "gpus": {"type": "list", "elements": "dict", "default": []},
        "gpu_plan": {"type": "list", "elements": "dict", "default": []},
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
    if added and not module.check_mode:
        save(role_dir, manifest)
    module.exit_json(changed=bool(added), recorded=added)


if __name__ == "__main__":
    main()
