"""Plain `nvidia-smi` output: the summary table (old and 2024+ layouts) and its error messages."""
from __future__ import annotations

import re
from typing import List, Optional

from ..snapshot import Gpu, NvmlStatus, Snapshot
from . import values as v

# driver 610 renames the header's fields: "NVIDIA-SMI 610.57.04  KMD Version: 610.57.04  CUDA UMD Version: 13.3"
_HEADER = re.compile(r"NVIDIA-SMI\s+(\S+)\s+(?:Driver|KMD) Version:\s+(\S+)\s+CUDA (?:UMD )?Version:\s+(\S+)")
_ROW1 = re.compile(
    r"^\|\s+(\d+)\s+(.+?)\s+(On|Off|ERR!|N/A)\s*\|\s*([0-9A-Fa-f]{4,8}:[0-9A-Fa-f]{2}:[0-9A-Fa-f]{2}\.[0-9A-Fa-f])"
    r"\s+(\S+)\s*\|\s*(.*?)\s*\|\s*$")
_ROW2 = re.compile(
    r"^\|\s*(\S+)\s+(\S+)\s+(\S+)\s+(\S+)\s*/\s*(\S+)\s*\|\s*(\S+)\s*/\s*(\S+)\s*\|\s*(\S+)\s+(\S+)\s*\|\s*$")
_ROW3 = re.compile(r"^\|\s*\|\s*\|\s*(\S+)\s*\|\s*$")
_ROW1_CELLS = (None, "name", "persistence mode", "bus id", "display active", "volatile uncorrected ECC")
_ROW2_CELLS = ("fan", "temperature", "performance state", "power draw", "power limit", "memory used",
               "memory total", "utilization", "compute mode")
ERR = "ERR!"
_PROCESSES = re.compile(r"^\|\s*Processes:", re.M)

# What nvidia-smi prints when NVML cannot start, mapped to gpuprep's reason codes.
_FAILURES = [
    (re.compile(r"Failed to initialize NVML: Driver/library version mismatch"), "version-mismatch"),
    (re.compile(r"Failed to initialize NVML: Insufficient Permissions"), "no-permission"),
    (re.compile(r"Failed to initialize NVML: Unknown Error"), "error"),
    # nvidia-smi is installed (it printed this): the driver is not loaded or does not answer
    (re.compile(r"couldn't communicate with the NVIDIA driver"), "driver-not-loaded"),
    (re.compile(r"NVML Shared Library Not Found|libnvidia-ml\.so.*not found", re.I), "library-not-found"),
    (re.compile(r"^No devices were found\s*$", re.M), "no-devices"),
]
_NVML_LIB = re.compile(r"NVML library version:\s*(\S+)")
# one GPU nvidia-smi could not open: "...for GPU0000:03:00.0: Unknown Error", "...for GPU 0000:02:00.0: GPU is lost..."
_HANDLE = re.compile(r"Unable to determine the device handle for (?:GPU|gpu)\s*"
                     r"([0-9A-Fa-f]{4,8}:[0-9A-Fa-f]{2}:[0-9A-Fa-f]{2}\.[0-9A-Fa-f]):\s*(.+?)\s*$", re.M)


def looks_like_table(text: str) -> bool:
    head = text[:3000]
    return bool(_HEADER.search(head)) or any(_ROW1.match(line.rstrip()) for line in head.splitlines())


def looks_like_failure(text: str) -> bool:
    head = text[:2000]
    return bool(_HANDLE.search(head)) or any(pattern.search(head) for pattern, _ in _FAILURES)


def import_failure(text: str, origin: str) -> Snapshot:
    """nvidia-smi's failure messages, and the table that may follow them (the GPUs it could open)."""
    snap = import_table(text, origin) if looks_like_table(text) else Snapshot(sources=[origin])
    for pattern, reason in _FAILURES:
        match = pattern.search(text)
        if match:
            line = next(l for l in text.splitlines() if pattern.search(l)).strip()
            lib = _NVML_LIB.search(text)
            snap.nvml = NvmlStatus(available=False, reason=reason, message=line,
                                   library_version=lib.group(1) if lib else None)
            break
    lost = [Gpu(index=None, pci_bus_id=m.group(1), failure=f"nvidia-smi cannot open it: {m.group(2)}")
            for m in _HANDLE.finditer(text)]
    if lost:
        snap.gpus = (snap.gpus or []) + lost
        if snap.nvml.available is None or snap.nvml.reason == "no-devices":
            snap.nvml.available = True         # NVML started; these GPUs did not answer it
    return snap


