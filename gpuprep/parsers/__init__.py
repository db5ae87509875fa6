"""Read captures someone pasted (nvidia-smi, topo -m, numactl, lscpu, kernel logs, snapshots)
into one snapshot. Each file's kind is sniffed from its content, never from its name."""
from __future__ import annotations

import functools
import os
from typing import TYPE_CHECKING, Callable, Iterable, List, Optional, Tuple

from ..errors import BadInput

if TYPE_CHECKING:       # imported where used: the job rules import parsers.nvsmi's constants, and no snapshot
    from ..snapshot import Snapshot

Importer = Callable[[str, str], "Snapshot"]


def _snapshot_json(text: str, origin: str) -> Snapshot:
    from ..snapshot import Snapshot
    return Snapshot.from_json(text, origin)


@functools.lru_cache(maxsize=None)
def kinds() -> List[Tuple[str, Callable[[str], bool], Importer]]:
    """Each capture kind: its name, the test of its text, its importer. Order matters: the most specific signatures
    first. Built on first use, so that a module importing one parser's constants (the job rules) loads no other."""
    from . import dcgm, fabricmanager, hostinfo, imex, kernel_log, lspci, nvsmi_query, nvsmi_table, rdma, sshd, topo
    return [
        ("dcgmi diag -j", dcgm.looks_like_diag_json, dcgm.import_diag_json),
        ("dcgmi health -j", dcgm.looks_like_health_json, dcgm.import_health_json),
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
        ("dcgmi diag", dcgm.looks_like_diag_table, dcgm.import_diag_table),
        ("dcgmi health", dcgm.looks_like_health_table, dcgm.import_health_table),
        # before Fabric Manager: IMEX writes its log lines in the same format
        ("nvidia-imex-ctl, or IMEX status or log", imex.looks_like_imex, imex.import_imex),
        ("Fabric Manager status or log", fabricmanager.looks_like_fabric_manager, fabricmanager.import_fabric_manager),
        ("kernel log", kernel_log.looks_like_kernel_log, kernel_log.import_kernel_log),
        ("sshd -T", sshd.looks_like_sshd_t, sshd.import_sshd_t),
        ("lspci -vvv", lspci.looks_like_lspci_vvv, lspci.import_lspci),
        ("lspci", lspci.looks_like_lspci, lspci.import_lspci),
        ("ibstat", rdma.looks_like_ibstat, rdma.import_ibstat),
        ("ibstatus", rdma.looks_like_ibstatus, rdma.import_ibstatus),
        ("ibv_devinfo", rdma.looks_like_ibv_devinfo, rdma.import_ibv_devinfo),
        ("ibdev2netdev", rdma.looks_like_ibdev2netdev, rdma.import_ibdev2netdev),
        ("nvidia-smi -q excerpt", nvsmi_query.looks_like_excerpt, nvsmi_query.import_text),
    ]


def sniff(text: str) -> Optional[str]:
    for kind, test, _ in kinds():
        if test(text):
            return kind
    return None


def import_text(text: str, origin: str) -> Snapshot:
    from ..snapshot import out_of_range
    for kind, test, importer in kinds():
        if test(text):
            try:
                snap = importer(text, origin)
            except BadInput:
                raise
            except Exception as exc:  # a capture we recognised but could not read
                raise BadInput(f"{origin}: looks like {kind} output but could not be read "
                               f"({type(exc).__name__}: {exc})") from None
            problem = out_of_range(snap)
            if problem:
                raise BadInput(f"{origin}: impossible value in {kind}: {problem}")
            return snap
    raise BadInput(f"{origin}: unrecognised file (expected nvidia-smi, nvidia-smi -q [-x], "
                   f"topo -m, nvlink --status, numactl -H, lscpu, lspci, a kernel log, ibstat, ibv_devinfo, ibdev2netdev, "
                   f"dcgmi, Fabric Manager or IMEX status "
                   f"or a gpuprep snapshot)")


MAX_CAPTURE_BYTES = 64 << 20     # far above any real capture (an 8-GPU `-q -x` is ~1 MiB); bounds a wrong file


def read_capture(path: str) -> str:
    """A capture's text: a regular file (or '-' for stdin) of at most MAX_CAPTURE_BYTES, decoded from UTF-8 or,
    with a byte-order mark, UTF-16/UTF-32 (as Windows tools save them), line ends made '\\n'."""
    import stat
    import sys
    if path == "-":
        data = sys.stdin.buffer.read(MAX_CAPTURE_BYTES + 1)
    else:
        try:
            info = os.stat(path)
        except OSError as exc:
            raise BadInput(f"{path}: cannot read ({exc.strerror or exc})") from None
        if not stat.S_ISREG(info.st_mode):
            kind = "a directory" if stat.S_ISDIR(info.st_mode) else "not a regular file (a pipe, device or socket)"
            raise BadInput(f"{path}: {kind}; give a capture file, or - for standard input")
        try:
            with open(path, "rb") as fh:
                data = fh.read(MAX_CAPTURE_BYTES + 1)
        except OSError as exc:
            raise BadInput(f"{path}: cannot read ({exc.strerror or exc})") from None
        from ..output import note_input
        note_input(path)
    if len(data) > MAX_CAPTURE_BYTES:
        raise BadInput(f"{path}: larger than {MAX_CAPTURE_BYTES >> 20} MiB, not a capture")
    return decode_capture(data, path)


