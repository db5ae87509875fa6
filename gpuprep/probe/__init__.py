"""Gather a live host's facts into a Snapshot. I/O only: nothing here judges."""
from __future__ import annotations

import datetime as _dt
import os
from typing import Any, Dict, Optional

from ..snapshot import Snapshot
from . import nvml as nvml_probe
from .system import (Root, probe_env, probe_interfaces, probe_modules, probe_nics, probe_numa,
                     probe_rdma, probe_settings, probe_system)


def collect(root: str = "/", nvml: Any = None, environ: Optional[Dict[str, str]] = None,
            docker: bool = True, commands: bool = True, deep: bool = False, dcgm_level: int = 1) -> Snapshot:
    """Facts of the host below `root`. `nvml` replaces nvidia-ml-py (tests pass a fake); `docker`
    and `commands` switch off the daemon query and the bounded nvidia-smi/journal runs; `deep` runs DCGM's
    diagnostics at `dcgm_level` (where DCGM is installed) and starts
    containers (the GPU smoke test, when the host has GPUs, and the limits a container gets)."""
    from .software import probe_software

    fs = Root(root)
    snap = _cpu_facts(fs, root)
    snap.nics = probe_nics(fs)
    snap.interfaces = probe_interfaces(fs) or None
    snap.kernel_modules = probe_modules(fs)
    snap.settings = probe_settings(fs)
    snap.env = probe_env(dict(os.environ if environ is None else environ))
    snap.software = probe_software(fs)
    if commands:
        from .fabric import probe_fabric_manager, probe_imex
        snap.fabric_manager = probe_fabric_manager(root)
        snap.imex = probe_imex(root)
    if deep:
        from .dcgm import probe_dcgm
        snap.dcgm = probe_dcgm(dcgm_level)

    facts = nvml_probe.probe(nvml)
    snap.nvml = facts.status
    snap.software.driver_version = facts.driver_version
    snap.software.cuda_driver_version = facts.cuda_driver_version
    snap.gpus = facts.gpus if facts.status.available else None
    if snap.nvml.available is False and snap.nvml.reason == "library-not-found" \
            and not (snap.kernel_modules or {}).get("nvidia"):
        snap.nvml.reason = "not-installed"

    if docker:
        from .container import probe_docker
        snap.container = probe_docker()
        if deep and snap.container.docker_reachable:
            from .container import probe_smoke
            snap.container.smoke = probe_smoke(snap.container, with_gpus=bool(snap.gpus))
    if commands:
        from . import commands as cmd
        snap.xids = cmd.recent_xids()
        snap.settings.sshd = cmd.sshd_settings()
        if snap.gpus:
            snap.topology = cmd.nvidia_topology()
            snap.pci = cmd.pci_devices()
    return snap


def _cpu_facts(fs: Root, root: str) -> Snapshot:
    """The snapshot's header with the CPUs, NUMA nodes and RDMA ports: what every probe starts from."""
    snap = Snapshot(sources=["live" if fs.live else f"root:{root}"],
                    collected_at=_dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"))
    snap.system = probe_system(fs)
    snap.numa_nodes = probe_numa(fs)
    snap.rdma_devices = probe_rdma(fs)
    return snap


def topology_facts(root: str = "/", commands: bool = True, uuids: bool = False) -> Snapshot:
    """Only what a launch plan needs, cheap enough for every rank of `gpuprep launch` to read: CPUs, NUMA nodes,
    SMT siblings, RDMA ports and `nvidia-smi topo -m` (no NVML session, no Docker, no kernel log); with `uuids`
    also each GPU's UUID (for CUDA_VISIBLE_DEVICES written as UUIDs)."""
    snap = _cpu_facts(Root(root), root)
    if commands:
        from . import commands as cmd
        snap.topology = cmd.nvidia_topology()
        if uuids:
            from ..snapshot import Gpu
            snap.gpus = [Gpu(index=i, uuid=u) for i, u in sorted(cmd.gpu_uuids().items())] or None
    return snap
