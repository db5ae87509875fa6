"""Host facts from /proc and /sys (and psutil on the live root). Every path is read below `root`,
so tests point it at a fake root filesystem."""
from __future__ import annotations

import os
import re
from pathlib import Path
from typing import Dict, List, Optional

from ..parsers.values import compress_cpulist, expand_cpulist
from ..snapshot import Nic, NumaNode, RdmaDevice, Settings, System

MODULES_OF_INTEREST = ("nvidia", "nvidia_uvm", "nvidia_modeset", "nvidia_drm", "nvidia_peermem", "nouveau")
ENV_OF_INTEREST = re.compile(r"^(NCCL_\w+|OMP_NUM_THREADS|MKL_NUM_THREADS|CUDA_VISIBLE_DEVICES|"
                             r"CUDA_DEVICE_ORDER|NVIDIA_VISIBLE_DEVICES|TORCH_NCCL_\w+|GLOO_SOCKET_IFNAME)$")
_SECRET = re.compile(r"(TOKEN|SECRET|PASSWORD|KEY)", re.I)


class Root:
    def __init__(self, root: str = "/"):
        self.root = Path(root)
        self.live = os.path.abspath(root) == "/"

    def path(self, rel: str) -> Path:
        return self.root / rel.lstrip("/")

    def read(self, rel: str) -> Optional[str]:
        try:
            return self.path(rel).read_text(errors="replace")
        except OSError:
            return None

    def first_line(self, rel: str) -> Optional[str]:
        text = self.read(rel)
        return text.strip().splitlines()[0].strip() if text and text.strip() else None

    def listdir(self, rel: str) -> List[str]:
        try:
            return sorted(os.listdir(self.path(rel)))
        except OSError:
            return []


def _int(text: Optional[str]) -> Optional[int]:
    try:
        return int(text.strip()) if text is not None else None
    except ValueError:
        return None


def probe_system(root: Root) -> System:
    system = System()
    system.hostname = root.first_line("/proc/sys/kernel/hostname") or root.first_line("/etc/hostname")
    os_release = _key_values(root.read("/etc/os-release") or "")
    system.os_name = os_release.get("NAME")
    system.os_version = os_release.get("VERSION_ID")
    system.kernel = root.first_line("/proc/sys/kernel/osrelease")
    system.kernel_cmdline = root.first_line("/proc/cmdline")
    system.arch = os.uname().machine if root.live else None
    cpuinfo = root.read("/proc/cpuinfo") or ""
    models = re.findall(r"^model name\s*:\s*(.+)$", cpuinfo, re.M)
    system.cpu_model = models[0].strip() if models else None
    processors = re.findall(r"^processor\s*:", cpuinfo, re.M)
    system.threads = len(processors) or None
    packages = set(re.findall(r"^physical id\s*:\s*(\d+)", cpuinfo, re.M))
    system.sockets = len(packages) or None
    system.cores = _physical_cores(root)
    system.thread_siblings = probe_thread_siblings(root)
    meminfo = _key_values(root.read("/proc/meminfo") or "", sep=":")
    system.memory_total_mib = _kib_to_mib(meminfo.get("MemTotal"))
    system.swap_total_mib = _kib_to_mib(meminfo.get("SwapTotal"))
    return system


def probe_thread_siblings(root: Root) -> Optional[List[str]]:
    groups = {root.first_line(f"/sys/devices/system/cpu/{entry}/topology/thread_siblings_list")
              for entry in root.listdir("/sys/devices/system/cpu") if re.fullmatch(r"cpu\d+", entry)}
    groups.discard(None)
    return sorted(groups, key=lambda g: int(re.split(r"[,-]", g)[0])) or None


def _physical_cores(root: Root) -> Optional[int]:
    # the same count the nccl_env role divides among the GPUs (one implementation in gpuprep/common/ncclenv.py)
    from ..common.ncclenv import physical_cores
    return physical_cores(str(root.path("/")))


def _kib_to_mib(value: Optional[str]) -> Optional[int]:
    number = _int(value.split()[0]) if value else None
    return number // 1024 if number is not None else None


def _key_values(text: str, sep: str = "=") -> Dict[str, str]:
    out: Dict[str, str] = {}
    for line in text.splitlines():
        if sep in line:
            key, value = line.split(sep, 1)
            out[key.strip()] = value.strip().strip('"')
    return out


