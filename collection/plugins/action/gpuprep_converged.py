"""Action for the fast re-run, called by every role twice: `mode: check` right after the role's reads and
`mode: record` at its end. On the controller it gathers what the role's outcome depends on (the role's own
variables, the code of the role and of this collection's plugins, the facts the role read) into one digest,
so no variable's value (a mirror URL with a token) reaches the host or the run's events; then it runs the
gpuprep_converged module on the host with that digest and the role's ROLE_watch list.

It decides here, not in each role, when the fast re-run stands aside: gpuprep_fast_rerun=false, a check the
role marks unsettled (it has work even if nothing moved), or a record after a partial run (check mode, or
a concern's tag skipped), which would let the next run skip that concern."""
import hashlib
import json
import os

import yaml
from ansible.errors import AnsibleActionFail
from ansible.module_utils.parsing.convert_bool import boolean
from ansible.plugins.action import ActionBase

COLLECTION_ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
PLUGIN_CODE = ("plugins/action", "plugins/modules", "plugins/module_utils")


def _files(top):
    for base, dirs, names in os.walk(top):
        dirs[:] = sorted(d for d in dirs if d != "__pycache__")
        for name in sorted(names):
            if not name.endswith((".pyc", ".pyo")):
                yield os.path.join(base, name)


def code_digest(role_path):
    """Every file of the role and of the collection's plugins: an edited template or module means a full run."""
    sha = hashlib.sha256()
    tops = [role_path] + [os.path.join(COLLECTION_ROOT, part) for part in PLUGIN_CODE]
    for top in tops:
        for path in _files(top):
            sha.update(os.path.relpath(path, top).encode() + b"\0")
            with open(path, "rb") as fh:
                sha.update(hashlib.sha256(fh.read()).digest())
    return sha.hexdigest()


class ActionModule(ActionBase):
    _VALID_ARGS = frozenset(("mode", "unsettled"))
    _requires_connection = True

    def run(self, tmp=None, task_vars=None):
        result = super().run(tmp, task_vars)
        task_vars = task_vars or {}
        mode = self._task.args.get("mode", "check")
        if mode not in ("check", "record"):
            raise AnsibleActionFail("gpuprep_converged: mode must be check or record, not %r" % (mode,))
        role = self._task._role
        if role is None:
            raise AnsibleActionFail("gpuprep_converged runs inside a gpuprep role")
        name = role.get_name(include_role_fqcn=False)

        why_not = self._stand_aside(mode, name, task_vars)
        if why_not:
            result.update(skipped=True, changed=False, converged=False, skip_reason=why_not)
            return result

        value = self._value
        with open(os.path.join(role._role_path, "defaults", "main.yml")) as fh:
            names = sorted((yaml.safe_load(fh) or {}).keys())
        inputs = {"code": code_digest(role._role_path),
                  "vars": {var: value(task_vars, var) for var in names},
                  "facts": value(task_vars, name + "_facts", {})}
        digest = hashlib.sha256(json.dumps(inputs, sort_keys=True, default=str).encode()).hexdigest()
        module_args = {"role": name, "mode": mode, "inputs": digest,
                       "state_dir": value(task_vars, name + "_state_dir"),
                       "watch": value(task_vars, name + "_watch", {})}
        result.update(self._execute_module(module_name="gpuprep.node.gpuprep_converged", module_args=module_args,
                                           task_vars=task_vars))
        return result

    def _stand_aside(self, mode, name, task_vars):
        if not boolean(self._value(task_vars, "gpuprep_fast_rerun", True)):
            return "gpuprep_fast_rerun is off"
        if mode == "check" and boolean(self._task.args.get("unsettled", False)):
            return "the role has work whatever the host shows"
        if mode == "record" and self._task.check_mode:
            return "check mode changes nothing to record"
        if mode == "record" and any(tag.startswith(name) for tag in task_vars.get("ansible_skip_tags", [])):
            return "a part of the role was skipped"
        return None

    def _value(self, task_vars, var, default=None):
        if var not in task_vars:
            return default
        return self._templar.template(task_vars[var])
