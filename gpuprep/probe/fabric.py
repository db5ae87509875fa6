"""Fabric Manager on this host: its NVSwitch devices, its systemd unit, `nv-fabricmanager --version`, and its journal
(this boot). Each read is bounded and guarded: a missing tool leaves its fact unknown."""
from __future__ import annotations

import glob
import os

from ..importers.fabricmanager import read_fabric_manager
from ..snapshot import FabricManager
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