def probe_numa(root: Root) -> Optional[List[NumaNode]]:
    nodes = []
    for entry in root.listdir("/sys/devices/system/node"):
        match = re.fullmatch(r"node(\d+)", entry)
        if not match:
            continue
        base = f"/sys/devices/system/node/{entry}"
        meminfo = root.read(f"{base}/meminfo") or ""
        total = re.search(r"MemTotal:\s+(\d+) kB", meminfo)
        nodes.append(NumaNode(node=int(match.group(1)), cpulist=root.first_line(f"{base}/cpulist") or "",
                              memory_mib=int(total.group(1)) // 1024 if total else None))
    return sorted(nodes, key=lambda n: n.node) or None


def probe_nics(root: Root) -> List[Nic]:
    nics: List[Nic] = []
    for name in root.listdir("/sys/class/net"):
        base = f"/sys/class/net/{name}"
        if name == "lo" or not root.path(f"{base}/device").exists():
            continue   # virtual interfaces (bridges, veths) have no PCI device
        device = root.path(f"{base}/device")
        bus = os.path.basename(os.path.realpath(device)) if root.live else (
            root.first_line(f"{base}/device/pci_bus_id") or None)
        speed = _int(root.first_line(f"{base}/speed"))
        nics.append(Nic(name=name, pci_bus_id=bus, numa_node=_numa(root.first_line(f"{base}/device/numa_node")),
                        speed_mbps=speed if speed and speed > 0 else None,
                        operstate=root.first_line(f"{base}/operstate")))
    return nics


def probe_interfaces(root: Root) -> Dict[str, str]:
    """Every interface (virtual ones too) with its operstate: NCCL_SOCKET_IFNAME may name any."""
    return {name: root.first_line(f"/sys/class/net/{name}/operstate") or "unknown"
            for name in root.listdir("/sys/class/net")}


def probe_rdma(root: Root) -> List[RdmaDevice]:
    """Every port of every RDMA device in /sys/class/infiniband: state, physical state, rate, link layer and GID 0
    of the port; the device's part (hca_type), firmware, PCIe link (now and at most), NUMA node and netdev."""
    devices = []
    for name in root.listdir("/sys/class/infiniband"):
        base = f"/sys/class/infiniband/{name}"
        device = _rdma_device_facts(root, base)
        for port in root.listdir(f"{base}/ports") or []:
            if not port.isdigit():
                continue
            where = f"{base}/ports/{port}"
            devices.append(RdmaDevice(name=name, port=int(port), link_layer=root.first_line(f"{where}/link_layer"),
                                      state=root.first_line(f"{where}/state"),
                                      phys_state=root.first_line(f"{where}/phys_state"),
                                      rate_gbps=_leading_number(root.first_line(f"{where}/rate")),
                                      gid=root.first_line(f"{where}/gids/0"), **device))
    return devices


def _rdma_device_facts(root: Root, base: str) -> dict:
    netdevs = root.listdir(f"{base}/device/net")
    return {"numa_node": _numa(root.first_line(f"{base}/device/numa_node")),
            "netdev": netdevs[0] if netdevs else None,
            "model": root.first_line(f"{base}/hca_type") or None, "firmware": root.first_line(f"{base}/fw_ver") or None,
            "pcie_speed": root.first_line(f"{base}/device/current_link_speed"),
            "pcie_speed_max": root.first_line(f"{base}/device/max_link_speed"),
            "pcie_width": _int(root.first_line(f"{base}/device/current_link_width")),
            "pcie_width_max": _int(root.first_line(f"{base}/device/max_link_width"))}


def _leading_number(text: Optional[str]) -> Optional[float]:
    match = re.match(r"([\d.]+)", text or "")
    return float(match.group(1)) if match else None


def _numa(text: Optional[str]) -> Optional[int]:
    value = _int(text)
    return value if value is not None and value >= 0 else None


def probe_modules(root: Root) -> Optional[Dict[str, bool]]:
    text = root.read("/proc/modules")
    if text is None:
        return None
    loaded = {line.split()[0] for line in text.splitlines() if line.strip()}
    return {name: name in loaded for name in MODULES_OF_INTEREST}


def probe_settings(root: Root) -> Settings:
    settings = Settings()
    governors = set()
    for cpu in root.listdir("/sys/devices/system/cpu"):
        if re.fullmatch(r"cpu\d+", cpu):
            gov = root.first_line(f"/sys/devices/system/cpu/{cpu}/cpufreq/scaling_governor")
            if gov:
                governors.add(gov)
    settings.cpu_governors = sorted(governors) or None
    settings.thp_enabled = _bracketed(root.first_line("/sys/kernel/mm/transparent_hugepage/enabled"))
    settings.thp_defrag = _bracketed(root.first_line("/sys/kernel/mm/transparent_hugepage/defrag"))
    settings.numa_balancing = _int(root.first_line("/proc/sys/kernel/numa_balancing"))
    settings.swappiness = _int(root.first_line("/proc/sys/vm/swappiness"))
    limits = root.read("/proc/self/limits") if root.live else root.read("/proc/limits")
    if limits:
        match = re.search(r"^Max locked memory\s+(\S+)\s+(\S+)", limits, re.M)
        if match:
            settings.memlock_soft, settings.memlock_hard = match.group(1), match.group(2)
    settings.shm_size_mib = _shm_size(root)
    groups = root.listdir("/sys/kernel/iommu_groups")
    settings.iommu_groups = len(groups) if root.path("/sys/kernel/iommu_groups").exists() else None
    return settings


def _bracketed(text: Optional[str]) -> Optional[str]:
    match = re.search(r"\[(\w+)\]", text or "")
    return match.group(1) if match else None


def _shm_size(root: Root) -> Optional[int]:
    if root.live:
        try:
            stat = os.statvfs("/dev/shm")
            return stat.f_blocks * stat.f_frsize // (1 << 20)
        except OSError:
            return None
    mounts = root.read("/proc/mounts") or ""
    match = re.search(r"^\S+ /dev/shm \S+ \S*size=(\d+)k", mounts, re.M)
    return int(match.group(1)) // 1024 if match else None


def probe_env(environ: Dict[str, str]) -> Dict[str, str]:
    return {k: ("<redacted>" if _SECRET.search(k) else v) for k, v in sorted(environ.items())
            if ENV_OF_INTEREST.match(k)}


__all__ = ["Root", "probe_system", "probe_numa", "probe_nics", "probe_rdma", "probe_modules",
           "probe_settings", "probe_env", "probe_interfaces", "compress_cpulist", "expand_cpulist"]
