"""env.*: NCCL/OpenMP/CUDA variables that point at nothing or oversubscribe the host."""
from __future__ import annotations

from ..parsers.values import cuda_visible, cuda_visible_problem
from . import Finding, host, rule


def _ifname_matches(spec: str, interfaces):
    """NCCL_SOCKET_IFNAME semantics: prefixes, '^' excludes, '=' exact names, comma lists."""
    spec = spec.strip()
    exclude = spec.startswith("^")
    spec = spec.lstrip("^")
    exact = spec.startswith("=")
    names = [n for n in spec.lstrip("=").split(",") if n]
    hits = [i for i in interfaces if any((i == n) if exact else i.startswith(n) for n in names)]
    if exclude:
        hits = [i for i in interfaces if i not in hits and i != "lo"]
    return hits


@rule("env.nccl-socket-ifname")
def socket_ifname(snap, ctx):
    env, interfaces = snap.env or {}, snap.interfaces
    spec = env.get("NCCL_SOCKET_IFNAME")
    if not spec or interfaces is None:
        return []
    hits = _ifname_matches(spec, interfaces)
    up = [i for i in hits if interfaces.get(i) in ("up", "unknown")]
    evidence = {"NCCL_SOCKET_IFNAME": spec, "matching": hits, "interfaces": interfaces}
    if not hits:
        return [Finding("env.nccl-socket-ifname", "fail", host(snap),
                        f"NCCL_SOCKET_IFNAME={spec} matches no interface", evidence,
                        "Set it to the interface of your cluster network (prefix match; '=eth0' for exact)",
                        "NCCL environment variables documentation")]
    if not up:
        return [Finding("env.nccl-socket-ifname", "fail", host(snap),
                        f"NCCL_SOCKET_IFNAME={spec} matches only interfaces that are down", evidence,
                        "Bring the interface up or point NCCL at another one")]
    return [Finding("env.nccl-socket-ifname", "pass", host(snap), f"NCCL_SOCKET_IFNAME matches {', '.join(up)}")]


@rule("env.nccl-ib-disabled")
def ib_disabled(snap, ctx):
    env = snap.env or {}
    ib = [d for d in snap.rdma_devices or [] if (d.link_layer or "").lower() == "infiniband"]
    if env.get("NCCL_IB_DISABLE") == "1" and ib:
        return [Finding("env.nccl-ib-disabled", "warn", host(snap), "NCCL_IB_DISABLE=1 on a host with InfiniBand",
                        {"NCCL_IB_DISABLE": "1", "ib_devices": [d.name for d in ib]},
                        "Unset NCCL_IB_DISABLE so NCCL uses InfiniBand (`gpuprep apply --tags nccl_env`)")]
    return []


@rule("env.omp-threads")
def omp_threads(snap, ctx):
    env = snap.env
    cores, gpus = snap.system.cores, len(snap.gpus or [])
    if env is None or not cores or not gpus:
        return []
    value = env.get("OMP_NUM_THREADS")
    suggested = max(1, cores // gpus)
    if value is None:
        return [Finding("env.omp-threads", "info", host(snap), "OMP_NUM_THREADS is unset",
                        {"physical_cores": cores, "gpus": gpus, "suggested": suggested},
                        f"torchrun sets it to 1 per rank; set OMP_NUM_THREADS={suggested} (`gpuprep apply --tags nccl_env`)")]
    try:
        threads = int(value)
    except ValueError:
        return [Finding("env.omp-threads", "warn", host(snap), f"OMP_NUM_THREADS={value!r} is not a number",
                        {"OMP_NUM_THREADS": value}, f"OMP_NUM_THREADS={suggested}")]
    if threads * gpus > cores:
        return [Finding("env.omp-threads", "warn", host(snap),
                        f"OMP_NUM_THREADS={threads} x {gpus} ranks oversubscribes {cores} cores",
                        {"OMP_NUM_THREADS": threads, "gpus": gpus, "physical_cores": cores},
                        f"OMP_NUM_THREADS={suggested}")]
    return [Finding("env.omp-threads", "pass", host(snap), f"OMP_NUM_THREADS={threads}")]


@rule("env.cuda-visible-devices")
def visible_devices(snap, ctx):
    env = snap.env or {}
    spec = env.get("CUDA_VISIBLE_DEVICES")
    if spec is None or snap.gpus is None:
        return []
    gpus = snap.gpus
    indices = [g.index for g in gpus if g.index is not None]
    seen = cuda_visible(spec, indices, {g.uuid: g.index for g in gpus if g.uuid and g.index is not None})
    evidence = {"CUDA_VISIBLE_DEVICES": spec, "gpus": len(gpus), "cuda_sees": seen}
    why = cuda_visible_problem(spec, seen)
    if why:
        return [Finding("env.cuda-visible-devices", "fail", host(snap), f"CUDA_VISIBLE_DEVICES: {why}", evidence,
                        "Fix or unset CUDA_VISIBLE_DEVICES (comma-separated indices or UUIDs, each once, no gaps)")]
    if len(seen) < len(gpus):
        return [Finding("env.cuda-visible-devices", "info", host(snap),
                        f"CUDA_VISIBLE_DEVICES hides {len(gpus) - len(seen)} of {len(gpus)} GPUs", evidence,
                        "Unset it if jobs should see every GPU")]
    return [Finding("env.cuda-visible-devices", "pass", host(snap), "CUDA_VISIBLE_DEVICES names every GPU")]
