"""fabric.*: NVIDIA Fabric Manager on NVSwitch systems (HGX/DGX A100, H100, H200, B200): it must run, and be of
exactly the driver's version (NVIDIA's Fabric Manager user guide: a mismatch stops it from starting), or CUDA
answers error 802 "system not yet initialized" and every job on the node dies at start."""
from __future__ import annotations

import re
from typing import Optional

from .. import knowledge as kb
from ..common.gputable import nvswitch_board
from ..parsers.lspci_vvv import is_nvswitch
from . import Finding, host, rule

_GUIDE = "NVIDIA Fabric Manager user guide"
_SXID_LINE = re.compile(r"detected NVSwitch (?:non-)?fatal error \d+", re.I)


def nvswitches_in_lspci(snap) -> int:
    """The NVSwitches lspci lists (HGX-2/A100/H100 boards; Blackwell's are no PCIe devices of the host)."""
    return sum(is_nvswitch({"class": d.kind, "name": d.name}) for d in snap.pci or [])


def nvswitch_system(snap) -> Optional[str]:
    """Why this host has NVSwitches (/dev/nvidia-nvswitch*, NVSwitches in lspci, a GPU registered with an NVLink
    fabric, or 8 baseboard GPUs), or None when nothing says so."""
    fm = snap.fabric_manager
    if fm.nvswitch:
        return "NVSwitch devices present"
    switches = nvswitches_in_lspci(snap)
    if switches:
        return f"{switches} NVSwitch(es) on the PCIe bus (lspci)"
    gpus = snap.gpus or []
    board = nvswitch_board(kb.gpu_models(), [g.name for g in gpus])
    if board:
        return board
    return FABRIC_STATE if any(g.fabric_state for g in gpus) else None


FABRIC_STATE = "GPUs report an NVLink fabric state"


def registered_elsewhere(snap) -> bool:
    """Every GPU that reports a fabric is registered (Completed, Success): its fabric is managed outside this OS (a
    pass-through VM whose host runs Fabric Manager, NVLink switch trays with their own manager), so this host needs
    no Fabric Manager of its own."""
    registered = [g for g in snap.gpus or [] if g.fabric_state]
    return bool(registered) and all(g.fabric_state == "Completed" and g.fabric_status == "Success"
                                    for g in registered)


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
    if why == FABRIC_STATE and fm.state != "failed" and registered_elsewhere(snap):
        return [Finding("fabric.manager", "info", host(snap), "The GPUs are registered with their NVLink fabric "
                        "(Completed, Success): no Fabric Manager is needed on this host", evidence, source=_GUIDE)]
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


_IMEX_GUIDE = "NVIDIA IMEX guide (docs.nvidia.com/multi-node-nvlink-systems/imex-guide)"
_IMEX_LOOK = ("Read why (`systemctl status nvidia-imex`, /var/log/nvidia-imex.log); check that "
              "/etc/nvidia-imex/nodes_config.cfg lists this domain's nodes and that they reach each other on port "
              "50000; until then jobs across trays cannot share GPU memory")


def _imex_problems(imex) -> list:
    problems = []
    if imex.state == "failed":
        problems.append("nvidia-imex has failed")
    elif imex.state in ("inactive", "deactivating") and (imex.configured_nodes or 0) > 1:
        problems.append(f"nvidia-imex is {imex.state} with {imex.configured_nodes} nodes configured")
    if imex.query and imex.query != "READY":
        problems.append("the daemon is not READY (nvidia-imex-ctl)")
    if imex.errors:
        problems.append(f"IMEX logged {len(imex.errors)} error(s)")
    return problems


@rule("fabric.imex")
def imex_service(snap, ctx):
    """The IMEX daemon, where the host has it: running, reachable, and without errors of its own."""
    imex = snap.imex
    if not imex.installed:
        return []
    evidence = {"state": imex.state, "query": imex.query, "configured_nodes": imex.configured_nodes,
                "errors": (imex.errors or [])[-3:]}
    problems = _imex_problems(imex)
    if problems:
        return [Finding("fabric.imex", "fail", host(snap), "IMEX: " + "; ".join(problems), evidence, _IMEX_LOOK,
                        _IMEX_GUIDE)]
    if imex.state == "active" or imex.query == "READY":
        return [Finding("fabric.imex", "pass", host(snap), "nvidia-imex is running", evidence, source=_IMEX_GUIDE)]
    if imex.state in ("inactive", "deactivating"):
        return [Finding("fabric.imex", "info", host(snap), f"nvidia-imex is {imex.state}: no other node is configured",
                        evidence, source=_IMEX_GUIDE)]
    return []


@rule("fabric.imex-domain")
def imex_domain(snap, ctx):
    """The IMEX domain as `nvidia-imex-ctl -N` shows it: UP, every node READY, of one IMEX version, and every
    connection Connected (NVIDIA's legend: a version or node-map mismatch disables communication)."""
    imex = snap.imex
    nodes = imex.nodes or []
    if not nodes and imex.domain is None:
        return []
    waiting = [f"node #{n.index} {n.address} {n.status}" for n in nodes if n.status != "READY"]
    versions = sorted({n.version for n in nodes if n.version})
    links = imex.links or []
    evidence = {"domain": imex.domain, "nodes": len(nodes), "not_ready": waiting[:8], "versions": versions,
                "connections": links[:8]}
    problems = ([f"domain {imex.domain}"] if imex.domain not in (None, "UP") else []) + waiting[:3] + \
        ([f"IMEX versions differ ({', '.join(versions)})"] if len(versions) > 1 else []) + \
        ([f"{len(links)} connection(s) not Connected ({', '.join(links[:3])})"] if links else [])
    if problems:
        return [Finding("fabric.imex-domain", "fail", host(snap), "IMEX domain: " + "; ".join(problems), evidence,
                        "Bring every node of the domain up with the same driver and IMEX version and the same "
                        "nodes_config.cfg; a node that stays UNAVAILABLE is drained until it rejoins", _IMEX_GUIDE)]
    return [Finding("fabric.imex-domain", "pass", host(snap),
                    f"IMEX domain {imex.domain + ': ' if imex.domain else 'of '}{len(nodes)} node(s), all READY", evidence, source=_IMEX_GUIDE)]
