#!/usr/bin/python
# Copyright: gpuprep contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)

"""Ansible module: the fast re-run. After a role's full run it records a digest of the role's inputs
(its variables, its code, the facts it read) and an observation of everything the role owns on the host
(files with their content and mode, units, the output of read-only commands). The next run observes
the same things in one module call: when nothing moved, the role has no work and can end there, instead
of paying a round trip per task to learn the same thing.

The record is bookkeeping kept beside the role's revert record (STATE_DIR/ROLE/converged.json), so it
reports no change; revert removes it with the rest of the role's record."""

DOCUMENTATION = r"""
module: gpuprep_converged
short_description: Record or check what a role's last full run left on the host (gpuprep's fast re-run)
version_added: 0.1.0
description:
  - After a role's full run (O(mode=record)) it records a digest of the role's inputs and an observation of everything
    the role owns on the host - files with content and mode, units, the output of read-only commands.
  - The next run (O(mode=check)) observes the same things in one call; when nothing moved the role can end there.
  - The action in front of this module computes O(inputs) on the controller from the role's variables, its code and the
    facts it read, and decides when the fast re-run stands aside (C(gpuprep_fast_rerun=false), check mode, skipped tags).
    In a role, call it with O(mode) and optionally O(unsettled) only.
  - The record lives beside the role's revert record (O(state_dir)/O(role)/converged.json) and reports no change.
author: gpuprep contributors (@gpuprep)
attributes:
  check_mode:
    support: full
    description: A record is not written in check mode.
  diff_mode:
    support: none
    description: Bookkeeping only.
  action:
    support: full
    description: The action computes O(role), O(inputs), O(state_dir) and O(watch) from the calling role.
options:
  role:
    description: The role's name (set by the action).
    type: str
    required: true
  state_dir:
    description: Where the role's records are kept (the action passes C(ROLE_state_dir)).
    type: path
    default: /var/lib/gpuprep
  mode:
    description: Record after a full run, or check before one.
    type: str
    choices: [check, record]
    default: check
  inputs:
    description: The controller's digest of everything the role's outcome depends on (set by the action).
    type: str
    required: true
  watch:
    description: C(paths) (files or directories), C(units) and C(commands) (argv lists) to observe (the action passes C(ROLE_watch)).
    type: dict
    default: {}
  unsettled:
    description: Read by the action only - the role has work whatever the host shows, so the check stands aside.
    type: bool
    default: false
"""

EXAMPLES = r"""
- name: Fast re-run check
  gpuprep.node.gpuprep_converged:
    mode: check
  register: my_role_converged
- name: Nothing moved since the last full run, so this role has no work
  ansible.builtin.meta: end_role
  when: my_role_converged.converged | default(false)
"""

RETURN = r"""
converged:
  description: In check mode, whether nothing moved since the last full run.
  type: bool
  returned: when mode is check
reason:
  description: Why the role is or is not converged.
  type: str
  returned: when mode is check
moved:
  description: What moved since the last full run.
  type: list
  elements: str
  returned: when the record was read
recorded:
  description: Path of the record written.
  type: str
  returned: when mode is record
"""

import hashlib
import json
import os
import stat
import subprocess

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.gpuprep.node.plugins.module_utils.gpuprep_revert_record import (
    DamagedRecord, load as load_revert_record, write_atomic,
)


UNIT_PROPERTIES = "Id,LoadState,UnitFileState,ActiveState,NeedDaemonReload,FragmentPath,DropInPaths"


def digest(data):
    return hashlib.sha256(data if isinstance(data, bytes) else data.encode()).hexdigest()


def observe_path(path):
    try:
        info = os.lstat(path)
    except FileNotFoundError:
        return {"exists": False}
    seen = {"exists": True, "mode": "%o" % info.st_mode, "uid": info.st_uid, "gid": info.st_gid}
    if stat.S_ISREG(info.st_mode):
        with open(path, "rb") as fh:
            seen["sha256"] = digest(fh.read())
    elif stat.S_ISLNK(info.st_mode):
        seen["target"] = os.readlink(path)
    return seen


