#!/usr/bin/python
"""Ansible module: record files, unit states and sysfs values before gpuprep first changes them,
under STATE_DIR/ROLE/, so that `revert.yml` (module gpuprep_restore) can put them back.
Only the first record of a thing is kept: re-running apply never overwrites the original."""
import json
import os
import shutil
import subprocess

from ansible.module_utils.basic import AnsibleModule

DOCUMENTATION = r"""
module: gpuprep_record
short_description: Remember the state before gpuprep changes it
options:
  role: {type: str, required: true}
  state_dir: {type: path, default: /var/lib/gpuprep}
  files: {type: list, elements: path, default: []}
  units: {type: list, elements: str, default: []}
  values: {type: list, elements: path, default: []}
"""


def unit_state(name):
    def ask(verb):
        done = subprocess.run(["systemctl", verb, name], capture_output=True, text=True)
        return (done.stdout.strip() or "unknown").splitlines()[0]
    return {"enabled": ask("is-enabled"), "active": ask("is-active")}


def main():
    module = AnsibleModule(argument_spec={
        "role": {"type": "str", "required": True},
        "state_dir": {"type": "path", "default": "/var/lib/gpuprep"},
        "files": {"type": "list", "elements": "path", "default": []},
        "units": {"type": "list", "elements": "str", "default": []},
        "values": {"type": "list", "elements": "path", "default": []},
    }, supports_check_mode=True)
    role_dir = os.path.join(module.params["state_dir"], module.params["role"])
    manifest_path = os.path.join(role_dir, "manifest.json")
    try:
        with open(manifest_path) as fh:
            manifest = json.load(fh)
    except (OSError, ValueError):
        manifest = {"files": {}, "units": {}, "values": {}}
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
                os.makedirs(role_dir, exist_ok=True)
                shutil.copy2(path, os.path.join(role_dir, entry["copy"]))
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
    if added and not module.check_mode:
        os.makedirs(role_dir, exist_ok=True)
        with open(manifest_path + ".tmp", "w") as fh:
            json.dump(manifest, fh, indent=1, sort_keys=True)
        os.replace(manifest_path + ".tmp", manifest_path)
    module.exit_json(changed=bool(added), recorded=added)


if __name__ == "__main__":
    main()
