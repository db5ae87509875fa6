"""The Ansible collection as its users get it: `ansible-galaxy collection build` on this repository, the tarball
installed into an empty collections path, a role from it converging a real systemd container under plain
ansible-playbook (no gpuprep on the controller's path), its collection playbook reverting it, and the parts of
`ansible-test sanity` that run here."""
import os
import re
import shutil
import subprocess
import sys
import tarfile
from pathlib import Path

import pytest
import yaml

from conftest import REPO, collection_builder
from containers import docker_ready, node_exec, prepare, remove_nodes, start_nodes, write_inventory

BIN = Path(sys.executable).parent
NODE = "gpuprep-collection-1"


def test_the_committed_copies_are_current():
    """The collection's git tree installs as it stands, so the copies tools/build_collection.py makes of the package's
    shared modules, GPU table and license are committed: each must be what regenerating would write. Compared with
    git's index, not the working tree (another test may have regenerated it)."""
    builder = collection_builder()
    if shutil.which("git") is None or not (REPO / ".git").exists():
        pytest.skip("not a git checkout")
    stale = []
    for target, source in {**builder.SHARED_MODULES, **builder.SHARED_FILES}.items():
        path = f"collection/{target}"
        committed = subprocess.run(["git", "-C", str(REPO), "show", f":{path}"], capture_output=True)
        if committed.returncode != 0 or committed.stdout != builder.content(REPO, target, source):
            stale.append(f"{path} (from {source})")
    assert not stale, "run tools/build_collection.py and commit: " + ", ".join(stale)


def galaxy_version():
    return yaml.safe_load((REPO / "collection" / "galaxy.yml").read_text())["version"]


