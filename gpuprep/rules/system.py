"""sys.*: kernel and OS settings that training wants (the tuned `accelerator-performance` and
`hpc-compute` profiles, NCCL's requirements)."""
from __future__ import annotations

import re

from ..parsers.sshd_config import password_methods_on, root_key_only
from . import Finding, host, rule


@rule("sys.nouveau-loaded")
def nouveau(snap, ctx):
    mods = snap.kernel_modules
    if not mods or "nouveau" not in mods:
        return []
    if mods["nouveau"]:
        return [Finding("sys.nouveau-loaded", "fail", host(snap), "The nouveau driver is loaded",
                        {"nouveau": True}, "gpuprep apply --tags system_tuning (blacklists nouveau, rebuilds the initramfs); reboot")]
    return [Finding("sys.nouveau-loaded", "pass", host(snap), "nouveau is not loaded")]


def _dma_buf(snap) -> bool:
    """GPUDirect RDMA without nvidia_peermem: NVIDIA's open kernel modules export GPU memory as dma-buf on Linux
    5.12 and later (NVIDIA's GPUDirect RDMA guide), which NCCL 2.19+ and UCX use by themselves."""
    kernel = re.match(r"(\d+)\.(\d+)", snap.system.kernel or "")
    return snap.software.kernel_module_flavor == "open" and bool(kernel) and \
        (int(kernel.group(1)), int(kernel.group(2))) >= (5, 12)


@rule("sys.peermem-missing")
def peermem(snap, ctx):
    mods = snap.kernel_modules
    rdma = [d for d in snap.rdma_devices or []]
    if not mods or not rdma or not snap.gpus:
        return []
    evidence = {"rdma_devices": sorted({d.name for d in rdma}), "nvidia_peermem": bool(mods.get("nvidia_peermem")),
                "kernel": snap.system.kernel, "kernel_module": snap.software.kernel_module_flavor}
    if mods.get("nvidia_peermem"):
        return [Finding("sys.peermem-missing", "pass", host(snap), "nvidia_peermem loaded", evidence)]
    if _dma_buf(snap):
        return [Finding("sys.peermem-missing", "pass", host(snap),
                        "GPUDirect RDMA through dma-buf (open kernel modules, Linux 5.12+): nvidia_peermem not needed",
                        evidence, source="NVIDIA GPUDirect RDMA guide")]
    return [Finding("sys.peermem-missing", "warn", host(snap),
                    "RDMA devices present but nvidia_peermem is not loaded (no GPUDirect RDMA)", evidence,
                    "modprobe nvidia_peermem (and add it to /etc/modules-load.d), or use NVIDIA's open kernel modules "
                    "on Linux 5.12+ for dma-buf", "NVIDIA GPUDirect RDMA guide")]


@rule("sys.cpu-governor")
def governor(snap, ctx):
    govs = snap.settings.cpu_governors
    if not govs:
        return []
    if govs != ["performance"]:
        return [Finding("sys.cpu-governor", "warn", host(snap), f"CPU frequency governor is {', '.join(govs)}",
                        {"governors": govs}, "gpuprep apply --tags system_tuning", "tuned accelerator-performance profile")]
    return [Finding("sys.cpu-governor", "pass", host(snap), "CPU governor is performance")]


@rule("sys.numa-balancing")
def numa_balancing(snap, ctx):
    value = snap.settings.numa_balancing
    if value is None or not snap.numa_nodes or len([n for n in snap.numa_nodes if n.cpulist]) < 2:
        return []
    if value != 0:
        return [Finding("sys.numa-balancing", "warn", host(snap), "Automatic NUMA balancing is on",
                        {"kernel.numa_balancing": value},
                        "gpuprep apply --tags system_tuning (kernel.numa_balancing=0)", "tuned hpc-compute profile")]
    return [Finding("sys.numa-balancing", "pass", host(snap), "NUMA balancing is off")]


