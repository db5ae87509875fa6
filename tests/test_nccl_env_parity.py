"""The nccl_env role (real ansible-playbook on this machine) and `gpuprep nccl-env` compute the same file."""
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import REPO
from gpuprep.ncclenv import compute_env, default_route_interface, facts_from_snapshot, render_env_file
from gpuprep.probe import collect


@pytest.mark.slow
def test_role_and_python_agree(tmp_path):
    playbook = shutil.which("ansible-playbook", path=os.path.dirname(sys.executable)) or shutil.which("ansible-playbook")
    if playbook is None:
        pytest.fail("ansible-playbook is not installed (it comes with gpuprep's ansible-core dependency)")
    env_file, profile = tmp_path / "etc" / "env", tmp_path / "profile.sh"
    done = subprocess.run(
        [playbook, "-i", "localhost,", "-c", "local", str(REPO / "playbooks" / "apply.yml"), "--tags", "nccl_env",
         "-e", "ansible_become=false", "-e", f"nccl_env_file={env_file}", "-e", f"nccl_env_profile_script={profile}",
         "-e", f"nccl_env_state_dir={tmp_path / 'state'}", "-e", f"ansible_python_interpreter={sys.executable}"],
        capture_output=True, text=True, timeout=300, env={**os.environ, "ANSIBLE_NOCOLOR": "1"})
    assert done.returncode == 0, done.stdout[-2000:]
    snap = collect(docker=False, commands=False)
    expected = render_env_file(compute_env(facts_from_snapshot(snap, default_route_interface())))
    assert env_file.read_text() == expected
    assert "OMP_NUM_THREADS=" in expected
    again = subprocess.run(done.args, capture_output=True, text=True, timeout=300)
    assert "changed=0" in again.stdout      # idempotent
