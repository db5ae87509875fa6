"""NVRM Xid and NVSwitch SXid lines from any kernel log: dmesg, dmesg -T, --time-format=iso,
raw kmsg, syslog and journal prefixes. Used by the importer and by the live probe."""
from __future__ import annotations

import re
from typing import Iterable, List, Optional

from ..snapshot import Snapshot, XidEvent

# older drivers write `Xid (0000:03:00): 14, ...` without `PCI:`; a malformed id still counts the Xid
_XID = re.compile(r"NVRM: Xid \(([^)]*)\):\s*(\d+),?\s*(.*)$", re.M)
_SXID = re.compile(r"nvidia-nvswitch\d*: SXid \(([^)]*)\):\s*(\d+),?\s*(.*)$", re.M)
# the same errors as the fabric manager logs them: "detected NVSwitch non-fatal error 12028 on fid 0 on NVSwitch
# pci bus id 00000000:86:00.0 physical id 3 port 61"
_FM_SXID = re.compile(r"detected NVSwitch ((?:non-)?fatal) error (\d+).*?pci bus id ([0-9A-Fa-f:.]+)(.*)$", re.M)
# "fallen off the bus" without an Xid number (one line, or NVRM's multi-line message) means Xid 79
_OFF_BUS = re.compile(r"NVRM: (?:The NVIDIA )?GPU (?:at )?(?:PCI:)?([0-9A-Fa-f]{4,8}:[0-9A-Fa-f]{2}:[0-9A-Fa-f]{2}(?:\.\d)?)"
                      r"[^\n]*?fallen off the bus", re.M)
_CONTINUATION = re.compile(r"\n[ \t]+NVRM: ")
_PCI = r"([0-9A-Fa-f]{4,8}:[0-9A-Fa-f]{2}:[0-9A-Fa-f]{2}(?:\.\d)?)"
# Messages about a GPU that carry no Xid: (kind, pattern with the bus id as group 1 when it has one, code)
KERNEL_EVENTS = (
    ("init-failed", re.compile(r"NVRM: GPU (?:at )?(?:PCI:)?" + _PCI + r": RmInitAdapter failed"), lambda m: 0),
    ("reset-required", re.compile(r"NVRM: .*Reset required \[NV_ERR_RESET_REQUIRED\]()"), lambda m: 0),
    ("not-probed", re.compile(r"NVRM: (?:No NVIDIA (?:graphics adapter|GPU) (?:probed|found)|"
                              r"The NVIDIA probe routine was not called for \d+ device)()"), lambda m: 0),
    # one line per AER error; code 1 = uncorrected (non-fatal or fatal), 0 = corrected
    ("pcie-aer", re.compile(r"\b" + _PCI + r": (?:AER: )?PCIe Bus Error: severity=(\w+)"),
     lambda m: 0 if m.group(2).lower() == "corrected" else 1),
)
_BUS = re.compile(r"(?:PCI:)?([0-9A-Fa-f]{4,8}:[0-9A-Fa-f]{2}:[0-9A-Fa-f]{2})(?:\.\d)?$")   # as Xid lines print it
_PID = re.compile(r"pid=('?[^,']*'?),\s*")
_NAME = re.compile(r"name=([^,]*),\s*")


# every line the importer can use names one of these (Xid, SXid, NVRM messages, the fabric manager, AER)
_KEYWORDS = ("NVRM", "nvswitch", "NVSwitch", "PCIe Bus Error")


def relevant_lines(lines: Iterable[str]) -> Iterable[str]:
    """The lines of a kernel log the importer reads, and no other: a log of any size is scanned in bounded memory."""
    return (line for line in lines if any(word in line for word in _KEYWORDS))


def looks_like_log_lines(head: str) -> bool:
    """Whether the start of a file reads as a kernel log or syslog (a time prefix on nearly every line), though
    no GPU line comes early: large logs are recognised by their shape, then scanned line by line."""
    lines = [line for line in head.splitlines()[:50] if line.strip()]
    return len(lines) >= 5 and sum(_prefix_time(line[:40]) is not None for line in lines) >= 0.8 * len(lines)


def looks_like_kernel_log(text: str) -> bool:
    return bool(_XID.search(text) or _SXID.search(text) or _FM_SXID.search(text) or _OFF_BUS.search(_joined(text))
                or any(pattern.search(text) for _, pattern, _ in KERNEL_EVENTS))


# the kernel's own three-line message, each line "NVRM: ..." (with or without a time prefix), as monitoring tools'
# tests carry it: "The NVIDIA GPU <bus id>" / "(PCI ID: ...) installed in this system has" / "fallen off the bus ..."
_OFF_BUS_LINES = re.compile(r"(NVRM: The NVIDIA GPU [^\n]*?)[ \t]*\n[^\n]*?NVRM: (\(PCI ID:[^\n]*?)[ \t]*\n[^\n]*?NVRM: "
                            r"(fallen off the bus[^\n]*)")


def _joined(text: str) -> str:
    """NVRM's continuation lines (indented, no timestamp) joined to the line they continue, and the kernel's
    three-line fallen-off-the-bus message joined into one."""
    return _OFF_BUS_LINES.sub(r"\1 \2 \3", _CONTINUATION.sub(" ", text))


def _bus(text: str) -> Optional[str]:
    match = _BUS.match(text.strip())
    return match.group(1) if match else None


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
            event = XidEvent(code=int(match.group(2)), pci=_bus(match.group(1)), kind=kind,
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


# "NVRM: loading NVIDIA UNIX Open Kernel Module for x86_64  575.51.02  Release Build ..." (the open GPU kernel modules)
# or "NVRM: loading NVIDIA UNIX x86_64 Kernel Module  535.104.05 ..."; /proc/driver/nvidia/version says the same
MODULE_BANNER = re.compile(r"NVIDIA UNIX (Open )?(?:\S+ )?Kernel Module(?: for \S+)?\s+(\d+\.\d+(?:\.\d+)?)")


def module_flavor(text: str):
    """(flavor, version) of the last NVIDIA kernel module banner in `text`, or (None, None)."""
    found = list(MODULE_BANNER.finditer(text))
    if not found:
        return None, None
    return ("open" if found[-1].group(1) else "proprietary"), found[-1].group(2)


def import_kernel_log(text: str, origin: str) -> Snapshot:
    snap = Snapshot(sources=[origin])
    lines = _joined(text).splitlines()
    snap.software.kernel_module_flavor, snap.software.kernel_module_version = module_flavor(text)
    snap.xids = parse_events(lines)
    with_xid79 = {e.pci for e in snap.xids if e.code == 79}
    for line in lines:
        match = _OFF_BUS.search(line)
        if match and not _XID.search(line) and _bus(match.group(1)) not in with_xid79:
            snap.xids.append(XidEvent(code=79, pci=_bus(match.group(1)), time=_prefix_time(line[:match.start()]),
                                      message="GPU has fallen off the bus (logged without an Xid number)"))
    for line in lines:
        fm = _FM_SXID.search(line)
        if fm:
            snap.xids.append(XidEvent(code=int(fm.group(2)), pci=_bus(fm.group(3)), kind="sxid",
                                      time=_prefix_time(line[:fm.start()]),
                                      message=f"{fm.group(1)} (fabric manager){fm.group(4)}".strip()))
            continue
        for kind, pattern, code in KERNEL_EVENTS:
            match = pattern.search(line)
            if match:
                snap.xids.append(XidEvent(code=code(match), pci=_bus(match.group(1)) if match.group(1) else None,
                                          kind=kind, time=_prefix_time(line[:match.start()]),
                                          message=line[match.start():].strip()[:300]))
                break
    return snap
