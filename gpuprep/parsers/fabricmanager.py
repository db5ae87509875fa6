"""NVIDIA Fabric Manager from captures: `systemctl status nvidia-fabricmanager`, its journal or
/var/log/fabricmanager.log, and `nv-fabricmanager --version`. The same reader serves the live probe's journal."""
from __future__ import annotations

import re
from typing import List, Optional

from ..snapshot import FabricManager, Snapshot

_MISMATCH = re.compile(r"driver interface version (\S+?) don'?t match with driver version (\S+?)\.?(?:\s|$)", re.I)
_VERSION = re.compile(r"Fabric Manager version is\s*:\s*(\S+)", re.I)
_ACTIVE = re.compile(r"^\s*Active:\s+(\w+)", re.M)
_ERROR_WORDS = ("don't match", "failed", "[ERROR]", "[FATAL]", "NV_WARN", "error:")
_MAX_ERRORS = 20


_LOG_LINE = re.compile(r"^\[\w{3} \d{1,2} \d{4} [\d:]{8}\] \[(?:INFO|ERROR|WARNING|FATAL)\] \[tid \d+\]", re.M)


def looks_like_fabric_manager(text: str) -> bool:
    """systemctl status / its journal (naming the unit or binary) with a state, version or refusal; or
    /var/log/fabricmanager.log's own line format."""
    head = text[:20000]
    named = re.search(r"nvidia-fabricmanager|nv-fabricmanager|fabric manager", head, re.I)
    return bool(_LOG_LINE.search(head)) or bool(named) and bool(
        _MISMATCH.search(head) or _VERSION.search(head) or _ACTIVE.search(head) or
        re.search(r"fabricmanager(?:-start\.sh|\.service|\[\d+\])", head))


def _state(text: str) -> Optional[str]:
    """systemd's ActiveState: the `Active:` line, else the last start/stop/failure line of the journal."""
    active = _ACTIVE.search(text)
    if active:
        return active.group(1)
    if re.search(r"Job for nvidia-fabricmanager\.service failed", text):
        return "failed"          # systemctl's own answer to a start or restart, printed before the journal it points to
    state = None
    for line in text.splitlines():
        if re.search(r"Control process exited.*status=\d+/FAILURE|Failed to start .*fabric manager|"
                     r"nvidia-fabricmanager\.service: Failed with result", line, re.I):
            state = "failed"
        elif re.search(r"systemd\[\d+\]: Started .*fabric manager", line, re.I):
            state = "active"
        elif re.search(r"systemd\[\d+\]: Stopp(?:ed|ing) .*fabric manager", line, re.I):
            state = "inactive"
    return state


def read_fabric_manager(text: str) -> FabricManager:
    fm = FabricManager()
    mismatch = _MISMATCH.search(text)
    version = _VERSION.search(text)
    fm.mismatch = [mismatch.group(1), mismatch.group(2)] if mismatch else None
    fm.version = version.group(1) if version else (mismatch.group(1) if mismatch else None)
    fm.state = _state(text)
    fm.installed = True if (fm.state or fm.version) else None
    if "Successfully configured all the available NVSwitches" in text:
        fm.configured, fm.nvswitch = True, True
    elif re.search(r"on NVSwitch pci bus id", text):
        fm.nvswitch = True           # it names an NVSwitch (an error on one): configured or not, the host has them
    if "NV_WARN_NOTHING_TO_DO" in text:
        fm.nvswitch = False          # the NVSwitch driver found no NVSwitch to configure
    errors: List[str] = [line.strip() for line in text.splitlines()
                         if any(word.lower() in line.lower() for word in _ERROR_WORDS)]
    fm.errors = errors[-_MAX_ERRORS:] or None
    return fm


def import_fabric_manager(text: str, origin: str) -> Snapshot:
    """Fabric Manager's facts, and the NVSwitch errors its log reports as SXids (the same catalog the kernel log's
    SXid lines are judged by: gpu.sxid)."""
    from .kernel_log import import_kernel_log
    events = import_kernel_log(text, origin).xids
    return Snapshot(sources=[origin], fabric_manager=read_fabric_manager(text), xids=events or None)
