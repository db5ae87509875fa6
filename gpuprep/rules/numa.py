"""numa.*: are GPUs spread evenly over NUMA nodes, with enough cores and memory each."""
from __future__ import annotations

from collections import Counter

from . import Finding, host, rule


def _gpu_numa(snap):
    nodes = {}
    if snap.topology:
        for gpu in snap.topology.gpus():
            node = snap.topology.numa_affinity.get(gpu)
            if node is not None:
                nodes[gpu] = node
    for gpu in snap.gpus or []:
        if gpu.numa_node is not None and gpu.numa_node >= 0:
            nodes.setdefault(f"GPU{gpu.index}", gpu.numa_node)
    return nodes


@rule("numa.gpu-balance")
def gpu_balance(snap, ctx):
    nodes = _gpu_numa(snap)
    cpu_nodes = [n.node for n in snap.numa_nodes or [] if n.cpulist]
    if len(nodes) < 2:
        return []
    counts = Counter(nodes.values())
    spread = {f"node{n}": counts.get(n, 0) for n in sorted(set(cpu_nodes) | set(counts))}
    if len(set(spread.values())) > 1 and len(spread) > 1:
        return [Finding("numa.gpu-balance", "warn", host(snap), "GPUs are unevenly spread over NUMA nodes",
                        {"gpus_per_node": spread},
                        "Bind each rank to its GPU's NUMA node (torchrun --numa-binding / numactl --cpunodebind)")]
    return [Finding("numa.gpu-balance", "pass", host(snap), "GPUs evenly spread over NUMA nodes", {"gpus_per_node": spread})]


@rule("numa.cores-per-gpu")
def cores_per_gpu(snap, ctx):
    gpus, cores = len(snap.gpus or []), snap.system.cores
    wanted = ctx.profile.get("min_cores_per_gpu")
    if not gpus or not cores:
        return []
    per = cores / gpus
    evidence = {"physical_cores": cores, "gpus": gpus, "cores_per_gpu": round(per, 1)}
    if wanted and per < wanted:
        return [Finding("numa.cores-per-gpu", "warn", host(snap), f"{per:.1f} physical cores per GPU, profile wants {wanted}",
                        evidence, "Data loading will starve the GPUs: use a host with more cores or fewer workers per GPU")]
    return [Finding("numa.cores-per-gpu", "pass", host(snap), f"{per:.1f} physical cores per GPU", evidence)]


@rule("numa.memory-per-gpu")
def memory_per_gpu(snap, ctx):
    ratio = ctx.profile.get("min_memory_per_gpu_ratio")
    ram = snap.system.memory_total_mib
    gpu_mem = sum(g.memory_total_mib or 0 for g in snap.gpus or [])
    if not ratio or not ram or not gpu_mem:
        return []
    have = ram / gpu_mem
    evidence = {"host_memory_mib": ram, "gpu_memory_mib": gpu_mem, "ratio": round(have, 2), "wanted": ratio}
    if have < ratio:
        return [Finding("numa.memory-per-gpu", "warn", host(snap),
                        f"Host memory is {have:.2f}x total GPU memory, profile wants {ratio}x", evidence,
                        "Add host memory: checkpointing and data loading need it")]
    return [Finding("numa.memory-per-gpu", "pass", host(snap), f"Host memory {have:.2f}x GPU memory", evidence)]


@rule("numa.host-size")
def host_size(snap, ctx):
    """The profile's whole-host minimums (memory, physical cores)."""
    out = []
    memory_gib, cores = ctx.profile.get("min_memory_gib"), ctx.profile.get("min_cpu_cores")
    ram = snap.system.memory_total_mib
    if memory_gib and ram:
        have = ram / 1024
        out.append(Finding("numa.host-size", "warn" if have < memory_gib * 0.95 else "pass", host(snap),
                           f"{have:.0f} GiB of memory (profile wants {memory_gib})", {"memory_gib": round(have, 1)},
                           "Add memory or pick a smaller profile" if have < memory_gib * 0.95 else None))
    if cores and snap.system.cores:
        short = snap.system.cores < cores
        out.append(Finding("numa.host-size", "warn" if short else "pass", host(snap),
                           f"{snap.system.cores} physical cores (profile wants {cores})", {"cores": snap.system.cores},
                           "Use a host with more cores or pick a smaller profile" if short else None))
    return out
