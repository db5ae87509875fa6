"""`nvidia-smi -q` (text, also `-a` and `-q -d SECTION`) and `nvidia-smi -q -x` (XML) readers: the
parsing is gpuprep's one nvidia-smi parser (parsers/nvsmi.py, shared with the roles' facts
module); this module only turns its fields into the snapshot's GPUs."""
from __future__ import annotations

import re
from typing import Dict, List, Optional

from ..errors import BadInput
from . import nvsmi
from ..snapshot import ClockPair, Gpu, NvmlStatus, Snapshot


def gpu_from_fields(index: Optional[int], bus_id: Optional[str], fields: Dict[str, object]) -> Gpu:
    gpu = Gpu(index=index, pci_bus_id=bus_id)
    for name, value in fields.items():
        if name == "supported_clocks":
            value = [ClockPair(mem_mhz=p["memory"], graphics_mhz=p["graphics"]) for p in value] if value else None
        if value is not None:
            setattr(gpu, name, value)
    if gpu.pci_bus_id is None:
        gpu.pci_bus_id = bus_id
    return gpu


def looks_like_text(text: str) -> bool:
    head = text[:4000]
    return "==============NVSMI LOG==============" in head or bool(
        re.search(r"^GPU [0-9A-Fa-f]{4,8}:[0-9A-Fa-f]{2}:[0-9A-Fa-f]{2}\.\d\s*$", head, re.M)
        and re.search(r"^\s+\S.*\s:\s", head, re.M))


_SECTION_LINE = re.compile(r"^\s*(%s)\s*$" % "|".join(re.escape(k) for k in sorted(nvsmi.GPU_SECTIONS)), re.M)
_FIELD_LINE = re.compile(r"^\s+\S.*?\s+:\s", re.M)


def looks_like_excerpt(text: str) -> bool:
    """A pasted part of one GPU's `-q` report: a section heading of it ('Remapped Rows', 'Clocks Throttle
    Reasons', ...) and indented 'Key : Value' lines, without the report's header."""
    head = text[:8000]
    return bool(_SECTION_LINE.search(head)) and len(_FIELD_LINE.findall(head)) >= 2


def _indices(count: int, attached: Optional[int], bus_ids: List[Optional[str]]) -> List[Optional[int]]:
    """A whole report lists GPUs in index order; in a part of one (fewer GPUs than it says it has, or a
    fragment without a bus id) the position says nothing about the index."""
    if (attached is not None and count < attached) or any(bus is None for bus in bus_ids):
        return [None] * count
    return list(range(count))


def looks_like_xml(text: str) -> bool:
    return "<nvidia_smi_log" in text[:2000]


# a pasted `nvidia-smi -q | grep -C3 ...`: the command line someone typed, and grep's '--' between matches
_PASTE_NOISE = re.compile(r"^(?:[#$] .*nvidia-smi.*|--)\s*$\n?", re.M)


_GPU_BLOCK = re.compile(r"^GPU [0-9A-Fa-f]{4,8}:[0-9A-Fa-f]{2}:[0-9A-Fa-f]{2}\.[0-9A-Fa-f]\s*$", re.M)
_PROCESSES = re.compile(r"^\s+Processes\b", re.M)


def _cut_short(text: str) -> bool:
    """A whole `-q` report ends every GPU's block with its Processes section (then, on newer drivers, a few more
    lines); where the first block has it and the last does not, the report was cut inside its last GPU (a `-d`
    filtered report has it in no block)."""
    starts = [m.start() for m in _GPU_BLOCK.finditer(text)]
    if len(starts) < 2:
        return False
    first, last = text[starts[0]:starts[1]], text[starts[-1]:]
    return bool(_PROCESSES.search(first)) and not _PROCESSES.search(last)


def import_text(text: str, origin: str) -> Snapshot:
    text = _PASTE_NOISE.sub("", text)
    if _cut_short(text):
        raise BadInput(f"{origin}: nvidia-smi -q is cut short inside its last GPU (no Processes section): "
                       "capture the whole report again")
    header, blocks = nvsmi.parse_text(text)
    snap = Snapshot(sources=[origin])
    snap.software.driver_version = header["driver_version"]
    snap.software.cuda_driver_version = header["cuda_version"]
    indices = _indices(len(blocks), header["attached_gpus"], [bus for bus, _ in blocks])
    snap.gpus = [gpu_from_fields(i, bus, fields) for i, (bus, fields) in zip(indices, blocks)]
    if snap.gpus or snap.software.driver_version:
        snap.nvml = NvmlStatus(available=True, attached_gpus=header["attached_gpus"])
    return snap


def import_xml(text: str, origin: str) -> Snapshot:
    import xml.etree.ElementTree as ET
    try:
        header, entries = nvsmi.parse_xml(text)
    except ET.ParseError as exc:
        raise BadInput(f"{origin}: malformed nvidia-smi XML ({exc})") from None
    snap = Snapshot(sources=[origin])
    snap.software.driver_version = header["driver_version"]
    snap.software.cuda_driver_version = header["cuda_version"]
    gpus: List[Gpu] = []
    for index, (bus, fields, element) in enumerate(entries):
        gpu = gpu_from_fields(index, bus, fields)
        mig = element.find("mig_devices")
        if mig is not None and gpu.mig_mode_current:
            gpu.mig_devices = len(mig.findall("mig_device"))
        gpus.append(gpu)
    snap.gpus = gpus
    snap.nvml = NvmlStatus(available=True, attached_gpus=header["attached_gpus"])
    return snap
