"""Read captures someone pasted (nvidia-smi, topo -m, numactl, lscpu, kernel logs, snapshots)
into one snapshot. Each file's kind is sniffed from its content, never from its name."""
from __future__ import annotations

import os
from typing import Callable, Iterable, List, Optional, Tuple

from ..errors import BadInput
from ..snapshot import Snapshot, merge
from . import hostinfo, kernel_log, nvsmi_query, nvsmi_table, topo

Importer = Callable[[str, str], Snapshot]


def _snapshot_json(text: str, origin: str) -> Snapshot:
    return Snapshot.from_json(text, origin)


# Order matters: the most specific signatures first.
KINDS: List[Tuple[str, Callable[[str], bool], Importer]] = [
    ("snapshot", lambda t: t.lstrip().startswith("{"), _snapshot_json),
    ("nvidia-smi -q -x", nvsmi_query.looks_like_xml, nvsmi_query.import_xml),
    ("nvidia-smi -q", nvsmi_query.looks_like_text, nvsmi_query.import_text),
    ("nvidia-smi error", nvsmi_table.looks_like_failure, nvsmi_table.import_failure),
    ("nvidia-smi", nvsmi_table.looks_like_table, nvsmi_table.import_table),
    ("nvidia-smi topo -m", topo.looks_like_topo, topo.import_topology),
    ("nvidia-smi nvlink --status", hostinfo.looks_like_nvlink, hostinfo.import_nvlink),
    ("numactl -H", hostinfo.looks_like_numactl, hostinfo.import_numactl),
    ("lscpu", hostinfo.looks_like_lscpu, hostinfo.import_lscpu),
    ("nvidia-container-toolkit --version", hostinfo.looks_like_ctk_version, hostinfo.import_ctk_version),
    ("kernel log", kernel_log.looks_like_kernel_log, kernel_log.import_kernel_log),
]


def sniff(text: str) -> Optional[str]:
    for kind, test, _ in KINDS:
        if test(text):
            return kind
    return None


def import_text(text: str, origin: str) -> Snapshot:
    for kind, test, importer in KINDS:
        if test(text):
            try:
                return importer(text, origin)
            except BadInput:
                raise
            except Exception as exc:  # a capture we recognised but could not read
                raise BadInput(f"{origin}: looks like {kind} output but could not be read "
                               f"({type(exc).__name__}: {exc})") from None
    raise BadInput(f"{origin}: unrecognised file (expected nvidia-smi, nvidia-smi -q [-x], "
                   f"topo -m, nvlink --status, numactl -H, lscpu, a kernel log or a gpuprep snapshot)")


def read_capture(path: str) -> str:
    try:
        with open(path, "rb") as fh:
            data = fh.read()
    except OSError as exc:
        raise BadInput(f"{path}: cannot read ({exc.strerror or exc})") from None
    if b"\x00" in data[:4096]:
        raise BadInput(f"{path}: binary file, not a capture")
    return data.decode("utf-8", errors="replace")


def import_files(paths: Iterable[str]) -> Snapshot:
    combined: Optional[Snapshot] = None
    for path in paths:
        part = import_text(read_capture(path), os.path.basename(path))
        combined = part if combined is None else merge(combined, part)
    if combined is None:
        raise BadInput("no capture files given")
    return combined
