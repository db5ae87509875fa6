"""The NCCL/OpenMP environment gpuprep writes to /etc/gpuprep/env, computed from host facts.

The nccl_env Ansible role feeds the same facts to the same rules (its template mirrors
`compute_env`); tests run both and compare.
"""
from __future__ import annotations

from typing import Dict, List, Optional

from .snapshot import Snapshot


def facts_from_snapshot(snap: Snapshot, default_interface: Optional[str]) -> dict:
    return {
        "default_interface": default_interface,
        "physical_cores": snap.system.cores or snap.system.threads or 1,
        "gpu_count": len(snap.gpus or []),
        "rdma_devices": [{"name": d.name, "link_layer": d.link_layer, "state": d.state}
                         for d in snap.rdma_devices or []],
    }


def compute_env(facts: dict, overrides: Optional[Dict[str, str]] = None) -> Dict[str, str]:
    env: Dict[str, str] = {}
    if facts.get("default_interface"):
        # '=' makes NCCL match the name exactly instead of as a prefix (eth1 would match eth10)
        env["NCCL_SOCKET_IFNAME"] = "=" + facts["default_interface"]
    active: List[str] = [d["name"] for d in facts.get("rdma_devices", [])
                         if "ACTIVE" in (d.get("state") or "").upper()]
    if active:
        env["NCCL_IB_DISABLE"] = "0"
        env["NCCL_IB_HCA"] = "=" + ",".join(sorted(active))
    else:
        env["NCCL_IB_DISABLE"] = "1"
    threads = max(1, int(facts.get("physical_cores") or 1) // max(1, int(facts.get("gpu_count") or 1)))
    env["OMP_NUM_THREADS"] = str(threads)
    env["MKL_NUM_THREADS"] = str(threads)
    env.update(overrides or {})
    return env


def default_route_interface(proc_root: str = "/") -> Optional[str]:
    """Interface of the IPv4 default route, from /proc/net/route."""
    try:
        with open(proc_root.rstrip("/") + "/proc/net/route") as fh:
            next(fh)
            for line in fh:
                fields = line.split()
                if len(fields) > 2 and fields[1] == "00000000":
                    return fields[0]
    except (OSError, StopIteration):
        return None
    return None


def render_env_file(env: Dict[str, str]) -> str:
    """The same template the nccl_env role renders, so both write byte-identical files."""
    import jinja2
    from .resources import templates_dir
    loader = jinja2.FileSystemLoader(str(templates_dir()))
    return jinja2.Environment(loader=loader, trim_blocks=True, keep_trailing_newline=True) \
        .get_template("env.j2").render(env=env)
