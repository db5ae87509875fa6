"""NCCL's RAS service (on by default since NCCL 2.24, every NCCL process of a node listening on localhost:28028, or
NCCL_RAS_ADDR): the client protocol NCCL's own `ncclras` speaks (src/ras/client.cc), and the report it answers, text
(2.24 on) or JSON (2.28.7 on), parsed into typed facts. I/O and parsing only; the report is untrusted text.

The exchange: `CLIENT PROTOCOL 2` -> `SERVER PROTOCOL n`; `TIMEOUT s` -> `OK`; `SET FORMAT json` -> `OK` (an older
server answers `ERROR: Unknown command ...`, and the text form is read instead); `VERBOSE STATUS` -> the report, up
to the server closing the connection."""
from __future__ import annotations

import json
import re
import time
from dataclasses import dataclass, field
from typing import List, Optional

from ..errors import BadInput

DEFAULT_ADDR = "localhost:28028"
MAX_REPORT = 16 << 20
# NCCL 2.28.7-2.28.9 write no comma after "nvml_dev" inside missing_ranks[] (fixed in 2.29.2): a key that follows a
# value on the next line without one gets its comma back (the repair Ray's RAS reader makes)
_MISSING_COMMA = re.compile(r'([\d"el])(\s*\n\s*)("[^"\n]*"\s*:)')


@dataclass
class RasRank:
    rank: Optional[int]
    host: Optional[str] = None
    pid: Optional[int] = None
    gpu: Optional[int] = None
    dead: bool = False                   # unreachable through the RAS network (60 s without an answer)
    operations: Optional[int] = None     # collectives launched (the largest per-type count)


@dataclass
class RasReport:
    """What the RAS service said of the job: ranks missing from a communicator (dead or not answering), and ranks
    behind the others in collective operations."""
    version: Optional[str] = None
    communicators: int = 0
    missing: List[RasRank] = field(default_factory=list)
    behind: List[RasRank] = field(default_factory=list)
    ahead_operations: Optional[int] = None       # where the furthest ranks are
    counts: List[str] = field(default_factory=list)   # "30 ranks have launched up to operation 640", as NCCL said

    def to_dict(self) -> dict:
        import dataclasses
        return dataclasses.asdict(self)


# -- the client ----------------------------------------------------------------------------------------------

def query(addr: str = DEFAULT_ADDR, timeout: float = 5.0) -> RasReport:
    """The RAS report of the job on this node; OSError where no NCCL process listens (no RAS there)."""
    return parse(query_text(addr, timeout))


def query_text(addr: str = DEFAULT_ADDR, timeout: float = 5.0) -> str:
    """The RAS report as the service words it (text, or JSON from NCCL 2.28.7); OSError where nothing answers."""
    import socket       # here: diagnose reads saved reports, and starts faster without it
    host, _, port = addr.rpartition(":")
    deadline = time.monotonic() + timeout + 10
    last: Optional[OSError] = None
    for family, kind, proto, _, address in socket.getaddrinfo(host.strip("[]") or "localhost", int(port),
                                                              type=socket.SOCK_STREAM):
        try:
            with socket.socket(family, kind, proto) as sock:     # localhost may be ::1 first: every address is tried
                sock.settimeout(timeout + 5)
                sock.connect(address)
                return _exchange(sock.makefile("rwb"), timeout, deadline)
        except OSError as exc:
            last = exc
    raise last or OSError(f"nothing answers on {addr}")


def _exchange(stream, timeout: float, deadline: float) -> str:
    def ask(line: str) -> str:
        stream.write(line.encode() + b"\n")
        stream.flush()
        return stream.readline(4096).decode("utf-8", "replace").strip()
    if not ask("CLIENT PROTOCOL 2").upper().startswith("SERVER PROTOCOL "):
        raise OSError("not an NCCL RAS service (no SERVER PROTOCOL answer)")
    ask(f"TIMEOUT {max(1, int(timeout))}")                      # integers: servers before 2.31 take no fraction
    ask("SET FORMAT json")           # before 2.28.7: ERROR: Unknown command, and the text form follows
    stream.write(b"VERBOSE STATUS\n")
    stream.flush()
    chunks, size = [], 0
    while time.monotonic() < deadline:
        chunk = stream.read1(1 << 16) if hasattr(stream, "read1") else stream.read(1 << 16)
        if not chunk:
            break
        size += len(chunk)
        if size > MAX_REPORT:
            raise OSError(f"the RAS report passed {MAX_REPORT >> 20} MiB")
        chunks.append(chunk)
    return b"".join(chunks).decode("utf-8", "replace")     # parse() tells the JSON form from the text one


# -- the report ----------------------------------------------------------------------------------------------

