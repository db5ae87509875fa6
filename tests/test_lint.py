"""The Ansible side lints clean: ansible-lint's production profile and yamllint over the roles, playbooks and
Molecule scenarios (configuration: .ansible-lint, .yamllint)."""
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import REPO
from gpuprep.resources import collections_path

BIN = Path(sys.executable).parent


def tool(name):
    found = BIN / name
    return str(found) if found.exists() else shutil.which(name)


@pytest.mark.skipif(not tool("ansible-lint"), reason="ansible-lint not installed (pip install -e '.[test]')")
def test_ansible_lint_production_profile_passes():
    # the linter resolves gpuprep.node.* through the collections path, as ansible-playbook does
    env = dict(os.environ, ANSIBLE_COLLECTIONS_PATH=str(collections_path()))
    done = subprocess.run([tool("ansible-lint"), "--nocolor", "-f", "pep8", "roles", "playbooks", "molecule"], cwd=REPO,
                          env=env, capture_output=True, text=True, timeout=900)
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-4000:]


@pytest.mark.skipif(not tool("yamllint"), reason="yamllint not installed (pip install -e '.[test]')")
def test_yamllint_passes_on_the_whole_tree():
    """Every YAML file, the changelog fragments included (they broke the line length), strict: warnings fail."""
    done = subprocess.run([tool("yamllint"), "-s", "-f", "parsable", "."], cwd=REPO,
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stdout[-4000:]
