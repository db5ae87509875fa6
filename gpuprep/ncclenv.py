"""`gpuprep nccl-env`: the environment the nccl_env role writes, from the same code (gpuprep/common/ncclenv.py).

A live host (or a root given with --root) is read exactly as the role's module reads it; captures or a
snapshot give the same facts from what they recorded."""
from __future__ import annotations

from typing import Dict, Optional

from .errors import BadInput
from .common import ncclenv as shared
from .snapshot import Snapshot


def facts_from_snapshot(snap: Snapshot) -> dict:
    """What the captures say, unknown where they are silent. Threads per rank are the plan's (`gpuprep plan`), so
    both commands give the same number for the same files."""
    return {"default_interface": None, "physical_cores": snap.system.cores,
            "threads_per_rank": _plan_threads(snap),
            "rdma_devices": None if snap.rdma_devices is None else
            [{"name": d.name, "link_layer": d.link_layer, "state": d.state} for d in snap.rdma_devices]}


def _plan_threads(snap: Snapshot) -> Optional[int]:
    from .plan import make_plan
    try:
        ranks = make_plan(snap).ranks
    except BadInput:
        return None
    cores = [r.physical_cores for r in ranks if r.physical_cores]
    return min(cores) if cores and len(cores) == len(ranks) else None


def environment(facts: dict, gpu_count: int, socket_ifname: Optional[str] = None,
                overrides: Optional[Dict[str, str]] = None) -> Dict[str, str]:
    try:
        return shared.compute_env(facts, gpu_count, socket_ifname, overrides)
    except ValueError as exc:
        raise BadInput(str(exc)) from None


render_env_file = shared.render_env_file
host_facts = shared.host_facts
