"""-K against a host whose sudo wants a password: the apply succeeds with the right password, fails clearly
with a wrong one, and the password appears nowhere in gpuprep's output or the run's artifacts."""
import os
import secrets
import subprocess
import sys

import pytest

from containers import docker_ready, node_exec, remove_nodes, start_nodes, write_inventory

pytestmark = [pytest.mark.docker, pytest.mark.slow,
              pytest.mark.skipif(not docker_ready(), reason="needs Docker and the base image (.ci/docker-setup.sh)")]

NODE = "gpbecome-a"
PASSWORD = "pw-" + secrets.token_hex(8)


@pytest.fixture(scope="module")
def node(tmp_path_factory):
    start_nodes([NODE])
    setup = (f"useradd -m -s /bin/sh deploy && echo 'deploy:{PASSWORD}' | chpasswd && "
             "echo 'deploy ALL=(ALL) ALL' > /etc/sudoers.d/deploy && chmod 0440 /etc/sudoers.d/deploy")
    node_exec(NODE, "sh", "-c", setup, check=True)
    assert node_exec(NODE, "su", "deploy", "-c", "sudo -n true").returncode != 0     # sudo does want the password
    yield write_inventory(tmp_path_factory.mktemp("inv") / "become.yml", [NODE])
    remove_nodes([NODE])


def apply_with_password(inventory, password, state):
    env = dict(os.environ, XDG_STATE_HOME=str(state))
    return subprocess.run([sys.executable, "-m", "gpuprep", "apply", "-i", str(inventory), "-u", "deploy", "-K",
                           "--tags", "nccl_env", "--json"], input=password + "\n", capture_output=True, text=True,
                          env=env, timeout=900)


def grep_tree(root, needle):
    hits = []
    for folder, _, names in os.walk(root):
        for name in names:
            path = os.path.join(folder, name)
            with open(path, "rb") as fh:
                if needle.encode() in fh.read():
                    hits.append(path)
    return hits


def test_become_password_is_used_and_never_written(node, tmp_path):
    state = tmp_path / "state"
    done = apply_with_password(node, PASSWORD, state)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-2000:]
    assert node_exec(NODE, "stat", "-c", "%U", "/etc/gpuprep/env").stdout.strip() == "root"    # written through sudo
    assert PASSWORD not in done.stdout and PASSWORD not in done.stderr
    assert grep_tree(state, PASSWORD) == []
    assert grep_tree(state, "deploy")            # the artifacts are there (the run did use the user)


def test_wrong_become_password_fails_the_host_with_the_reason(node, tmp_path):
    done = apply_with_password(node, "not-the-password", tmp_path / "state")
    assert done.returncode != 0
    text = (done.stdout + done.stderr).lower()
    assert "password" in text and "traceback" not in text, done.stdout[-2000:] + done.stderr[-2000:]
