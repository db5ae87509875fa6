"""fabric.*: NVIDIA Fabric Manager on NVSwitch systems (HGX/DGX A100, H100, H200, B200): it must run, and be of
exactly the driver's version (NVIDIA's Fabric Manager user guide: a mismatch stops it from starting), or CUDA
answers error 802 "system not yet initialized" and every job on the node dies at start."""
from __future__ import annotations

import re
from typing import Optional

from .. import knowledge as kb
from . import Finding, host, rule

_GUIDE = "NVIDIA Fabric Manager user guide"
_SXID_LINE = re.compile(r"detected NVSwitch (?:non-)?fatal error \d+", re.I)


def nvswitch_system(snap) -> Optional[str]:
    """Why this host has NVSwitches (devices, a GPU registered with an NVLink fabric, or 8 baseboard GPUs), or None
    when nothing says so."""
    fm = snap.fabric_manager
    if fm.nvswitch:
        return "NVSwitch devices present"
    gpus = snap.gpus or []
    if any(g.fabric_state for g in gpus):
        return "GPUs report an NVLink fabric state"
    models = [kb.gpu_model(g.name) or {} for g in gpus]
    if len(gpus) >= 8 and models and all(m.get("nvlink_form") == "baseboard" for m in models):
        return f"{len(gpus)} {gpus[0].name} baseboard GPUs (HGX/DGX)"
    return None


@rule("fabric.manager")
def manager_running(snap, ctx):
    fm = snap.fabric_manager
    why = nvswitch_system(snap)
    evidence = {"state": fm.state, "installed": fm.installed, "nvswitch": why, "errors": (fm.errors or [])[-3:]}
    if fm.state == "active":
        return [Finding("fabric.manager", "pass", host(snap), "nvidia-fabricmanager is running", evidence, source=_GUIDE)]
    if fm.nvswitch is False and fm.state == "failed":
        return [Finding("fabric.manager", "warn", host(snap), "nvidia-fabricmanager fails on a host without NVSwitches",
                        evidence, "Disable it (`systemctl disable --now nvidia-fabricmanager`): only NVSwitch systems "
                        "need it", _GUIDE)]
    if fm.installed is False and why:
        return [Finding("fabric.manager", "fail", host(snap), f"No Fabric Manager on an NVSwitch system ({why})",
                        evidence, "Install nvidia-fabricmanager of the driver's exact version and start it; until "
                        "then CUDA fails with error 802", _GUIDE)]
    if fm.state is None or (why is None and fm.state != "failed"):
        return []        # unknown, or a host that does not need it
    return [Finding("fabric.manager", "fail", host(snap), f"nvidia-fabricmanager is {fm.state}",
                    evidence, "Start it and read why it stopped (`systemctl status nvidia-fabricmanager`, "
                    "/var/log/fabricmanager.log); until it runs CUDA fails with error 802", _GUIDE)]


@rule("fabric.manager-errors")
def manager_errors(snap, ctx):
    """Errors Fabric Manager logged while running, other than the NVSwitch errors it reports with an SXid number
    (gpu.sxid judges those from the SXid catalog)."""
    errors = [e for e in snap.fabric_manager.errors or [] if ("[ERROR]" in e or "[FATAL]" in e)
              and not _SXID_LINE.search(e)]
    if not errors:
        return []
    return [Finding("fabric.manager-errors", "fail" if any("[FATAL]" in e for e in errors) else "warn", host(snap),
                    f"Fabric Manager logged {len(errors)} error(s)", {"last": errors[-3:]},
                    "Match them with the kernel log's SXids (`gpuprep check`: gpu.sxid) and NVIDIA's Fabric Manager "
                    "error catalog; repeated errors on one NVSwitch port call for a drain and a support case", _GUIDE)]


@rule("fabric.manager-version")
def manager_version(snap, ctx):
    fm = snap.fabric_manager
    driver = snap.software.driver_version
    if fm.mismatch:
        fm_version, driver = fm.mismatch
    elif fm.version and driver:
        fm_version = fm.version
    else:
        return []
    evidence = {"fabric_manager": fm_version, "driver": driver}
    if fm_version != driver:
        return [Finding("fabric.manager-version", "fail", host(snap),
                        f"Fabric Manager {fm_version} does not match driver {driver}: it will not start",
                        evidence, f"Install nvidia-fabricmanager {driver} (the driver's exact version) and pin both "
                        "(`gpuprep apply --tags driver_pin`), or the driver of Fabric Manager's version", _GUIDE)]
    return [Finding("fabric.manager-version", "pass", host(snap), f"Fabric Manager {fm_version} matches the driver",
                    evidence, source=_GUIDE)]