def _unreadable(names, values) -> List[str]:
    return [f"{name} = {ERR}" for name, value in zip(names, values) if name and value == ERR]


_COMPUTE_MODES = {"Default": "Default", "E.Process": "Exclusive_Process", "E.Thread": "Exclusive_Thread",
                  "Prohibited": "Prohibited"}


def _first_row(row1) -> Gpu:
    gpu = Gpu(index=int(row1.group(1)))
    name = row1.group(2).strip()
    # old layouts truncate long names with '...': keep what is certain, nothing more
    gpu.name = None if name == ERR else name
    gpu.persistence_mode = v.flag(row1.group(3))
    gpu.pci_bus_id = row1.group(4)
    ecc = row1.group(6).strip()
    if ecc in ("On", "Off"):
        gpu.ecc_mode_current = ecc == "On"
    elif v.integer(ecc) is not None:
        gpu.ecc_mode_current = True
        gpu.ecc_volatile_uncorrected = v.integer(ecc)
    gpu.unreadable = _unreadable(_ROW1_CELLS, row1.groups()) or None
    return gpu


def _second_row(gpu: Gpu, row2) -> None:
    gpu.temperature_c = v.integer(row2.group(2).rstrip("C"))
    gpu.power_draw_w = v.number(row2.group(4).rstrip("W"))
    gpu.power_limit_w = v.number(row2.group(5).rstrip("W"))
    gpu.memory_total_mib = v.integer(row2.group(7).replace("MiB", ""))
    mode = row2.group(9)
    gpu.compute_mode = _COMPUTE_MODES.get(mode, v.known(mode))
    gpu.unreadable = (gpu.unreadable or []) + _unreadable(_ROW2_CELLS, row2.groups()) or None


def _third_row(gpu: Gpu, row3) -> None:
    gpu.mig_mode_current = v.flag(row3.group(1))
    if row3.group(1) == ERR:
        gpu.unreadable = (gpu.unreadable or []) + [f"MIG mode = {ERR}"]


def _gpu_rows(lines: List[str]) -> List[Gpu]:
    """Each GPU's block of rows: the first starts a GPU, the second and third fill it in (once each)."""
    gpus: List[Gpu] = []
    current: Optional[Gpu] = None
    for line in lines:
        if line.startswith("| Processes"):
            break
        row1 = _ROW1.match(line)
        if row1:
            current = _first_row(row1)
            gpus.append(current)
            continue
        if current is None:
            continue
        row2 = _ROW2.match(line)
        if row2 and current.temperature_c is None and current.memory_total_mib is None:
            _second_row(current, row2)
            continue
        row3 = _ROW3.match(line)
        if row3 and current.mig_mode_current is None:
            _third_row(current, row3)
    return gpus


def _cut_short(text: str, has_header: bool, gpus: List[Gpu]) -> Optional[str]:
    """How a table was cut, or None. nvidia-smi prints "No devices were found" when there are none; each GPU is
    three rows; the Processes table, where it was pasted, ends with a border line."""
    if has_header and not gpus:
        return "ends before its GPU rows"
    if gpus and gpus[-1].temperature_c is None and gpus[-1].memory_total_mib is None and \
            not any(u.startswith(("temperature", "memory")) for u in gpus[-1].unreadable or []):
        return "ends inside its last GPU's rows"
    if len(gpus) > 1 and gpus[0].mig_mode_current is not None and gpus[-1].mig_mode_current is None and \
            f"MIG mode = {ERR}" not in (gpus[-1].unreadable or []):
        return "ends before its last GPU's third row"      # tables with a MIG M. column give it to every GPU
    processes = _PROCESSES.search(text)
    if processes:
        last = [line for line in text[processes.start():].splitlines() if line.strip()][-1].strip()
        if not re.fullmatch(r"\+-+\+", last):
            return "ends inside its Processes table"
    return None


def import_table(text: str, origin: str) -> Snapshot:
    """The table, with or without its header (a pasted part of it); ERR! in a cell is the GPU failing to
    report that value."""
    snap = Snapshot(sources=[origin])
    header = _HEADER.search(text)
    if header:
        snap.software.driver_version = header.group(2)
        snap.software.cuda_driver_version = v.known(header.group(3))
        snap.nvml = NvmlStatus(available=True)
    gpus = _gpu_rows([line.rstrip() for line in text.splitlines()])
    problem = _cut_short(text, header is not None, gpus)
    if problem:
        # judging a cut table would pass a host whose GPUs (or some of them) nobody saw
        from ..errors import BadInput
        raise BadInput(f"{origin}: the nvidia-smi table {problem} (cut short?); capture it whole")
    snap.gpus = gpus
    return snap
