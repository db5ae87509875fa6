"""Real systemd containers standing in for GPU nodes (fleet tests and the apply benchmark).
They are reached only through `docker exec` (the community.docker.docker connection)."""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import Dict, List, Optional
from gpuprep.resources import collections_path

REPO = Path(__file__).resolve().parent.parent
IMAGE = os.environ.get("GPUPREP_BASE_IMAGE", "gpuprep-debian12:v2")
CORPUS = REPO / "tests" / "corpus"


def docker(*args: str, check: bool = True, timeout: int = 120) -> subprocess.CompletedProcess:
    return subprocess.run(["docker", *args], capture_output=True, text=True, check=check, timeout=timeout)


def docker_ready() -> bool:
    try:
        return docker("image", "inspect", IMAGE, check=False).returncode == 0
    except (OSError, subprocess.SubprocessError):
        return False


def start_nodes(names: List[str], image: str = IMAGE) -> None:
    for name in names:
        docker("rm", "-f", name, check=False)
        docker("run", "-d", "--name", name, "--hostname", name, "--cap-add", "SYS_ADMIN", "--cgroupns=host",
               "--tmpfs", "/run", "--tmpfs", "/run/lock", "--tmpfs", "/tmp",
               "-v", "/sys/fs/cgroup:/sys/fs/cgroup:rw", image, "/lib/systemd/systemd")


DNF_IMAGE = os.environ.get("GPUPREP_DNF_IMAGE", "gpuprep-dnf:v1")


SLURM_IMAGE = os.environ.get("GPUPREP_SLURM_IMAGE", "gpuprep-slurm:v1")


def slurm_ready() -> bool:
    try:
        return docker("image", "inspect", SLURM_IMAGE, check=False).returncode == 0
    except (OSError, subprocess.SubprocessError):
        return False


def start_slurm_node(name: str, mounts: List[str] = ()) -> None:
    """A systemd container from the Slurm image with no network: slurmctld and slurmd talk over the loopback
    device. The node's name resolves to 127.0.1.1 (Debian's own convention for the host name), added to lo so that
    the resolver, which ignores 127.0.0.1 alone, answers for it (NET_ADMIN for that, inside the container only)."""
    docker("rm", "-f", name, check=False)
    volumes = [arg for mount in mounts for arg in ("-v", mount)]
    docker("run", "-d", "--name", name, "--hostname", name, "--network", "none", "--cap-add", "SYS_ADMIN",
           "--cap-add", "NET_ADMIN", "--cgroupns=host", "--tmpfs", "/run", "--tmpfs", "/run/lock", "--tmpfs", "/tmp",
           "-v", "/sys/fs/cgroup:/sys/fs/cgroup:rw", *volumes, SLURM_IMAGE, "/lib/systemd/systemd")
    script = (f"ip addr add 127.0.1.1/32 dev lo && printf '127.0.1.1 {name}\\n' >> /etc/hosts && "
              "mkdir -p /var/lib/slurm/slurmd /var/lib/slurm/slurmctld && chown slurm: /var/lib/slurm/slurmctld")
    node_exec(name, "sh", "-c", script, check=True)


def remove_nodes(names: List[str]) -> None:
    for name in names:
        docker("rm", "-f", name, check=False)


def write_inventory(path: Path, names: List[str], host_vars: Optional[Dict[str, dict]] = None,
                    group_vars: Optional[dict] = None) -> Path:
    import yaml
    hosts = {}
    for name in names:
        hosts[name] = {"ansible_host": name, **((host_vars or {}).get(name, {}))}
    data = {"all": {"hosts": hosts, "vars": {
        # the short name routes to community.docker.docker; Mitogen's strategy recognises it too
        "ansible_connection": "docker", "ansible_python_interpreter": "/usr/bin/python3",
        "container_toolkit_repo_url": "file:/srv/gpuprep-repo", "container_toolkit_repo_trusted": True,
        "fake_capture": "dual-rtx-a5000.nvidia-smi-q.xml", "fake_persistenced": True, **(group_vars or {})}}}
    path.write_text(yaml.safe_dump(data))
    return path


def prepare(inventory: Path, forks: int = 10) -> None:
    """Install the fake GPU tools and stand-ins (the Molecule scenarios' prepare playbook)."""
    bindir = os.path.dirname(sys.executable)
    env = dict(os.environ, MOLECULE_PROJECT_DIRECTORY=str(REPO / "collection"),
               ANSIBLE_COLLECTIONS_PATH=str(collections_path()), ANSIBLE_NOCOLOR="1", ANSIBLE_PIPELINING="True",
               PATH=bindir + os.pathsep + os.environ.get("PATH", ""))
    done = subprocess.run([os.path.join(bindir, "ansible-playbook"), "-i", str(inventory), "-f", str(forks),
                           str(REPO / "collection" / "molecule" / "shared" / "prepare.yml")],
                          capture_output=True, text=True, env=env, timeout=900)
    if done.returncode != 0:
        raise RuntimeError("prepare failed:\n" + done.stdout[-3000:])


def node_exec(name: str, *argv: str, check: bool = False) -> subprocess.CompletedProcess:
    return docker("exec", name, *argv, check=check)
