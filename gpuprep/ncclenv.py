"""`gpuprep nccl-env`: the environment the nccl_env role writes, from the same code (gpuprep/common/ncclenv.py).

A live host (or a root given with --root) is read exactly as the role's module reads it; captures or a
snapshot give the same facts from what they recorded."""
from __future__ import annotations

from typing import Dict, Optional

from .errors import BadInput
from .common import ncclenv as shared
from .snapshot import Snapshot


def facts_from_snapshot(snap: Snapshot) -> dict:
    return {"default_interface": None,
            "physical_cores": snap.system.cores or snap.system.threads,
            "rdma_devices": [{"name": d.name, "link_layer": d.link_layer, "state": d.state}
                             for d in snap.rdma_devices or []]}


def environment(facts: dict, gpu_count: int, socket_ifname: Optional[str] = None,
                overrides: Optional[Dict[str, str]] = None) -> Dict[str, str]:
    try:
        return shared.compute_env(facts, gpu_count, socket_ifname, overrides)
    except ValueError as exc:
        raise BadInput(str(exc)) from None


render_env_file = shared.render_env_file
host_facts = shared.host_facts