def looks_like_report(head: bytes) -> bool:
    text = head.decode("utf-8", "replace")
    return bool(re.search(r"^NCCL version \S+ compiled with CUDA", text, re.M)) or \
        ('"nccl_version"' in text and '"communicators"' in text)


def parse(text: str) -> RasReport:
    """Either form of the report; BadInput for anything that is not one."""
    if text.lstrip().startswith("{"):
        return parse_json(text)
    if not re.search(r"^NCCL version \S+", text, re.M):
        raise BadInput("not an NCCL RAS report (no 'NCCL version' line, no JSON)")
    return parse_text(text)


def parse_json(text: str) -> RasReport:
    try:
        data = json.loads(text)
    except ValueError:
        try:
            data = json.loads(_MISSING_COMMA.sub(r"\1,\2\3", text))
        except (ValueError, RecursionError) as exc:
            raise BadInput(f"an NCCL RAS report that is not JSON ({str(exc)[:80]})") from None
    if not isinstance(data, dict) or not isinstance(data.get("communicators"), list):
        raise BadInput("communicators: expected the list of an NCCL RAS report")
    report = RasReport(version=str(data.get("nccl_version"))[:20], communicators=len(data["communicators"]))
    for comm in data["communicators"]:
        if not isinstance(comm, dict):
            continue
        for entry in comm.get("missing_ranks") or []:
            report.missing.append(_json_rank(entry, dead=bool((entry.get("status") or {}).get("considered_dead"))))
        ranks = [_json_rank(entry) for entry in comm.get("ranks") or [] if isinstance(entry, dict)]
        _behind(report, ranks)
    return report


def _int(value) -> Optional[int]:
    return value if type(value) is int else None


def _json_rank(entry: dict, dead: bool = False) -> RasRank:
    counts = entry.get("collective_counts") if isinstance(entry.get("collective_counts"), dict) else {}
    ops = [v for v in counts.values() if type(v) is int]
    host = entry.get("host") if isinstance(entry.get("host"), str) else None
    return RasRank(_int(entry.get("rank")), host[:64] if host else None, _int(entry.get("pid")),
                   _int(entry.get("cuda_dev")), dead, sum(ops) if ops else None)


def _behind(report: RasReport, ranks: List[RasRank]) -> None:
    known = [r for r in ranks if r.operations is not None]
    if not known:
        return
    top = max(r.operations for r in known)
    late = [r for r in known if r.operations < top]
    if late:
        report.behind += late
        report.ahead_operations = top


_RANK_LINE = re.compile(r"Rank (\d+) -- GPU (\d+) managed by process (\d+) on node (\S+)")
_PROCESS_LINE = re.compile(r"Process (\d+) on node (\S+) managing GPU (\d+)")
_UP_TO = re.compile(r"(\d+) ranks? ha(?:ve|s) launched up to operation (\d+)")


def parse_text(text: str) -> RasReport:
    """The text report: its Errors (INCOMPLETE and DEAD processes, missing ranks) and Warnings (MISMATCH of
    operation counts: the group NCCL lists is the smaller one, named behind only when it is behind)."""
    version = re.search(r"^NCCL version (\S+)", text, re.M)
    report = RasReport(version=version.group(1) if version else None,
                       communicators=len(re.findall(r"^#\d+-\d+ \(", text, re.M)))
    for block in re.split(r"\n(?=\S)", text):
        head = block.split("\n", 1)[0].strip()
        if head in ("INCOMPLETE", "DEAD"):
            report.missing += [RasRank(None, host, int(pid), int(gpu), dead=head == "DEAD")
                               for pid, host, gpu in _PROCESS_LINE.findall(block)]
        elif head.startswith("#") and "INCOMPLETE" in head:
            report.missing += [RasRank(int(r)) for r in re.findall(r"The missing rank: (\d+)", block)]
            report.missing += [RasRank(int(r), host, int(pid), int(gpu))
                               for r, gpu, pid, host in _RANK_LINE.findall(block)]
        elif head.startswith("#") and "MISMATCH" in head:
            _text_mismatch(report, block)
    return report


def _text_mismatch(report: RasReport, block: str) -> None:
    groups = [(int(n), int(op)) for n, op in _UP_TO.findall(block)]
    report.counts += [m.group(0) for m in _UP_TO.finditer(block)]
    if len(groups) < 2:
        return
    listed = [RasRank(int(r), host, int(pid), int(gpu)) for r, gpu, pid, host in _RANK_LINE.findall(block)]
    smaller = min(groups)                      # NCCL lists the ranks of the smaller group
    top = max(op for _, op in groups)
    report.ahead_operations = top
    if smaller[1] < top:                       # the listed ranks are behind: named
        for rank in listed:
            rank.operations = smaller[1]
        report.behind += listed
