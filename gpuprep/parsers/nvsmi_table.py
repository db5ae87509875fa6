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
ERR = "ERR!"
# drivers before 410 print no CUDA version: "NVIDIA-SMI 375.66                 Driver Version: 375.66"
_OLD_HEADER = re.compile(r"NVIDIA-SMI\s+(\S+)\s+Driver Version:\s+(\S+)")
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
# driver 610 names the index first: "...for GPU1: 0000:34:00.0: Unknown Error"
_HANDLE = re.compile(r"Unable to determine the device handle for (?:GPU|gpu)\s*(?:\d+:\s*)?"
                     r"([0-9A-Fa-f]{4,8}:[0-9A-Fa-f]{2}:[0-9A-Fa-f]{2}\.[0-9A-Fa-f]):\s*(.+?)\s*$", re.M)


def looks_like_table(text: str) -> bool:
    head = text[:3000]
    return bool(_HEADER.search(head) or _OLD_HEADER.search(head)) or any(
        _ROW1.match(line.rstrip().lstrip("# \t")) for line in head.splitlines())


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


_COMPUTE_MODES = {"Default": "Default", "E.Process": "Exclusive_Process", "E.Thread": "Exclusive_Thread",
                  "Prohibited": "Prohibited"}
_BUS = re.compile(r"^([0-9A-Fa-f]{4,8}:[0-9A-Fa-f]{2}:[0-9A-Fa-f]{2}\.[0-9A-Fa-f])\b")
_FIRST = re.compile(r"^(\d+)\s+(.+?)\s+(\S+)$")        # "0  NVIDIA GB10                    On"
_BORDER = re.compile(r"^[+|][-=+|]+[+|]$")                  # +---+---+ and |---+---| and |===+===|
# what a cell may hold that says "no value" rather than "could not read": never an unreadable field
_NO_VALUE = {"n/a", "not supported", "[n/a]", "-", ""}


class _Cells:
    """One GPU's rows, cell by cell ("|a|b|c|" -> [a, b, c]); a value nvidia-smi could not read (ERR!) or a cell
    this parser does not understand becomes an unreadable field of that GPU, never a refusal of the capture."""

    def __init__(self, rows: List[str]):
        self.rows = [[cell.strip() for cell in row.strip().strip("|").split("|")] for row in rows]
        self.unreadable: List[str] = []

    def cell(self, row: int, column: int) -> str:
        cells = self.rows[row] if row < len(self.rows) else []
        return cells[column] if column < len(cells) else ""

    def value(self, field: str, text: str, parse):
        """`parse(text)` (None where nvidia-smi printed no value); ERR! or an unparsable text is noted."""
        if text.lower() in _NO_VALUE:
            return None
        if text == ERR:
            self.unreadable.append(f"{field} = {ERR}")
            return None
        try:
            parsed = parse(text)
        except ValueError:
            parsed = None
        if parsed is None:
            self.unreadable.append(f"{field} = {text[:40]}")
        return parsed


def _words(text: str, count: int) -> List[str]:
    """The cell's words, padded to `count` (a short cell is missing values, not shifted ones)."""
    words = text.split()
    return (words + [""] * count)[:count] if len(words) <= count else words


def _slash(text: str):
    """'105W /  N/A' -> ('105W', 'N/A'); '2667MiB / 24564MiB' -> both sides. The separator has spaces around it;
    the slash of N/A has none."""
    parts = re.split(r"\s+/\s+", text.strip(), maxsplit=1)
    if len(parts) != 2:
        raise ValueError(text)
    return parts[0], parts[1]


def _gpu(cells: _Cells) -> Optional[Gpu]:
    first = _FIRST.match(cells.cell(0, 0))
    bus = _BUS.match(cells.cell(0, 1))
    if not first or not bus:
        return None
    gpu = Gpu(index=int(first.group(1)), pci_bus_id=bus.group(1))
    name = first.group(2).strip()
    gpu.name = None if name == ERR else name          # old layouts cut long names with '...': kept as printed
    gpu.persistence_mode = cells.value("persistence mode", first.group(3), _on_off)
    _ecc(gpu, cells, cells.cell(0, 2))
    _second_row(gpu, cells)
    mig = cells.cell(2, 2)
    if mig:
        pending = mig.endswith("*")          # "Disabled*": the mode after the next reset
        mode = cells.value("MIG mode", mig.rstrip("*"), _mode)
        if pending and mode is not None:
            gpu.mig_mode_pending, gpu.mig_mode_current = mode, not mode
        else:
            gpu.mig_mode_current = mode
    gpu.unreadable = cells.unreadable or None
    return gpu


def _on_off(text: str) -> Optional[bool]:
    value = v.flag(text)
    if value is None:
        raise ValueError(text)
    return value


def _mode(text: str) -> Optional[bool]:
    return _on_off(text)


def _ecc(gpu: Gpu, cells: _Cells, text: str) -> None:
    if text in ("On", "Off"):
        gpu.ecc_mode_current = text == "On"
        return
    count = cells.value("volatile uncorrected ECC", text, lambda t: int(t) if t.isdigit() else None)
    if count is not None:
        gpu.ecc_mode_current, gpu.ecc_volatile_uncorrected = True, count


