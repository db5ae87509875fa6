"""The Ansible side lints clean: ansible-lint's production profile over the whole collection (roles, playbooks,
plugins' documentation, Molecule scenarios, changelogs) and yamllint over every YAML file of the repository
(configuration: collection/.ansible-lint, .yamllint). Neither leaves anything in the user's home."""
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import REPO, isolated_ansible_env
from gpuprep.resources import collections_path

BIN = Path(sys.executable).parent


def tool(name):
    found = BIN / name
    return str(found) if found.exists() else shutil.which(name)


@pytest.mark.skipif(not tool("ansible-lint"), reason="ansible-lint not installed (pip install -e '.[test]')")
def test_ansible_lint_production_profile_passes_on_the_whole_collection(tmp_path):
    # the linter resolves gpuprep.node.* through the collections path, as ansible-playbook does
    env = dict(isolated_ansible_env(tmp_path), ANSIBLE_COLLECTIONS_PATH=str(collections_path()))
    home = Path.home() / ".ansible" / "collections" / "ansible_collections" / "gpuprep"
    before = home.exists()
    done = subprocess.run([tool("ansible-lint"), "--nocolor", "-f", "pep8"], cwd=REPO / "collection",
                          env=env, capture_output=True, text=True, timeout=900)
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-4000:]
    assert home.exists() == before
    assert not (REPO / "collection" / ".ansible").exists()


@pytest.mark.skipif(not tool("yamllint"), reason="yamllint not installed (pip install -e '.[test]')")
def test_yamllint_passes_on_the_whole_tree():
    """Every YAML file, the changelog fragments included (they broke the line length), strict: warnings fail."""
    done = subprocess.run([tool("yamllint"), "-s", "-f", "parsable", "."], cwd=REPO,
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stdout[-4000:]