def observe_units(units):
    """All units in one `systemctl show`: a unit that stopped, was disabled or awaits a daemon-reload moved."""
    if not units:
        return {}
    done = subprocess.run(["systemctl", "show", "--property=" + UNIT_PROPERTIES, *units],
                          capture_output=True, text=True, check=False)
    seen = {}
    for block in done.stdout.strip().split("\n\n"):
        props = dict(line.split("=", 1) for line in block.splitlines() if "=" in line)
        if props.get("Id"):
            seen[props["Id"]] = props
    # systemctl names an unknown unit by what it was asked for, so every unit gets an entry
    return {unit: seen.get(unit, seen.get(unit + ".service", {"missing": True})) for unit in units}


def observe_command(argv):
    try:
        done = subprocess.run(argv, capture_output=True, timeout=60, check=False)
    except (OSError, subprocess.TimeoutExpired) as err:
        return {"error": type(err).__name__}
    return {"rc": done.returncode, "stdout_sha256": digest(done.stdout)}


def observe(watch):
    return {"paths": {path: observe_path(path) for path in watch.get("paths") or []},
            "units": observe_units(watch.get("units") or []),
            "commands": {json.dumps(argv): observe_command(argv) for argv in watch.get("commands") or []}}


def differences(recorded, now):
    moved = []
    for kind in ("paths", "units", "commands"):
        before, after = recorded.get(kind, {}), now.get(kind, {})
        moved += ["%s %s" % (kind[:-1], label(kind, key)) for key in sorted(set(before) | set(after))
                  if before.get(key) != after.get(key)]
    return moved


def label(kind, key):
    """A command is keyed by its whole argv; a person needs only its start."""
    return " ".join(json.loads(key)[:2]) if kind == "commands" else key


def main():
    module = AnsibleModule(argument_spec={
        "role": {"type": "str", "required": True},
        "state_dir": {"type": "path", "default": "/var/lib/gpuprep"},
        "mode": {"type": "str", "choices": ["check", "record"], "default": "check"},
        "inputs": {"type": "str", "required": True},
        "watch": {"type": "dict", "default": {}},
        "unsettled": {"type": "bool", "default": False},   # read by the action in front of this module
    }, supports_check_mode=True)
    params = module.params
    record_path = os.path.join(params["state_dir"], params["role"], "converged.json")
    inputs = params["inputs"]

    if params["mode"] == "record":
        if not module.check_mode:
            os.makedirs(os.path.dirname(record_path), exist_ok=True)
            document = {"role": params["role"], "inputs": inputs, "observed": observe(params["watch"])}
            write_atomic(record_path, json.dumps(document, indent=1, sort_keys=True).encode())
        module.exit_json(changed=False, recorded=record_path)

    try:
        with open(record_path) as fh:
            recorded = json.load(fh)
    except (OSError, ValueError):
        module.exit_json(changed=False, converged=False, reason="no record of a full run")
    try:
        load_revert_record(os.path.dirname(record_path))
    except DamagedRecord as exc:
        # a full run reaches gpuprep_record, which stops the role and tells the operator what to do
        module.exit_json(changed=False, converged=False, moved=["revert record: %s" % exc],
                         reason="the revert record is damaged: %s" % exc)
    if recorded.get("inputs") != inputs:
        module.exit_json(changed=False, converged=False,
                         reason="the role's variables, code or the facts it reads changed")
    # observed only now: a host without a record, or with other inputs, runs the role in full anyway
    moved = differences(recorded.get("observed", {}), observe(params["watch"]))
    module.exit_json(changed=False, converged=not moved, moved=moved,
                     reason=("moved since the last full run: " + ", ".join(moved)) if moved else "nothing moved")


if __name__ == "__main__":
    main()
