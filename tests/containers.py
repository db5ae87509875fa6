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
    """Start the nodes, then wait until each one's systemd has finished booting (`is-system-running --wait`: the
    state, not a fixed time; on a loaded machine several booting at once take long, and a prepare run through Mitogen
    reaches its service tasks within seconds)."""
    for name in names:
        docker("rm", "-f", name, check=False)
        docker("run", "-d", "--name", name, "--hostname", name, "--cap-add", "SYS_ADMIN", "--cgroupns=host",
               "--tmpfs", "/run", "--tmpfs", "/run/lock", "--tmpfs", "/tmp",
               "-v", "/sys/fs/cgroup:/sys/fs/cgroup:rw", image, "/lib/systemd/systemd")
    for name in names:
        _booted(name)


def _booted(name: str, bound: float = 600.0) -> None:
    """Until systemd says the boot is over (running, or degraded: a unit a container cannot start); a first exec
    can fail while PID 1 sets up its bus, so ask again. The bound is for a node that never boots, not a speed limit."""
    import time
    deadline = time.monotonic() + bound
    while time.monotonic() < deadline:
        state = docker("exec", name, "systemctl", "is-system-running", "--wait", check=False, timeout=600)
        if state.stdout.strip() in ("running", "degraded"):
            return
        time.sleep(0.5)
    raise RuntimeError(f"{name}: systemd did not finish booting within {bound:.0f} s")


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
    """Install the fake GPU tools and stand-ins (the Molecule scenarios' prepare playbook), through Mitogen's strategy
    as `gpuprep apply` runs (a third to a fifth of plain Ansible's time here: one interpreter per node, not per task)."""
    from gpuprep.ansible.runner import mitogen_env
    bindir = os.path.dirname(sys.executable)
    env = dict(os.environ, MOLECULE_PROJECT_DIRECTORY=str(REPO / "collection"),
               ANSIBLE_COLLECTIONS_PATH=str(collections_path()), ANSIBLE_NOCOLOR="1", ANSIBLE_PIPELINING="True",
               PATH=bindir + os.pathsep + os.environ.get("PATH", ""), **mitogen_env())
    done = subprocess.run([os.path.join(bindir, "ansible-playbook"), "-i", str(inventory), "-f", str(forks),
                           str(REPO / "collection" / "molecule" / "shared" / "prepare.yml")],
                          capture_output=True, text=True, env=env, timeout=900)
    if done.returncode != 0:
        raise RuntimeError("prepare failed:\n" + done.stdout[-3000:])


def node_exec(name: str, *argv: str, check: bool = False) -> subprocess.CompletedProcess:
    return docker("exec", name, *argv, check=check)


# -- a Slurm cluster of several nodes on one machine (issue 45's bed) ------------------------------------------------

# what every test cluster's slurm.conf says after its name and controller: munge, no cgroups, the spool and state
SLURM_COMMON = """AuthType=auth/munge
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
SchedulerType=sched/backfill
SelectType=select/cons_tres
SlurmctldPidFile=/run/slurmctld.pid
SlurmdPidFile=/run/slurmd.pid
SlurmdSpoolDir=/var/lib/slurm/slurmd
StateSaveLocation=/var/lib/slurm/slurmctld
SlurmUser=slurm
ReturnToService=2
"""
CLUSTER_CTL_PORT = 6917             # slurmctld's; each slurmd gets CLUSTER_CTL_PORT + 4 + its number


def cluster_conf(names: List[str]) -> str:
    """slurm.conf for `names`, node i at 127.0.2.i with slurmd on its own port (they share one network namespace)."""
    nodes = "\n".join(f"NodeName={n} NodeAddr=127.0.2.{i} NodeHostname={n} Port={CLUSTER_CTL_PORT + 4 + i} CPUs=2 "
                      "RealMemory=1000 State=UNKNOWN" for i, n in enumerate(names, 1))
    return f"""ClusterName=gpjob
SlurmctldHost={names[0]}(127.0.2.1)
SlurmctldPort={CLUSTER_CTL_PORT}
{SLURM_COMMON}SelectTypeParameters=CR_CPU
KillOnBadExit=0
MpiDefault=none
{nodes}
PartitionName=debug Nodes={",".join(names)} Default=YES MaxTime=INFINITE State=UP OverSubscribe=FORCE:4
"""


# units masked (linked to /dev/null) before systemd starts: sshd would listen on the host's port 22
_MASKED = [arg for unit in ("ssh.service", "ssh.socket") for arg in ("-v", f"/dev/null:/etc/systemd/system/{unit}:ro")]


def start_slurm_cluster(names: List[str], mounts: List[str] = ()) -> None:
    """One systemd container a node, on the host's network namespace (loopback addresses only: node i is
    127.0.2.i, every name resolves there) with its own host name and PID namespace; slurmctld on the first. The
    containers come from the one Slurm image, so munge's key is the same on all. SYS_PTRACE lets the node's
    watcher read the job's stacks (py-spy), as root on a real node may."""
    remove_nodes(names)
    hosts = [arg for i, n in enumerate(names, 1) for arg in ("--add-host", f"{n}:127.0.2.{i}")]
    volumes = [arg for mount in mounts for arg in ("-v", mount)]
    conf = cluster_conf(names)
    for name in names:
        docker("run", "-d", "--name", name, "--hostname", name, "--network", "host", "--cap-add", "SYS_ADMIN",
               "--cap-add", "SYS_PTRACE", "--cgroupns=host", "--tmpfs", "/run", "--tmpfs", "/run/lock",
               "--tmpfs", "/tmp", "-v", "/sys/fs/cgroup:/sys/fs/cgroup:rw", *_MASKED, *hosts, *volumes, SLURM_IMAGE,
               "/lib/systemd/systemd")
    for name in names:
        _booted(name)
        done = subprocess.run(["docker", "exec", "-i", name, "sh", "-c",
                               "mkdir -p /var/lib/slurm/slurmd /var/lib/slurm/slurmctld /etc/slurm && "
                               "chown slurm: /var/lib/slurm/slurmctld && cat > /etc/slurm/slurm.conf"],
                              input=conf, text=True, capture_output=True, timeout=120)
        if done.returncode != 0:
            raise RuntimeError(f"{name}: {done.stderr}")
    node_exec(names[0], "systemctl", "start", "slurmctld", check=True)
    for name in names:
        node_exec(name, "systemctl", "start", "slurmd", check=True)
