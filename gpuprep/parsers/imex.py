"""NVIDIA IMEX from captures and the live probe: `nvidia-imex-ctl -N [-H]` (the domain, each node and the connection
table), `nvidia-imex-ctl -q` (the local daemon's state, or its error), `systemctl status nvidia-imex`, and
/var/log/nvidia-imex.log. Formats as IMEX 570-580 print them (tests/corpus/imex, provenance in its PROVENANCE.tsv)."""
from __future__ import annotations

import re
from typing import List, Optional

from ..snapshot import Imex, ImexNode, Snapshot

# "Node #0   - 172.31.48.81    - READY                - Version: 570.172"; the local node is "* 10.66.6.9 *";
# `-H` adds "- Hostname: theia0271"; an unavailable node's version is empty
_NODE = re.compile(r"^Node #(\d+)\s+(?:-\s+(\S+)|\*\s+(\S+)\s+\*)\s+-\s+([A-Z_]+)"
                   r"(?:\s+-\s+Version:[ \t]*([0-9][\w.]*)?)?", re.M)
_TABLE_HEAD = re.compile(r"^\s*Nodes From\\To((?:\s+\d+)+)\s*$", re.M)
_CELL = re.compile(r"!V!|!M!|[CINRDA]")
_DOMAIN = re.compile(r"^Domain State:\s*([A-Z]+)", re.M)
# the daemon's states (`nvidia-imex-ctl -q` prints one), as NVIDIA's DCGM names them
STATES = ("INITIALIZING", "STARTING_AUTH_SERVER", "WAITING_FOR_PEERS", "WAITING_FOR_RECOVERY", "INIT_GPU", "READY",
          "SHUTTING_DOWN", "UNAVAILABLE")
_QUERY_ERROR = re.compile(r"Query Status returned error code: .*")
_UNIT = re.compile(r"nvidia-imex\.service")
_ACTIVE = re.compile(r"^\s*Active:\s+(\w+)", re.M)
_LOG_LINE = re.compile(r"^\[\w{3} \d{1,2} \d{4} [\d:]{8}\] \[(?:INFO|ERROR|WARNING|FATAL)\] \[tid \d+\]", re.M)
_LOG_ERROR = re.compile(r"^\[[^]]+\] \[(?:ERROR|FATAL)\] \[tid \d+\] .*$", re.M)
_MAX_ERRORS = 20


def looks_like_imex(text: str) -> bool:
    head = text[:20000]
    if _TABLE_HEAD.search(head) or _DOMAIN.search(head) or _NODE.search(head) or _QUERY_ERROR.search(head):
        return True
    if text.strip() in STATES:
        return True                   # `nvidia-imex-ctl -q`: one word
    if _UNIT.search(head) and _ACTIVE.search(head):
        return True
    return bool(_LOG_LINE.search(head)) and bool(re.search(r"\bIMEX\b|nvidia-imex", head))


def _table(text: str) -> Optional[List[str]]:
    """The connections that are not Connected, as "from->to LETTER", or None without a table."""
    head = _TABLE_HEAD.search(text)
    if not head:
        return None
    columns = head.group(1).split()
    bad = []
    for line in text[head.end():].splitlines():
        fields = line.split()
        if not fields or not fields[0].isdigit():
            if fields:
                break                 # "Domain State: ..." ends the table
            continue
        cells = _CELL.findall(" ".join(fields[1:]))
        bad += [f"{fields[0]}->{to} {cell}" for to, cell in zip(columns, cells) if cell != "C"]
        if len(cells) < len(columns):
            bad.append(f"{fields[0]}: {len(cells)} of {len(columns)} connections shown")
    return bad


def read_imex(text: str) -> Imex:
    imex = Imex()
    nodes = [ImexNode(index=int(m.group(1)), address=m.group(2) or m.group(3), status=m.group(4),
                      version=m.group(5) or None, local=bool(m.group(3)) or None) for m in _NODE.finditer(text)]
    imex.nodes = nodes or None
    imex.links = _table(text)
    domain = _DOMAIN.search(text)
    imex.domain = domain.group(1) if domain else None
    query = _QUERY_ERROR.search(text)
    imex.query = query.group(0).strip() if query else (text.strip() if text.strip() in STATES else None)
    active = _ACTIVE.search(text) if _UNIT.search(text) else None
    imex.state = active.group(1) if active else None
    errors = [m.group(0).strip() for m in _LOG_ERROR.finditer(text)]
    imex.errors = errors[-_MAX_ERRORS:] or None
    known = imex.nodes or imex.domain or imex.state or imex.errors or imex.query or _LOG_LINE.search(text)
    imex.installed = True if known else None
    return imex


def import_imex(text: str, origin: str) -> Snapshot:
    return Snapshot(sources=[origin], imex=read_imex(text))
