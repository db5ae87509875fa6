"""`nvidia-smi topo -m`: the device matrix, CPU/NUMA affinity and the NIC legend, old and new."""
from __future__ import annotations

import re
from typing import List

from ..errors import BadInput
from ..snapshot import Snapshot, Topology
from . import values as v

_LINK = re.compile(r"^(X|SYS|NODE|PHB|PXB|PIX|NV\d+|SOC|N/A)$")
_AFFINITY_COLUMNS = ("CPU Affinity", "NUMA Affinity", "GPU NUMA ID")


def looks_like_topo(text: str) -> bool:
    for line in text.splitlines()[:5]:
        cells = line.split()
        if cells[:1] == ["GPU0"] and len(cells) > 1 and cells[1] == "X":
            return True
    return False


def parse_topology(text: str) -> Topology:
    lines = text.splitlines()
    # the header row starts with GPU0 (indented, though copies of the output lose that); GPU0's own row has X next
    header_at = next((i for i, line in enumerate(lines)
                      if line.split()[:1] == ["GPU0"] and line.split()[1:2] != ["X"]), None)
    if header_at is None:
        raise BadInput("nvidia-smi topo -m output without its header row (GPU0 GPU1 ... CPU Affinity)")
    columns = [c.strip() for c in re.split(r"\t+|\s{2,}", lines[header_at].strip()) if c.strip()]
    devices = [c for c in columns if c not in _AFFINITY_COLUMNS]
    extra = [c for c in columns if c in _AFFINITY_COLUMNS]
    topo = Topology(devices=devices)
    for line in lines[header_at + 1:]:
        cells = line.split()
        if cells and cells[0].startswith("Legend"):
            break
        if cells and cells[0] in devices:
            _device_row(topo, cells[0], cells[1:], extra)
    legend = re.findall(r"^\s*(NIC\d+):\s*(\S+)\s*$", text, re.M)
    topo.nic_names = {nic: dev for nic, dev in legend}
    return topo


def _device_row(topo: Topology, name: str, rest: List[str], extra: List[str]) -> None:
    """One device's row: its link to each other device, then its CPU and NUMA affinity columns."""
    devices = topo.devices
    topo.matrix[name] = {other: link for other, link in zip(devices, rest[:len(devices)]) if other != name}
    for column, value in zip(extra, rest[len(devices):]):
        if column == "CPU Affinity" and v.known(value):
            topo.cpu_affinity[name] = value
        elif column == "NUMA Affinity":
            topo.numa_affinity[name] = v.integer(value)


def import_topology(text: str, origin: str) -> Snapshot:
    snap = Snapshot(sources=[origin])
    snap.topology = parse_topology(text)
    return snap


def nic_device_name(topology: Topology, column: str) -> str:
    """NIC0 -> mlx5_ib0 through the legend; old formats name the device in the header."""
    return topology.nic_names.get(column, column)


def gpu_pairs(topology: Topology) -> List[tuple]:
    gpus = topology.gpus()
    return [(a, b, topology.matrix.get(a, {}).get(b)) for i, a in enumerate(gpus) for b in gpus[i + 1:]]
