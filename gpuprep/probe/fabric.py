"""Fabric Manager on this host (its NVSwitch devices, its systemd unit, `nv-fabricmanager --version`, and its journal
of this boot) and IMEX. Each read is bounded and guarded: a missing tool leaves its fact unknown."""
from __future__ import annotations

import glob
import os
import shutil
import subprocess

from ..importers.fabricmanager import read_fabric_manager
from ..importers.imex import STATES, read_imex
from ..snapshot import FabricManager, Imex
from .commands import run

UNIT = "nvidia-fabricmanager"


def probe_fabric_manager(root: str = "/") -> FabricManager:
    switches = glob.glob(os.path.join(root, "dev", "nvidia-nvswitch[0-9]*"))
    shown = run(["systemctl", "show", UNIT, "--property=LoadState,ActiveState"]) or ""
    props = dict(line.split("=", 1) for line in shown.splitlines() if "=" in line)
    version = run(["nv-fabricmanager", "--version"]) or ""
    journal = run(["journalctl", "-u", UNIT, "-b", "--no-pager", "-q", "-n", "200"]) or ""
    fm = read_fabric_manager(journal + "\n" + version)
    fm.nvswitch = True if switches else fm.nvswitch
    if props.get("LoadState") == "loaded":
        fm.installed, fm.state = True, props.get("ActiveState") or fm.state
    elif props.get("LoadState") == "not-found":
        fm.installed = bool(version)        # systemd answered: no unit (and no binary: not installed)
    return fm


IMEX_UNIT = "nvidia-imex"
IMEX_NODES = "etc/nvidia-imex/nodes_config.cfg"
IMEX_LOG = "var/log/nvidia-imex.log"
_LOG_TAIL = 64 << 10


def _tail(path: str, size: int = _LOG_TAIL) -> str:
    try:
        with open(path, "rb") as fh:
            fh.seek(max(0, os.fstat(fh.fileno()).st_size - size))
            return fh.read(size).decode("utf-8", errors="replace")
    except OSError:
        return ""


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
