"""`nvidia-smi -q` (text, also `-a` and `-q -d SECTION`) and `nvidia-smi -q -x` (XML) importers: the
parsing is gpuprep's one nvidia-smi parser (module_utils/gpuprep_nvsmi.py, shared with the roles' facts
module); this module only turns its fields into the snapshot's GPUs."""
from __future__ import annotations

import re
from typing import Dict, List, Optional

from ..errors import BadInput
from ..module_utils import gpuprep_nvsmi as nvsmi
from ..snapshot import ClockPair, Gpu, NvmlStatus, Snapshot


def gpu_from_fields(index: int, bus_id: Optional[str], fields: Dict[str, object]) -> Gpu:
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


def looks_like_xml(text: str) -> bool:
    return "<nvidia_smi_log" in text[:2000]


def import_text(text: str, origin: str) -> Snapshot:
    header, blocks = nvsmi.parse_text(text)
    snap = Snapshot(sources=[origin])
    snap.software.driver_version = header["driver_version"]
    snap.software.cuda_driver_version = header["cuda_version"]
    snap.gpus = [gpu_from_fields(i, bus, fields) for i, (bus, fields) in enumerate(blocks)]
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
