"""The fast re-run's module (plugins/modules/gpuprep_converged.py) on this machine: a record, then checks that
see what moved and what did not. The module runs as Ansible's module tests run one (python MODULE ARGS_FILE,
the collection importable): the gpuprep_converged action in front of it needs a role (its re-run through the roles: tests/test_fleet.py)."""
import json
import os
import subprocess
import sys
from pathlib import Path

from gpuprep.resources import collection_dir, collections_path

REPO = Path(__file__).resolve().parent.parent


def converged(state_dir, mode, inputs, watch):
    args = state_dir.parent / f"args-{mode}.json"
    args.write_text(json.dumps({"ANSIBLE_MODULE_ARGS": {"role": "demo", "state_dir": str(state_dir), "mode": mode,
                                                        "inputs": inputs, "watch": watch}}))
    env = dict(os.environ, PYTHONPATH=str(collections_path()))
    done = subprocess.run([sys.executable, str(collection_dir() / "plugins" / "modules" / "gpuprep_converged.py"),
                           str(args)], capture_output=True, text=True, env=env, timeout=120)
    assert done.returncode == 0, done.stdout + done.stderr
    return json.loads(done.stdout)


def test_a_check_sees_content_mode_commands_and_inputs_that_moved(tmp_path):
    owned = tmp_path / "owned.conf"
    owned.write_text("kernel.numa_balancing = 0\n")
    queried = tmp_path / "queried"
    queried.write_text("hi nvidia-driver-535\n")
    watch = {"paths": [str(owned), str(tmp_path / "absent")], "commands": [["cat", str(queried)]]}
    state = tmp_path / "state"

    assert converged(state, "check", "inputs-digest-1", watch)["reason"] == "no record of a full run"
    assert converged(state, "record", "inputs-digest-1", watch)["changed"] is False
    assert (state / "demo" / "converged.json").exists()
    assert converged(state, "check", "inputs-digest-1", watch)["converged"] is True

    changed_inputs = converged(state, "check", "inputs-digest-2", watch)
    assert changed_inputs["converged"] is False and "variables" in changed_inputs["reason"]

    owned.chmod(0o600)
    assert converged(state, "check", "inputs-digest-1", watch)["moved"] == [f"path {owned}"]
    owned.chmod(0o644)
    owned.write_text("kernel.numa_balancing = 1\n")
    queried.write_text("ii nvidia-driver-535\n")
    (tmp_path / "absent").write_text("")
    moved = converged(state, "check", "inputs-digest-1", watch)
    assert moved["converged"] is False
    assert sorted(moved["moved"]) == sorted([f"path {owned}", f"path {tmp_path / 'absent'}",
                                             f"command cat {queried}"])


def test_a_command_that_cannot_run_is_an_observation_not_a_crash(tmp_path):
    watch = {"commands": [["/nonexistent/docker", "info"]]}
    converged(tmp_path, "record", "x", watch)
    assert converged(tmp_path, "check", "x", watch)["converged"] is True