@rule("sys.memlock")
def memlock(snap, ctx):
    soft = snap.settings.memlock_soft
    if soft is None or not (snap.gpus or snap.rdma_devices):
        return []
    if soft != "unlimited":
        return [Finding("sys.memlock", "warn", host(snap), f"Locked-memory limit is {soft} bytes",
                        {"memlock_soft": soft, "memlock_hard": snap.settings.memlock_hard},
                        "gpuprep apply --tags system_tuning (memlock unlimited); containers: --ulimit memlock=-1",
                        "NCCL troubleshooting guide")]
    return [Finding("sys.memlock", "pass", host(snap), "memlock unlimited")]


@rule("sys.shm-size")
def shm(snap, ctx):
    size = snap.settings.shm_size_mib
    if size is None:
        return []
    if size < 1024:
        return [Finding("sys.shm-size", "warn", host(snap), f"/dev/shm is only {size} MiB",
                        {"shm_size_mib": size}, "Containers: --shm-size=1g or more; hosts: remount /dev/shm larger",
                        "NCCL troubleshooting guide (shared memory)")]
    return [Finding("sys.shm-size", "pass", host(snap), f"/dev/shm is {size} MiB")]


@rule("sys.thp")
def thp(snap, ctx):
    value = snap.settings.thp_enabled
    if value is None:
        return []
    if value == "never":
        return [Finding("sys.thp", "info", host(snap), "Transparent hugepages are disabled",
                        {"enabled": value}, "gpuprep apply --tags system_tuning (madvise)", "tuned hpc-compute profile")]
    return [Finding("sys.thp", "pass", host(snap), f"Transparent hugepages: {value}")]


@rule("sys.iommu")
def iommu(snap, ctx):
    cmdline = snap.system.kernel_cmdline
    if cmdline is None or len(snap.gpus or []) < 2:
        return []
    words = cmdline.split()
    on = any(w in ("intel_iommu=on", "amd_iommu=on", "iommu=on") for w in words)
    passthrough = "iommu=pt" in words
    if on and not passthrough:
        return [Finding("sys.iommu", "warn", host(snap), "IOMMU is on without passthrough: GPU peer-to-peer may hang or slow",
                        {"cmdline": [w for w in words if "iommu" in w]},
                        "Add iommu=pt to the kernel command line (and disable PCIe ACS on switches for P2P)",
                        "NCCL troubleshooting guide (PCI ACS / IOMMU)")]
    return [Finding("sys.iommu", "pass", host(snap), "IOMMU settings allow P2P",
                    {"cmdline": [w for w in words if "iommu" in w]})]


# keyboard-interactive is PAM's password prompt on most distributions; "without-password" is the old spelling
@rule("sys.ssh-password-auth")
def ssh_password_auth(snap, ctx):
    sshd = snap.settings.sshd
    if not sshd or "passwordauthentication" not in sshd:
        return []
    on = password_methods_on(sshd)
    if on:
        return [Finding("sys.ssh-password-auth", "warn", host(snap), "sshd accepts passwords",
                        {k: sshd.get(k) for k in on},
                        "gpuprep apply --tags system_tuning_ssh -e system_tuning_ssh_enabled=true (a drop-in in "
                        "/etc/ssh/sshd_config.d/ checked with sshd -t; refuses when the connecting user has no key)")]
    return [Finding("sys.ssh-password-auth", "pass", host(snap), "sshd takes no passwords")]


@rule("sys.ssh-root-login")
def ssh_root_login(snap, ctx):
    sshd = snap.settings.sshd
    if not sshd or "permitrootlogin" not in sshd:
        return []
    value = sshd["permitrootlogin"].lower()
    if root_key_only(sshd):
        return [Finding("sys.ssh-root-login", "pass", host(snap), f"root logs in by key only ({value})")]
    return [Finding("sys.ssh-root-login", "warn", host(snap), "root may log in with a password over SSH",
                    {"permitrootlogin": value},
                    "gpuprep apply --tags system_tuning_ssh -e system_tuning_ssh_enabled=true "
                    "(PermitRootLogin prohibit-password in a drop-in in /etc/ssh/sshd_config.d/)")]
