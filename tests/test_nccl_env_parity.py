"""The nccl_env role (real ansible-playbook on this machine) and `gpuprep nccl-env` write the same file from
the same facts, on a host where the answer is not trivial: 8 GPUs (a real `nvidia-smi -q` of an 8x H100 SXM
node, answered by the fake nvidia-smi) and a fake /sys and /proc laid out after a real 8x H100 node's
`nvidia-smi topo -m` (two sockets of 56 cores with SMT, 13 RDMA devices named in its NIC legend)."""
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import REPO, corpus, run_cli
from gpuprep.resources import collections_path

GPUS_CAPTURE = "h100-sxm-x8.nvidia-smi-q.txt"
TOPOLOGY = "h100-sxm-x8-ib-penny.topo-m.txt"
# the test's choice of link states (a capture of topo -m does not record them): two ports down
DOWN = {"mlx5_ib7", "mlx5_eth2", "mlx5_eth3", "mlx5_eth4"}


def _ranges(text):
    for part in text.split(","):
        lo, _, hi = part.partition("-")
        yield range(int(lo), int(hi or lo) + 1)


def make_root(root: Path) -> None:
    """sysfs CPU topology from the capture's CPU affinity column (per NUMA node: cores, then SMT siblings),
    /sys/class/infiniband from its NIC legend, /proc/net/route with the default route on bond0."""
    text = Path(corpus(TOPOLOGY)).read_text()
    affinities = sorted(set(re.findall(r"^GPU\d+\s.*?\s(\d+-\d+,\d+-\d+)\s+(\d+)\s", text, re.M)), key=lambda a: a[1])
    for cpus, node in affinities:
        cores, siblings = _ranges(cpus)
        for core_id, cpu in enumerate(cores):
            for thread in (cpu, siblings[core_id]):
                topo = root / f"sys/devices/system/cpu/cpu{thread}/topology"
                topo.mkdir(parents=True)
                (topo / "physical_package_id").write_text(f"{node}\n")
                (topo / "core_id").write_text(f"{core_id}\n")
    for name in re.findall(r"^\s+NIC\d+: (\S+)$", text, re.M):
        port = root / f"sys/class/infiniband/{name}/ports/1"
        port.mkdir(parents=True)
        (port / "state").write_text("1: DOWN\n" if name in DOWN else "4: ACTIVE\n")
        (port / "link_layer").write_text("Ethernet\n" if "eth" in name else "InfiniBand\n")
    (root / "proc/net").mkdir(parents=True)
    (root / "proc/net/route").write_text(
        "Iface\tDestination\tGateway \tFlags\tRefCnt\tUse\tMetric\tMask\t\tMTU\tWindow\tIRTT\n"
        "bond0\t00000000\t0100A8C0\t0003\t0\t0\t0\t00000000\t0\t0\t0\n")


# read off the captures by hand: 2 x 56 physical cores / 8 GPUs = 14; 9 of 13 RDMA ports active
EXPECTED = {
    "MKL_NUM_THREADS": "14", "OMP_NUM_THREADS": "14", "NCCL_IB_DISABLE": "0", "NCCL_SOCKET_IFNAME": "=bond0",
    "NCCL_IB_HCA": "=mlx5_eth0,mlx5_eth1,mlx5_ib0,mlx5_ib1,mlx5_ib2,mlx5_ib3,mlx5_ib4,mlx5_ib5,mlx5_ib6",
    "NCCL_DEBUG": "WARN", "NCCL_DEBUG_FILE": "/var/log/nccl %h.log",
}


