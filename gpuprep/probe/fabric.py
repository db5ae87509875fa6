"""Fabric Manager on this host (its NVSwitch devices, its systemd unit, `nv-fabricmanager --version`, its journal of
this boot and its log since systemd last started it) and IMEX. Each read is bounded and guarded: a missing tool
leaves its fact unknown."""
from __future__ import annotations

import datetime as _dt
import glob
import os
import re
import shutil
import subprocess
from typing import Optional

from ..parsers.fabricmanager import read_fabric_manager
from ..parsers.imex import STATES, read_imex
from ..snapshot import FabricManager, Imex
from .commands import run

UNIT = "nvidia-fabricmanager"
FM_LOG = "var/log/fabricmanager.log"      # LOG_FILE_NAME in fabricmanager.cfg, appended to across runs
_LOG_STAMP = re.compile(r"^\[(\w{3} \d{1,2} \d{4} \d\d:\d\d:\d\d)\]")
_LOG_TAIL = 64 << 10


def probe_fabric_manager(root: str = "/") -> FabricManager:
    switches = glob.glob(os.path.join(root, "dev", "nvidia-nvswitch[0-9]*"))
    shown = run(["systemctl", "show", UNIT, "--property=LoadState,ActiveState,InactiveExitTimestamp"]) or ""
    props = dict(line.split("=", 1) for line in shown.splitlines() if "=" in line)
    version = run(["nv-fabricmanager", "--version"]) or ""
    journal = run(["journalctl", "-u", UNIT, "-b", "--no-pager", "-q", "-n", "200"]) or ""
    started = _started(props.get("InactiveExitTimestamp", ""))
    log = _log_since(_tail(os.path.join(root, FM_LOG)), started) if started else ""
    fm = read_fabric_manager(journal + "\n" + version + "\n" + log)
    fm.nvswitch = True if switches else fm.nvswitch
    if props.get("LoadState") == "loaded":
        fm.installed, fm.state = True, props.get("ActiveState") or fm.state
    elif props.get("LoadState") == "not-found":
        fm.installed = bool(version)        # systemd answered: no unit (and no binary: not installed)
    return fm


def _started(stamp: str) -> Optional[_dt.datetime]:
    """When systemd last started the unit ('Tue 2025-03-25 02:10:14 UTC', the host's clock, as Fabric Manager's log
    reads it), a second early: its first log lines come before systemd notes the start."""
    parts = stamp.split()
    try:
        return _dt.datetime.strptime(" ".join(parts[1:3]), "%Y-%m-%d %H:%M:%S") - _dt.timedelta(seconds=1)
    except ValueError:
        return None


def _log_since(text: str, since: _dt.datetime) -> str:
    """The log's lines of the current run (a line without a time stamp belongs to the one above it): an error Fabric
    Manager logged before systemd last started it is history, not this host's state."""
    keep, current = [], False
    for line in text.splitlines():
        stamp = _LOG_STAMP.match(line)
        if stamp:
            try:
                current = _dt.datetime.strptime(stamp.group(1), "%b %d %Y %H:%M:%S") >= since
            except ValueError:
                current = False
        if current:
            keep.append(line)
    return "\n".join(keep)


def _tail(path: str, size: int = _LOG_TAIL) -> str:
    try:
        with open(path, "rb") as fh:
            fh.seek(max(0, os.fstat(fh.fileno()).st_size - size))
            return fh.read(size).decode("utf-8", errors="replace")
    except OSError:
        return ""


IMEX_UNIT = "nvidia-imex"
IMEX_NODES = "etc/nvidia-imex/nodes_config.cfg"
IMEX_LOG = "var/log/nvidia-imex.log"


def _configured_nodes(root: str):
    try:
        with open(os.path.join(root, IMEX_NODES), encoding="utf-8", errors="replace") as fh:
            return sum(1 for line in fh if line.strip() and not line.lstrip().startswith("#"))
    except OSError:
        return None


def probe_imex(root: str = "/") -> Imex:
    """IMEX where the host has it (GB200/GB300 NVL systems): its unit, its node list, `nvidia-imex-ctl -N` (the
    domain as this node sees it) or, when that cannot answer, `-q`'s error, and the tail of its log."""
    shown = run(["systemctl", "show", IMEX_UNIT, "--property=LoadState,ActiveState"]) or ""
    props = dict(line.split("=", 1) for line in shown.splitlines() if "=" in line)
    ctl = shutil.which("nvidia-imex-ctl")
    configured = _configured_nodes(root)
    if props.get("LoadState") != "loaded" and ctl is None and configured is None:
        return Imex(installed=False if props.get("LoadState") == "not-found" else None)
    text = _tail(os.path.join(root, IMEX_LOG))
    if ctl:
        text += "\n" + (run([ctl, "-N"]) or _query_error(ctl))
    imex = read_imex(text)
    imex.installed, imex.configured_nodes = True, configured
    imex.state = props.get("ActiveState") if props.get("LoadState") == "loaded" else imex.state
    return imex


def _query_error(ctl: str) -> str:
    """`nvidia-imex-ctl -q`'s answer, error included (it exits non-zero when the daemon cannot be reached)."""
    try:
        done = subprocess.run([ctl, "-q"], capture_output=True, text=True, timeout=10)
    except (OSError, subprocess.SubprocessError) as exc:
        return f"Query Status returned error code: nvidia-imex-ctl could not run ({exc})"
    said = (done.stdout + done.stderr).strip()
    return said if said.strip() in STATES or said.startswith("Query Status returned error code") else \
        f"Query Status returned error code: exit {done.returncode}: {said[:200]}"
