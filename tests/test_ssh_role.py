"""The system_tuning role's key-only SSH concern through `gpuprep apply`, on a real systemd container with Debian's
sshd, logging in as an unprivileged user who becomes root with sudo (as on a real node): it refuses while that
user has no key, puts the host back when a drop-in read earlier keeps passwords on, shows its change under
--check --diff without making it, then makes the running sshd key-only and revert undoes it."""
import json
import os
import subprocess
import sys

import pytest

from containers import docker_ready, node_exec, remove_nodes, start_nodes, write_inventory

pytestmark = [pytest.mark.docker, pytest.mark.slow,
              pytest.mark.skipif(not docker_ready(), reason="needs Docker and the base image (.ci/docker-setup.sh)")]

NODE = "gpssh-a"
DROP_IN = "/etc/ssh/sshd_config.d/01-gpuprep-key-only.conf"
# what sys.ssh-password-auth's remedy says to run
ONLY_SSH = ["--tags", "system_tuning_ssh", "-e", "system_tuning_ssh_enabled=true"]


@pytest.fixture(scope="module")
def inventory(tmp_path_factory):
    start_nodes([NODE])
    setup = ("useradd -m -s /bin/bash deploy && echo 'deploy ALL=(ALL) NOPASSWD: ALL' > /etc/sudoers.d/deploy && "
             "chmod 0440 /etc/sudoers.d/deploy && su deploy -c \"ssh-keygen -q -t ed25519 -N '' -f ~/.ssh/id_ed25519\" "
             "&& until systemctl is-active -q ssh; do sleep 1; done")
    node_exec(NODE, "timeout", "120", "sh", "-c", setup, check=True)
    yield write_inventory(tmp_path_factory.mktemp("inv") / "ssh.yml", [NODE])
    remove_nodes([NODE])


def gpuprep(command, inventory, state, *argv):
    env = dict(os.environ, XDG_STATE_HOME=str(state))
    return subprocess.run([sys.executable, "-m", "gpuprep", command, "-i", str(inventory), "-u", "deploy", *argv],
                          capture_output=True, text=True, env=env, timeout=900)


def offered_methods():
    """What the running sshd offers, asked by a client inside the container (no method tried)."""
    done = node_exec(NODE, "ssh", "-v", "-o", "BatchMode=yes", "-o", "StrictHostKeyChecking=no", "-o",
                     "UserKnownHostsFile=/dev/null", "-o", "PreferredAuthentications=none", "deploy@127.0.0.1", "true")
    lines = [line for line in done.stderr.splitlines() if "Authentications that can continue" in line]
    return lines[-1].rsplit(" ", 1)[-1].strip() if lines else done.stderr


def deploy_logs_in_by_key():
    return node_exec(NODE, "su", "deploy", "-c", "ssh -o BatchMode=yes -o StrictHostKeyChecking=no "
                     "-o UserKnownHostsFile=/dev/null deploy@127.0.0.1 true").returncode == 0


def drop_in_exists():
    return node_exec(NODE, "test", "-e", DROP_IN).returncode == 0


def test_key_only_ssh_never_locks_out_and_reverts(inventory, tmp_path):
    assert offered_methods() == "publickey,password"              # Debian's default

    # 1. deploy has no authorized key: refused, nothing written
    done = gpuprep("apply", inventory, tmp_path, *ONLY_SSH)
    assert done.returncode == 1
    assert "deploy has no authorized key in /home/deploy/.ssh/authorized_keys" in done.stdout + done.stderr
    assert not drop_in_exists()

    node_exec(NODE, "su", "deploy", "-c", "cp ~/.ssh/id_ed25519.pub ~/.ssh/authorized_keys", check=True)

    # 2. a drop-in sshd reads first keeps passwords on: the role's file would not take effect, so it is taken back
    node_exec(NODE, "sh", "-c", "echo 'PasswordAuthentication yes' > /etc/ssh/sshd_config.d/00-site.conf", check=True)
    done = gpuprep("apply", inventory, tmp_path, *ONLY_SSH)
    assert done.returncode == 1
    assert "sshd -T still shows {'passwordauthentication': 'yes'" in done.stdout + done.stderr
    assert not drop_in_exists()
    node_exec(NODE, "rm", "/etc/ssh/sshd_config.d/00-site.conf", check=True)

    # 3. --check --diff: the drop-in's lines, nothing written
    done = gpuprep("apply", inventory, tmp_path, *ONLY_SSH, "--check", "--diff")
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-2000:]
    assert "+PasswordAuthentication no" in done.stdout
    assert not drop_in_exists() and offered_methods() == "publickey,password"

    # 4. applied: the running sshd offers keys only, deploy still gets in, a second run changes nothing
    done = gpuprep("apply", inventory, tmp_path, *ONLY_SSH, "--json")
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-2000:]
    assert offered_methods() == "publickey"
    assert deploy_logs_in_by_key()
    effective = node_exec(NODE, "sshd", "-T").stdout.splitlines()
    assert {"passwordauthentication no", "kbdinteractiveauthentication no",
            "permitrootlogin without-password"} <= set(effective)
    again = json.loads(gpuprep("apply", inventory, tmp_path, *ONLY_SSH, "--json", "--full").stdout)
    assert again["hosts"][NODE]["changed"] == 0, again["hosts"]

    # 5. revert: the drop-in is gone and the running sshd takes passwords again
    done = gpuprep("revert", inventory, tmp_path, "--tags", "system_tuning")
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-2000:]
    assert not drop_in_exists()
    assert offered_methods() == "publickey,password"