@pytest.mark.slow
def test_role_and_cli_write_the_same_file_on_an_8_gpu_rdma_host(tmp_path):
    playbook = shutil.which("ansible-playbook", path=os.path.dirname(sys.executable))
    assert playbook, "ansible-playbook comes with gpuprep's ansible-core dependency"
    root = tmp_path / "root"
    make_root(root)
    fakes = tmp_path / "bin"
    fakes.mkdir()
    shutil.copy(REPO / "tests" / "fakes" / "nvidia-smi", fakes / "nvidia-smi")
    env_file, profile = tmp_path / "etc" / "env", tmp_path / "profile.sh"
    overrides = '{"nccl_env_overrides": {"NCCL_DEBUG": "WARN", "NCCL_DEBUG_FILE": "/var/log/nccl %h.log"}}'
    env = {**os.environ, "ANSIBLE_NOCOLOR": "1", "ANSIBLE_COLLECTIONS_PATH": str(collections_path()), "PATH": f"{fakes}{os.pathsep}{os.environ['PATH']}",
           "FAKE_NVIDIA_CAPTURE": corpus(GPUS_CAPTURE), "FAKE_NVIDIA_STATE": str(tmp_path / "state.json")}
    done = subprocess.run(
        [playbook, "-i", "localhost,", "-c", "local", str(REPO / "collection" / "playbooks" / "apply.yml"), "--tags", "nccl_env",
         "-e", "ansible_become=false", "-e", f"nccl_env_file={env_file}", "-e", f"nccl_env_profile_script={profile}",
         "-e", f"nccl_env_state_dir={tmp_path / 'state'}", "-e", f"nccl_env_sysroot={root}", "-e", overrides,
         "-e", f"ansible_python_interpreter={sys.executable}"],
        capture_output=True, text=True, timeout=300, env=env)
    assert done.returncode == 0, done.stdout[-3000:]

    cli = run_cli("nccl-env", "--from", corpus(GPUS_CAPTURE), "--root", str(root),
                  "--set", "NCCL_DEBUG=WARN", "--set", "NCCL_DEBUG_FILE=/var/log/nccl %h.log")
    assert cli.returncode == 0, cli.stderr
    written = env_file.read_text()
    assert written == cli.stdout                       # byte for byte

    values = dict(re.findall(r'^([A-Z_]+)="(.*)"$', written, re.M))
    assert values == EXPECTED
    # the exported values, as a login shell sees them
    shell = subprocess.run(["sh", "-c", f'. "{profile}"; env'], capture_output=True, text=True, timeout=30)
    assert "NCCL_DEBUG_FILE=/var/log/nccl %h.log" in shell.stdout.splitlines()
    assert "OMP_NUM_THREADS=14" in shell.stdout.splitlines()

    again = subprocess.run(done.args, capture_output=True, text=True, timeout=300, env=env)
    assert re.search(r"localhost\s*:.*changed=0", again.stdout), again.stdout[-2000:]


def test_the_env_file_reads_back_as_systemd_reads_it(tmp_path):
    """What `nccl-env` writes (double-quoted, \\ " $ ` escaped) is what the burn-in hands its ranks: the quotes
    are the file's syntax. The old reader kept them, so NCCL_SOCKET_IFNAME reached NCCL as '"=eth0"'."""
    from gpuprep.burnin.torchrun import nccl_env_file
    from gpuprep.errors import BadInput
    done = run_cli("nccl-env", "--socket-ifname", "=eth0", "--set", "NCCL_DEBUG=WARN", "--set", "NCCL_IB_HCA=^mlx5_2")
    assert done.returncode == 0, done.stderr
    env_file = tmp_path / "env"
    env_file.write_text(done.stdout)
    env = nccl_env_file(str(env_file))
    assert env["NCCL_SOCKET_IFNAME"] == "=eth0" and env["NCCL_DEBUG"] == "WARN" and env["NCCL_IB_HCA"] == "^mlx5_2"
    assert all('"' not in value for value in env.values()) and env["OMP_NUM_THREADS"].isdigit()
    env_file.write_text(done.stdout + 'NCCL_ALGO="Ring\n')      # a line cut short: refused, naming the line
    with pytest.raises(BadInput, match=r"env: line \d+ is not NAME="):
        nccl_env_file(str(env_file))