def _second_row(gpu: Gpu, cells: _Cells) -> None:
    head, power = _split_power(cells.cell(1, 0))
    fan, temp, perf = _words(head, 3)[:3]
    cells.value("fan", fan, lambda t: v.integer(t.rstrip("%")))
    gpu.temperature_c = cells.value("temperature", temp, lambda t: v.integer(t.rstrip("C")))
    cells.value("performance state", perf, lambda t: t if re.fullmatch(r"P\d{1,2}", t) else None)
    if power:
        draw, limit = _slash(power)
        gpu.power_draw_w = cells.value("power draw", draw, lambda t: v.number(t.rstrip("W")))
        gpu.power_limit_w = cells.value("power limit", limit, lambda t: v.number(t.rstrip("W")))
    memory = cells.cell(1, 1)
    if re.search(r"\s/\s", memory):
        gpu.memory_total_mib = cells.value("memory total", _slash(memory)[1], lambda t: v.integer(t.replace("MiB", "")))
    else:
        cells.value("memory usage", memory, lambda t: None)
    util, *rest = _words(cells.cell(1, 2), 2)
    cells.value("utilization", util, lambda t: v.integer(t.rstrip("%")))
    if rest and rest[-1]:
        gpu.compute_mode = cells.value("compute mode", rest[-1], _COMPUTE_MODES.get)


def _split_power(text: str):
    """'N/A   74C    P0            105W /  N/A' -> ('N/A   74C    P0', '105W /  N/A'); no slash: no power cell."""
    match = re.match(r"^(.*?)\s*(\S+\s+/\s+\S+)$", text)
    return (match.group(1), match.group(2)) if match else (text, "")


def _strip_prefix(lines: List[str]) -> List[str]:
    """A paste's common prefix before the table's top border ('# ', an indent) is not part of the table."""
    top = next((line for line in lines if line.lstrip("# \t").startswith("+--")), None)
    if top is None:
        return lines
    prefix = top[:len(top) - len(top.lstrip("# \t"))]
    return [line[len(prefix):] if prefix and line.startswith(prefix) else line for line in lines]


def _blocks(lines: List[str]):
    """(GPU blocks, how the GPU section is cut or None): the rows between the header's ===== line and the
    section's closing border, split at each border line."""
    start = next((i for i, line in enumerate(lines) if line.startswith("|=") and "+" in line[1:-1]), None)
    if start is None:
        start = next((i for i, line in enumerate(lines) if line.startswith("|=") or _BORDER.match(line)), None)
    if start is None:
        return [], None
    blocks, current = [], []
    for line in lines[start + 1:]:
        if _BORDER.match(line):
            if current:
                blocks.append(current)
            current = []
            continue
        if not line.startswith("|"):
            break
        current.append(line)
    else:
        if current:
            return blocks + [current], "ends inside its last GPU's rows"
    if current:
        return blocks + [current], "ends inside its last GPU's rows"
    return blocks, None


def _gpu_rows(lines: List[str]) -> List[Gpu]:
    return [gpu for gpu in (_gpu(_Cells(block)) for block in _blocks(lines)[0]) if gpu]


def _closed(text: str, title: str) -> bool:
    """A sub-table (Processes, MIG devices) that starts ends with its border line."""
    match = re.search(r"^\s*\|\s*" + title, text, re.M)
    if not match:
        return True
    rest = text[match.start():].splitlines()
    rows = []
    for line in rest:
        if not line.strip():
            break
        rows.append(line.strip())
    return bool(rows) and bool(re.fullmatch(r"\+-+(\+-+)*\+", rows[-1]))


def _cut_short(text: str, lines: List[str], has_header: bool) -> Optional[str]:
    """How a table was cut, or None: only structure counts (a section without its closing border, a header
    without its GPU section), never a row this parser does not understand."""
    blocks, cut = _blocks(lines)
    if has_header and not blocks and not cut:
        return "ends before its GPU rows"
    if cut:
        return cut
    rows = {len(block) for block in blocks}
    if len(blocks) > 1 and len(rows) > 1 and len(blocks[-1]) < max(rows):
        return "ends inside its last GPU's rows"
    for title in ("Processes:", "MIG devices:"):
        if not _closed(text, title):
            return f"ends inside its {title[:-1]} table"
    return None


def import_table(text: str, origin: str) -> Snapshot:
    """The table, with or without its header (a pasted part of it); ERR! in a cell is the GPU failing to
    report that value."""
    snap = Snapshot(sources=[origin])
    lines = _strip_prefix([line.rstrip() for line in text.splitlines()])
    header = _HEADER.search(text) or _OLD_HEADER.search(text)
    if header:
        snap.software.driver_version = header.group(2)
        snap.software.cuda_driver_version = v.known(header.group(3)) if header.lastindex >= 3 else None
        snap.nvml = NvmlStatus(available=True)
    problem = _cut_short("\n".join(lines), lines, header is not None)
    snap.gpus = _gpu_rows(lines)
    if problem and not snap.gpus:
        from ..errors import BadInput       # nothing left to judge: a structural cut, refused
        raise BadInput(f"{origin}: the nvidia-smi table {problem} (cut short?); capture it whole")
    if problem:
        # what it shows is judged (an ERR! seen is a failure seen); gpu.capture-incomplete says the rest is unknown
        snap.incomplete = [f"{origin}: the nvidia-smi table {problem}"]
    return snap