_BOMS = ((b"\xff\xfe\x00\x00", "utf-32-le"), (b"\x00\x00\xfe\xff", "utf-32-be"), (b"\xef\xbb\xbf", "utf-8-sig"),
         (b"\xff\xfe", "utf-16-le"), (b"\xfe\xff", "utf-16-be"))


def decode_capture(data: bytes, path: str) -> str:
    encoding = next((name for bom, name in _BOMS if data.startswith(bom)), None)
    if encoding is None and len(data) >= 4 and data[1:4:2] == b"\x00\x00" and data[0:4:2] != b"\x00\x00":
        encoding = "utf-16-le"               # UTF-16 without a mark: every second byte of ASCII text is zero
    if encoding:
        text = data.decode(encoding, errors="replace")
        if encoding.startswith(("utf-16", "utf-32")):
            text = text.lstrip("\ufeff")
    elif b"\x00" in data[:4096]:
        raise BadInput(f"{path}: binary file, not a capture")
    else:
        text = data.decode("utf-8", errors="replace")
    return text.replace("\r\n", "\n").replace("\r", "\n")


def import_files(paths: Iterable[str], allow_mixed: bool = False) -> Snapshot:
    """One host's snapshot from its captures. The same content given twice counts once; captures that cannot
    be one host's (see snapshot.mixed_hosts) are refused unless allow_mixed."""
    import hashlib
    from ..snapshot import mixed_hosts
    combined: Optional[Snapshot] = None
    seen = set()
    for path in paths:
        log = _large_log(path)
        if log is not None:
            combined = _merged(combined, log)
            continue
        text = read_capture(path)
        digest = hashlib.sha256(text.encode("utf-8", "surrogatepass")).digest()
        if digest in seen:
            continue
        seen.add(digest)
        part = import_text(text, os.path.basename(path))
        if combined is not None and not allow_mixed:
            reason = mixed_hosts(combined, part)
            if reason:
                raise BadInput(f"{path}: not the same host as {', '.join(combined.sources)}: {reason} "
                               f"(--allow-mixed judges them as one host anyway)")
        combined = _merged(combined, part)
    if combined is None:
        raise BadInput("no capture files given")
    return combined


def _merged(combined: Optional[Snapshot], part: Snapshot) -> Snapshot:
    from ..snapshot import merge
    return part if combined is None else merge(combined, part)


FABRIC_LOG_TAIL = 16 << 20


def _head_and_tail(fh, head: str, size: int) -> str:
    """A large log's first lines and its last FABRIC_LOG_TAIL bytes, from a line's start: bounded memory, and the
    end (what the service says now) is never cut off."""
    fh.buffer.seek(max(0, size - FABRIC_LOG_TAIL))
    tail = fh.buffer.read(FABRIC_LOG_TAIL).decode("utf-8", errors="replace")
    return head[:head.rfind("\n") + 1] + tail[tail.find("\n") + 1:]


def _large_log(path: str) -> Optional[Snapshot]:
    """A kernel log above the capture size limit (busy nodes log hundreds of megabytes): only its GPU lines,
    read line by line; a Fabric Manager log: its start and its end. None for anything else, which read_capture then
    bounds as usual."""
    import stat
    from ..output import note_input
    from . import fabricmanager, kernel_log
    try:
        info = os.stat(path)
    except OSError:
        return None
    if path == "-" or not stat.S_ISREG(info.st_mode) or info.st_size <= MAX_CAPTURE_BYTES:
        return None
    try:
        with open(path, encoding="utf-8", errors="replace", newline=None) as fh:
            head = fh.read(1 << 16)
            # a Fabric Manager log is time-stamped too, but its errors are not kernel GPU lines: it is read from its
            # start (the version, the NVSwitches configured) and its end (the state now, the last errors)
            if fabricmanager.looks_like_fabric_manager(head):
                text = _head_and_tail(fh, head, info.st_size)
                note_input(path)
                return fabricmanager.import_fabric_manager(text, os.path.basename(path))
            if not kernel_log.looks_like_log_lines(head):
                return None
            fh.seek(0)
            kept, size = [], 0
            for line in kernel_log.relevant_lines(fh):
                size += len(line)
                if size > MAX_CAPTURE_BYTES:
                    raise BadInput(f"{path}: more than {MAX_CAPTURE_BYTES >> 20} MiB of GPU lines in one kernel log")
                kept.append(line)
    except OSError as exc:
        raise BadInput(f"{path}: cannot read ({exc.strerror or exc})") from None
    note_input(path)
    return kernel_log.import_kernel_log("".join(kept), os.path.basename(path))
