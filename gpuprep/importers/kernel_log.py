"""NVRM Xid and NVSwitch SXid lines from any kernel log: dmesg, dmesg -T, --time-format=iso,
raw kmsg, syslog and journal prefixes. Used by the importer and by the live probe."""
from __future__ import annotations

import re
from typing import Iterable, List, Optional

from ..snapshot import Snapshot, XidEvent

_XID = re.compile(r"NVRM: Xid \((PCI:[0-9A-Fa-f:.]+)\): (\d+),\s*(.*)$")
_SXID = re.compile(r"nvidia-nvswitch\d*: SXid \((PCI:[0-9A-Fa-f:.]+)\): (\d+),\s*(.*)$")
_PID = re.compile(r"pid=('?[^,']*'?),\s*")
_NAME = re.compile(r"name=([^,]*),\s*")


def looks_like_kernel_log(text: str) -> bool:
    return bool(_XID.search(text) or _SXID.search(text))


def _prefix_time(prefix: str) -> Optional[str]:
    text = prefix.strip()
    bracket = re.search(r"\[([^\]]+)\]", text)
    if bracket:
        return bracket.group(1).strip()
    iso = re.search(r"\d{4}-\d{2}-\d{2}T[\d:,.]+[+-]\d{2}:?\d{2}", text)
    if iso:
        return iso.group(0)
    syslog = re.match(r"([A-Z][a-z]{2}\s+\d+\s+[\d:]+)", text)
    return syslog.group(1) if syslog else None


def parse_events(lines: Iterable[str]) -> List[XidEvent]:
    events: List[XidEvent] = []
    for line in lines:
        for pattern, kind in ((_XID, "xid"), (_SXID, "sxid")):
            match = pattern.search(line)
            if not match:
                continue
            rest = match.group(3)
            event = XidEvent(code=int(match.group(2)), pci=match.group(1)[4:], kind=kind,
                             time=_prefix_time(line[:match.start()]))
            pid = _PID.match(rest)
            if pid:
                event.pid = pid.group(1).strip("'")
                rest = rest[pid.end():]
            name = _NAME.match(rest)
            if name:
                event.process = name.group(1)
                rest = rest[name.end():]
            event.message = rest.strip()
            events.append(event)
            break
    return events


def import_kernel_log(text: str, origin: str) -> Snapshot:
    snap = Snapshot(sources=[origin])
    snap.xids = parse_events(text.splitlines())
    return snap
