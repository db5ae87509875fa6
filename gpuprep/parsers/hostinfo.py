"""Host captures: `numactl -H`, `lscpu` and `nvidia-smi nvlink --status`."""
from __future__ import annotations

import re
from typing import Dict, List

from ..snapshot import Gpu, NumaNode, NvLink, Snapshot
from . import values as v

_NUMACTL_CPUS = re.compile(r"^node (\d+) cpus:(.*)$", re.M)
_NUMACTL_SIZE = re.compile(r"^node (\d+) size: (\d+) MB$", re.M)


def looks_like_numactl(text: str) -> bool:
    return bool(re.match(r"\s*available: \d+ nodes", text)) and bool(_NUMACTL_CPUS.search(text))


def import_numactl(text: str, origin: str) -> Snapshot:
    nodes: Dict[int, NumaNode] = {}
    for node, cpus in _NUMACTL_CPUS.findall(text):
        numbers = [int(c) for c in cpus.split()]
        nodes[int(node)] = NumaNode(node=int(node), cpulist=v.compress_cpulist(numbers))
    for node, size in _NUMACTL_SIZE.findall(text):
        nodes.setdefault(int(node), NumaNode(node=int(node))).memory_mib = int(size)
    snap = Snapshot(sources=[origin])
    snap.numa_nodes = [nodes[k] for k in sorted(nodes)]
    return snap


def looks_like_lscpu(text: str) -> bool:
    return bool(re.search(r"^Architecture:\s+\S+", text, re.M)) and "CPU(s):" in text


def import_lscpu(text: str, origin: str) -> Snapshot:
    fields: Dict[str, str] = {}
    for line in text.splitlines():
        match = re.match(r"^\s*([^:]+?):\s*(.*)$", line)
        if match and match.group(1).strip() not in fields:
            fields[match.group(1).strip()] = match.group(2).strip()
    snap = Snapshot(sources=[origin])
    system = snap.system
    system.arch = fields.get("Architecture")
    system.cpu_model = fields.get("Model name")
    system.threads = v.integer(fields.get("CPU(s)"))
    system.sockets = v.integer(fields.get("Socket(s)"))
    per_socket = v.integer(fields.get("Core(s) per socket"))
    if per_socket is not None and system.sockets is not None:
        system.cores = per_socket * system.sockets
    nodes: List[NumaNode] = []
    for key, value in fields.items():
        match = re.match(r"^NUMA node(\d+) CPU\(s\)$", key)
        if match:
            nodes.append(NumaNode(node=int(match.group(1)), cpulist=value or ""))
    if nodes:
        snap.numa_nodes = sorted(nodes, key=lambda n: n.node)
    return snap


_NVLINK_GPU = re.compile(r"^GPU (\d+): (.+?) \(UUID: ([^)]*)\)\s*$")
_NVLINK_LINK = re.compile(r"^\s+Link (\d+): (.+?)\s*$")
# nvidia-smi's line for a GPU none of whose links is up (capitalised "inActive" by some drivers)
_NVLINK_NONE = re.compile(r"^\s*NVML: Unable to retrieve NVLink information as all links are inactive", re.I)
_UUID = re.compile(r"^GPU-[0-9a-fA-F-]{8,}$")


def looks_like_nvlink(text: str) -> bool:
    lines = [l for l in text.splitlines() if l.strip()][:12]
    starts = [i for i, line in enumerate(lines) if _NVLINK_GPU.match(line)]
    return any(i + 1 < len(lines) and (_NVLINK_LINK.match(lines[i + 1]) or _NVLINK_NONE.match(lines[i + 1]))
               for i in starts)


def import_nvlink(text: str, origin: str) -> Snapshot:
    """Each GPU with its links; a GPU whose links are all down has an empty list."""
    gpus: List[Gpu] = []
    for line in text.splitlines():
        head = _NVLINK_GPU.match(line)
        if head:
            uuid = head.group(3).strip()
            gpus.append(Gpu(index=int(head.group(1)), name=head.group(2), nvlinks=[],
                            uuid=uuid if _UUID.match(uuid) else None))
            continue
        link = _NVLINK_LINK.match(line)
        if link and gpus:
            state = link.group(2)
            if "inactive" in state.lower():
                gpus[-1].nvlinks.append(NvLink(link=int(link.group(1)), active=False))
            else:
                gpus[-1].nvlinks.append(NvLink(link=int(link.group(1)), active=True,
                                               speed_gbps=v.number(state)))
    snap = Snapshot(sources=[origin])
    snap.gpus = gpus
    return snap


_CTK = re.compile(r"^NVIDIA Container (?:Runtime Hook|Toolkit CLI|Runtime) version (\S+)", re.M)


def looks_like_ctk_version(text: str) -> bool:
    return bool(_CTK.search(text[:500]))


def import_ctk_version(text: str, origin: str) -> Snapshot:
    snap = Snapshot(sources=[origin])
    snap.software.container_toolkit_version = _CTK.search(text).group(1)
    return snap