@pytest.fixture(scope="module")
def installed(tmp_path_factory):
    """The built tarball and the empty collections path it was installed into."""
    out = tmp_path_factory.mktemp("build")
    # no build step first: the tree as committed is the collection (test_the_committed_copies_are_current)
    built = subprocess.run([str(BIN / "ansible-galaxy"), "collection", "build", "--output-path", str(out), str(REPO / "collection")],
                           capture_output=True, text=True, timeout=300)
    assert built.returncode == 0, built.stdout + built.stderr
    tarball = out / f"gpuprep-node-{galaxy_version()}.tar.gz"
    path = tmp_path_factory.mktemp("collections")
    # --force: a copy elsewhere on the collections path (Molecule and ansible-lint install one) is no reason to skip
    done = subprocess.run([str(BIN / "ansible-galaxy"), "collection", "install", "--force", "-p", str(path), str(tarball)],
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stdout + done.stderr
    return tarball, path


def test_the_tarball_is_the_collection_and_nothing_else(installed):
    tarball, path = installed
    with tarfile.open(tarball) as tar:
        names = set(tar.getnames())
    tops = {name.split("/")[0] for name in names}
    assert tops == {"MANIFEST.json", "FILES.json", "README.md", "LICENSE", "meta", "roles", "plugins", "playbooks",
                    "changelogs"}
    assert {"changelogs/changelog.yaml", "changelogs/config.yaml"} <= names          # ansible-lint: galaxy[no-changelog]
    assert not any(name.startswith("changelogs/fragments") for name in names)
    assert {"playbooks/apply.yml", "playbooks/revert.yml", "meta/runtime.yml",
            "plugins/action/gpuprep_converged.py", "roles/gpu_clocks/files/gpus.csv"} <= names
    for role in (REPO / "collection" / "roles").iterdir():
        for part in ("meta/main.yml", "meta/argument_specs.yml", "README.md", "tasks/main.yml"):
            assert f"roles/{role.name}/{part}" in names
    root = path / "ansible_collections" / "gpuprep" / "node"
    # one tree: the code the package imports is the code the collection's modules import (the build step's copies)
    for target, source in collection_builder().SHARED_MODULES.items():
        body = (root / target).read_text()
        assert body.endswith((REPO / source).read_text()) and body.count("\n") == (REPO / source).read_text().count("\n") + 1
    assert (root / "roles/gpu_clocks/files/gpus.csv").read_bytes() == (REPO / "gpuprep/data/gpus.csv").read_bytes()
    # no role reaches outside itself
    for task_file in root.glob("roles/*/**/*.yml"):
        assert "../" not in task_file.read_text(), task_file


@pytest.mark.docker
@pytest.mark.slow
@pytest.mark.skipif(not docker_ready(), reason="Docker engine or base image missing (.ci/docker-setup.sh)")
def test_a_role_from_the_installed_collection_converges_a_container_and_its_playbook_reverts_it(installed, tmp_path):
    _, path = installed
    start_nodes([NODE])
    try:
        inventory = write_inventory(tmp_path / "inventory.yml", [NODE])
        prepare(inventory)                        # the fake GPU tools (Molecule's prepare playbook)
        playbook = tmp_path / "site.yml"
        playbook.write_text("- hosts: all\n  become: true\n  roles:\n    - role: gpuprep.node.nccl_env\n"
                            "      nccl_env_overrides: {NCCL_DEBUG: WARN}\n")
        # only the empty path with the tarball in it (Ansible also scans sys.path, where PyPI's ansible bundle
        # keeps community.docker); not gpuprep's own collection link
        env = {**os.environ, "ANSIBLE_COLLECTIONS_PATH": str(path), "ANSIBLE_NOCOLOR": "1",
               "ANSIBLE_PIPELINING": "True", "PATH": f"{BIN}{os.pathsep}{os.environ['PATH']}"}
        env.pop("ANSIBLE_CONFIG", None)

        def play(*argv):
            done = subprocess.run([str(BIN / "ansible-playbook"), "-i", str(inventory), *argv], cwd=tmp_path,
                                  capture_output=True, text=True, timeout=900, env=env)
            assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-2000:]
            recap = done.stdout[done.stdout.rindex("PLAY RECAP"):]
            return int(recap.split("changed=")[1].split()[0])

        assert play(str(playbook)) > 0
        written = node_exec(NODE, "cat", "/etc/gpuprep/env").stdout
        assert 'NCCL_DEBUG="WARN"' in written
        assert play(str(playbook)) == 0                       # idempotent
        assert play("gpuprep.node.revert", "--tags", "nccl_env") > 0
        assert node_exec(NODE, "test", "-e", "/etc/gpuprep/env").returncode != 0
    finally:
        remove_nodes([NODE])


def _get_pip_stand_in():
    """ansible-test bootstraps pip in its venvs with a script from ci-files.testing.ansible.com, which this
    network does not reach; .ci/ansible-test-get-pip.py does the same from the interpreter's bundled pip."""
    import ansible_test
    source = (Path(ansible_test.__file__).parent / "_internal" / "python_requirements.py").read_text()
    version = re.search(r"pip='([0-9.]+)'", source).group(1)       # the pip version this ansible-test pins
    cached = Path.home() / ".ansible" / "test" / "cache" / f"get_pip_{version.replace('.', '_')}.py"
    if not cached.exists():
        cached.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(REPO / ".ci" / "ansible-test-get-pip.py", cached)


@pytest.mark.slow
def test_ansible_test_sanity_passes_on_the_installed_collection(installed):
    _, path = installed
    _get_pip_stand_in()
    root = path / "ansible_collections" / "gpuprep" / "node"
    env = {**os.environ, "PATH": f"{BIN}{os.pathsep}{os.environ['PATH']}"}
    done = subprocess.run([str(BIN / "ansible-test"), "sanity", "--python", f"{sys.version_info[0]}.{sys.version_info[1]}",
                           "--color", "no"], cwd=root, capture_output=True, text=True, timeout=2400, env=env)
    errors = [line for line in (done.stdout + done.stderr).splitlines() if line.startswith(("ERROR", "FATAL"))]
    assert done.returncode == 0, "\n".join(errors[-60:]) or done.stdout[-3000:]
    assert "Running sanity test \"validate-modules\"" in done.stdout + done.stderr
