"""The launch plan (`gpuprep plan`, applied per rank by `gpuprep launch`): for each local rank, the GPU, its NUMA
node, the CPUs the rank owns, the memory node, the nearest RDMA NIC and the environment that follows from them.
Pure: a snapshot (live or from captures) in, a plan with its findings out.

The modes are torchrun's (`--numa-binding`, torch/numa/binding.py in PyTorch >= 2.9), computed the same way, so
where the GPUs' NUMA nodes are known the printed torchrun line gives the same CPU binding:
- node: every CPU of the GPU's NUMA node (ranks on one node share them);
- socket: every CPU of the socket the GPU's node belongs to;
- exclusive: the node's physical cores split in contiguous runs among its GPUs in index order (the lowest
  indexes take one extra core when the split is uneven), each core with its SMT siblings.
A host without GPUs gets CPU ranks (gloo): each NUMA node's cores split among the ranks placed on it."""
from __future__ import annotations

import re
import shlex
from dataclasses import asdict, dataclass, field
from typing import Dict, List, Optional, Sequence, Set, Tuple

from .errors import BadInput
from .parsers.values import compress_cpulist, expand_cpulist
from .rules import Finding, declared
from .snapshot import Snapshot

MODES = ("exclusive", "node", "socket")
# nvidia-smi topo -m's path kinds, nearest first (SOC is the old name of SYS)
PATH_ORDER = {"PIX": 0, "PXB": 1, "PHB": 2, "NODE": 3, "SYS": 4, "SOC": 4}
MIN_CORES_PER_RANK = 4      # fewer leaves no core for DataLoader workers besides the rank's own threads


@dataclass
class Rank:
    local_rank: int
    gpu: Optional[int]
    bus_id: Optional[str]
    numa_node: Optional[int]
    cpus: List[int]
    physical_cores: int
    memory_node: Optional[int]
    nic: Optional[str] = None
    nic_path: Optional[str] = None
    dataloader_workers: int = 1
    env: Dict[str, str] = field(default_factory=dict)

    @property
    def cpulist(self) -> str:
        return compress_cpulist(self.cpus)


@dataclass
class LaunchPlan:
    host: str
    mode: str
    ranks: List[Rank]
    findings: List[Finding]
    notes: List[str]
    torchrun: Optional[str]

    def to_dict(self) -> dict:
        ranks = [dict(asdict(r), cpulist=r.cpulist) for r in self.ranks]
        return {"host": self.host, "mode": self.mode, "ranks": ranks, "notes": self.notes,
                "torchrun": self.torchrun, "findings": [f.to_dict() for f in self.findings]}

    @classmethod
    def from_dict(cls, data: dict) -> "LaunchPlan":
        """A saved plan, checked field by field: it comes from a file (possibly on a shared file system) and
        `gpuprep launch` acts on it, so a field of the wrong type, an environment variable the planner never sets
        (LD_PRELOAD, PATH) or a bad value is refused with its JSON path, never applied."""
        _expect(data, "", dict)
        ranks = _expect(data.get("ranks"), "ranks", list)
        return cls(_expect(data.get("host"), "host", str), _expect(data.get("mode"), "mode", str),
                   [_rank_from(r, f"ranks[{i}]") for i, r in enumerate(ranks)], [],
                   [str(n) for n in _expect(data.get("notes", []), "notes", list)],
                   data.get("torchrun") if isinstance(data.get("torchrun"), str) else None)


# the only variables a plan sets (_env below); a saved plan naming any other is refused
PLAN_ENV = frozenset({"OMP_NUM_THREADS", "MKL_NUM_THREADS", "GPUPREP_DATALOADER_WORKERS", "CUDA_DEVICE_ORDER",
                      "NCCL_IB_HCA"})
_RANK_FIELDS = {"local_rank": int, "gpu": (int, type(None)), "bus_id": (str, type(None)),
                "numa_node": (int, type(None)), "cpus": list, "physical_cores": int,
                "memory_node": (int, type(None)), "nic": (str, type(None)), "nic_path": (str, type(None)),
                "dataloader_workers": int, "env": dict}


def _expect(value, path: str, kind):
    if not isinstance(value, kind) or isinstance(value, bool):
        raise BadInput(f"{path or 'the document'}: expected {_kind_name(kind)}, got {type(value).__name__}")
    return value


def _kind_name(kind) -> str:
    kinds = kind if isinstance(kind, tuple) else (kind,)
    return " or ".join({int: "a whole number", str: "text", list: "a list", dict: "an object",
                        type(None): "null"}[k] for k in kinds)


def _rank_from(data, path: str) -> Rank:
    from .common.ncclenv import validate
    _expect(data, path, dict)
    fields = {}
    for name, kind in _RANK_FIELDS.items():
        fields[name] = _expect(data.get(name), f"{path}.{name}", kind)
    for i, cpu in enumerate(fields["cpus"]):
        if not isinstance(cpu, int) or isinstance(cpu, bool) or not 0 <= cpu < 1 << 22:
            raise BadInput(f"{path}.cpus[{i}]: expected a CPU number, got {cpu!r}")
    env = fields["env"]
    for key in env:
        if key not in PLAN_ENV:
            raise BadInput(f"{path}.env.{key}: a plan sets only {', '.join(sorted(PLAN_ENV))}")
    problems = validate(env)
    if problems:
        raise BadInput(f"{path}.env: {problems[0]}")
    return Rank(**fields)


@dataclass
class Layout:
    """The CPUs as the plan sees them: each NUMA node's CPUs, each CPU's physical core, each node's socket."""
    node_cpus: Dict[int, List[int]]      # real NUMA nodes; negative keys: CPU pools of GPUs whose node is unknown
    core_of: Dict[int, int]
    socket_of: Dict[int, int]
    notes: List[str]
    pool_of: Dict[int, int] = field(default_factory=dict)     # GPU with an unknown node -> its CPU pool

    def real_nodes(self) -> List[int]:
        return sorted(n for n in self.node_cpus if n >= 0)

    def multi_node(self, sockets: Optional[int]) -> bool:
        """Whether the host has more than one NUMA node, as far as the facts tell: several nodes or sockets, a
        node id above 0 (ids start at 0), or GPU CPU lists that leave CPU 0 out (someone else's CPUs)."""
        real = self.real_nodes()
        return (len(real) > 1 or (sockets or 1) > 1 or any(n > 0 for n in real)
                or any(0 not in cpus for cpus in self.node_cpus.values()))


def cpu_layout(snap: Snapshot, gpu_nodes: Dict[int, Optional[int]], allowed: Optional[Set[int]] = None) -> Layout:
    """`allowed`: the CPUs this process may run on (sched_getaffinity: a cgroup/cpuset, Slurm's allocation). Like
    torch, each node's CPUs are cut to them before they are divided among ranks."""
    notes: List[str] = []
    node_cpus = {n.node: expand_cpulist(n.cpulist) for n in snap.numa_nodes or [] if expand_cpulist(n.cpulist)}
    pool_of: Dict[int, int] = {}
    if not node_cpus and snap.topology:
        # no numactl/lscpu/sys: the nodes from topo -m's CPU and NUMA affinity columns; a GPU without a NUMA
        # affinity shares a CPU pool with the GPUs of the same CPU list
        pools: Dict[str, int] = {}
        for gpu, text in snap.topology.cpu_affinity.items():
            node = gpu_nodes.get(int(gpu[3:])) if gpu[3:].isdigit() else None
            if node is None:
                node = pools.setdefault(text, -1 - len(pools))
                pool_of[int(gpu[3:])] = node
            node_cpus.setdefault(node, expand_cpulist(text))
        if node_cpus:
            notes.append("CPUs from nvidia-smi topo -m's CPU Affinity (no numactl -H, lscpu or /sys)")
    if allowed is not None:
        cut = {node: [cpu for cpu in cpus if cpu in allowed] for node, cpus in node_cpus.items()}
        if cut != node_cpus:
            notes.append(f"only the CPUs this process may use: {compress_cpulist(sorted(allowed))}")
        node_cpus = {node: cpus for node, cpus in cut.items() if cpus}
    everything = sorted({cpu for cpus in node_cpus.values() for cpu in cpus})
    return Layout(node_cpus, _cores(snap, node_cpus, everything, notes), _sockets(snap, node_cpus, notes), notes,
                  pool_of)


def _cores(snap, node_cpus, everything, notes) -> Dict[int, int]:
    """Each logical CPU -> the lowest logical CPU of its physical core (torch's choice of representative): from
    /sys's thread siblings, else from the core and thread counts, else from the shape of the NUMA CPU lists."""
    if snap.system.thread_siblings:
        core_of = {}
        for group in snap.system.thread_siblings:
            cpus = expand_cpulist(group)
            for cpu in cpus:
                core_of[cpu] = min(cpus)
        return core_of
    system = snap.system
    counted = system.cores and system.threads
    if counted and system.threads == system.cores:
        return {cpu: cpu for cpu in everything}
    if counted and system.threads == 2 * system.cores:
        notes.append("SMT siblings taken as CPU n and n + cores (Linux's x86 numbering); /sys would say for sure")
        return {cpu: cpu % system.cores for cpu in everything}
    half = _sibling_offset(node_cpus, everything)
    if half:
        notes.append(f"SMT inferred from the CPU lists: CPU n and n + {half} share a core")
        return {cpu: cpu % half for cpu in everything}
    if not system.cores:
        notes.append("SMT layout unknown: every logical CPU is counted as a core")
    return {cpu: cpu for cpu in everything}


def _sibling_offset(node_cpus: Dict[int, List[int]], everything) -> int:
    """n where every node's CPUs are two runs, the second the first's siblings (0-55,112-167: n = 112); 0 when the
    lists do not show it (one contiguous run tells nothing)."""
    half = (max(everything) + 1) // 2 if everything else 0
    if not everything or len(everything) != 2 * half:
        return 0
    paired = all((cpu < half) == (cpu + half in cpus) for cpus in node_cpus.values() for cpu in cpus if cpu < half)
    split = all(len(compress_cpulist(cpus).split(",")) == 2 for cpus in node_cpus.values())
    upper = all(any(c >= half for c in cpus) for cpus in node_cpus.values())
    return half if paired and split and upper else 0


def _sockets(snap, node_cpus, notes) -> Dict[int, int]:
    nodes = sorted(n for n in node_cpus if n >= 0)
    sockets = snap.system.sockets
    if sockets and len(nodes) % sockets == 0:
        per = len(nodes) // sockets
        if per > 1:
            notes.append(f"{per} NUMA nodes per socket, in node order")
        return {node: i // per for i, node in enumerate(nodes)}
    if len(nodes) > 1:
        notes.append("socket count unknown: each NUMA node taken as a socket")
    return {node: i for i, node in enumerate(nodes)}


def gpu_numa_nodes(snap: Snapshot, gpus: List[int]) -> Dict[int, Optional[int]]:
    """topo -m's NUMA Affinity; else the node whose CPUs are the GPU's CPU Affinity. NVML's own NUMA id is the
    GPU's memory node on coherent platforms (Grace), not the CPUs' node, so it is not used here."""
    topo = snap.topology
    nodes: Dict[int, Optional[int]] = {}
    cpus_of = {n.node: expand_cpulist(n.cpulist) for n in snap.numa_nodes or []}
    for index in gpus:
        node = topo.numa_affinity.get(f"GPU{index}") if topo else None
        if node is None and topo and topo.cpu_affinity.get(f"GPU{index}"):
            affinity = set(expand_cpulist(topo.cpu_affinity[f"GPU{index}"]))
            node = next((n for n, cpus in cpus_of.items() if cpus and set(cpus) == affinity), None)
        nodes[index] = node if node is not None and node >= 0 else None
    return nodes


def _gpus(snap: Snapshot) -> Dict[int, Optional[str]]:
    gpus = {g.index: g.pci_bus_id for g in snap.gpus or [] if g.index is not None}
    for name in snap.topology.gpus() if snap.topology else []:
        gpus.setdefault(int(name[3:]), None)
    return dict(sorted(gpus.items()))


def visible_gpus(spec: Optional[str], snap: Snapshot) -> Optional[List[int]]:
    """CUDA_VISIBLE_DEVICES as nvidia-smi indices, in CUDA's order (local rank i drives the i-th), read as CUDA reads
    it (parsers.values.cuda_visible). None when unset: every GPU. An entry CUDA would stop at is said, not
    skipped: BadInput naming it."""
    from .parsers.values import cuda_visible, cuda_visible_problem
    if spec is None:
        return None
    by_uuid = {g.uuid: g.index for g in snap.gpus or [] if g.uuid and g.index is not None}
    gpus = cuda_visible(spec, list(_gpus(snap)), by_uuid)
    problem = cuda_visible_problem(spec, gpus)
    if problem:
        raise BadInput(f"CUDA_VISIBLE_DEVICES={spec!r}: {problem}")
    return gpus


def make_plan(snap: Snapshot, nproc: Optional[int] = None, mode: str = "exclusive",
              visible: Optional[Sequence[int]] = None, allowed: Optional[Set[int]] = None) -> LaunchPlan:
    """`visible`: the GPUs the ranks see (CUDA_VISIBLE_DEVICES as indices, see visible_gpus), local rank i on the
    i-th; `allowed`: the CPUs the job may use. torch's --numa-binding divides the same way."""
    if mode not in MODES:
        raise BadInput(f"binding mode {mode}: expected one of {', '.join(MODES)}")
    gpus = _chosen_gpus(snap, nproc, visible)
    indexes = list(gpus)[: nproc or len(gpus)]
    reported = gpu_numa_nodes(snap, indexes)
    layout = cpu_layout(snap, reported, allowed)
    if not layout.node_cpus:
        raise BadInput("no CPU layout: give numactl -H, lscpu or nvidia-smi topo -m output (or run on the host)")
    numa = _resolved_numa(snap, reported, layout)
    if gpus:
        placed = [(i, _home(numa[i], layout.pool_of.get(i), layout)) for i in indexes]
    else:
        nodes = sorted(layout.node_cpus)
        placed = [(None, nodes[r * len(nodes) // nproc]) for r in range(nproc)]
    ranks = [_rank(r, gpu, node, gpus.get(gpu) if gpu is not None else None, placed, layout, mode)
             for r, (gpu, node) in enumerate(placed)]
    empty = [r.local_rank for r in ranks if not r.cpus]
    if empty:
        raise BadInput(f"{len(ranks)} ranks do not fit the {len({c for cs in layout.node_cpus.values() for c in cs})} "
                       f"CPUs available: local rank {empty[0]} would get none (fewer ranks, or mode 'node')")
    _assign_nics(snap, ranks)
    hcas = _hca_list(snap, ranks)
    for rank in ranks:
        rank.env = _env(rank, bool(gpus), hcas)
    host = snap.system.hostname or "host"
    findings = plan_findings(host, snap, ranks, numa, layout)
    every_gpu = len(indexes) == len(gpus)       # torch splits a node's cores among all its GPUs, used or not
    return LaunchPlan(host, mode, ranks, findings, layout.notes,
                      _torchrun(ranks, mode, numa, bool(gpus), list(gpus)) if every_gpu else None)


def _chosen_gpus(snap: Snapshot, nproc: Optional[int], visible: Optional[Sequence[int]]) -> Dict[int, Optional[str]]:
    """The GPUs the ranks may use (index -> bus id), after checking the rank count against them."""
    gpus = _gpus(snap)
    if visible is not None:
        unknown = [g for g in visible if g not in gpus]
        if unknown:
            raise BadInput(f"visible GPUs {list(visible)}: the host has no GPU {unknown[0]} "
                           f"(it has {', '.join(map(str, gpus)) or 'none'})")
        gpus = {g: gpus[g] for g in visible}
    if nproc is not None and nproc < 1:
        raise BadInput(f"ranks per node {nproc}: expected 1 or more")
    if gpus and nproc is not None and nproc > len(gpus):
        raise BadInput(f"{nproc} ranks per node: the host has {len(gpus)} GPUs{' visible' if visible is not None else ''} "
                       "(one rank per GPU)")
    if not gpus and nproc is None:
        raise BadInput(lambda name: f"no GPUs found: give the number of CPU ranks per node to plan with {name('ranks')} N")
    return gpus


def _resolved_numa(snap: Snapshot, numa: Dict[int, Optional[int]], layout: Layout) -> Dict[int, Optional[int]]:
    """On a host of one NUMA node, a GPU whose node is unknown (N/A, -1) can only be on that one, as torch also
    reads it."""
    unknown = [g for g, n in numa.items() if n is None]
    if unknown and layout.real_nodes() and len(layout.node_cpus) == 1 and not layout.multi_node(snap.system.sockets):
        only = layout.real_nodes()[0]
        layout.notes.append(f"GPUs {', '.join(map(str, unknown))}: NUMA node not reported; the host's only node {only}")
        return {g: only if n is None else n for g, n in numa.items()}
    return numa


def _home(node: Optional[int], pool: Optional[int], layout: Layout) -> Optional[int]:
    """The GPU's node, or its CPU pool; None when none of its node's CPUs are ours to use (it is then bound to
    every CPU we have, as a GPU of unknown node is)."""
    home = node if node is not None else pool
    return home if home is None or home in layout.node_cpus else None


def _owned(layout: Layout, node: Optional[int], mode: str, slot: int, sharing: int) -> List[int]:
    if node is None:
        # unknown node: every CPU (torch would take node 0, wrong on a multi-node host; plan.gpu-numa-unknown)
        return sorted({cpu for cpus in layout.node_cpus.values() for cpu in cpus})
    if mode == "node" or (mode == "socket" and node < 0):
        return layout.node_cpus.get(node, [])
    if mode == "socket" and node >= 0:
        socket = layout.socket_of.get(node)
        return sorted(cpu for n, cpus in layout.node_cpus.items() if layout.socket_of.get(n) == socket for cpu in cpus)
    cores: Dict[int, List[int]] = {}
    for cpu in layout.node_cpus.get(node, []):
        cores.setdefault(layout.core_of.get(cpu, cpu), []).append(cpu)
    ordered = [cores[key] for key in sorted(cores)]
    per, extra = divmod(len(ordered), sharing)
    start = slot * per + min(slot, extra)
    return sorted(cpu for core in ordered[start:start + per + (1 if slot < extra else 0)] for cpu in core)


def _rank(r: int, gpu: Optional[int], node: Optional[int], bus: Optional[str],
          placed: List[Tuple[Optional[int], Optional[int]]], layout: Layout, mode: str) -> Rank:
    # ranks come in GPU index order: this rank's slot among its node's ranks is how many came before it
    slot = sum(1 for p in placed[:r] if p[1] == node)
    cpus = _owned(layout, node, mode, slot, sum(1 for p in placed if p[1] == node))
    physical = len({layout.core_of.get(cpu, cpu) for cpu in cpus})
    if mode != "exclusive" or node is None:      # ranks share these CPUs: each gets its part of the threads
        physical = max(1, physical // len([p for p in placed if _same_pool(layout, mode, p[1], node)]))
    real = node if node is not None and node >= 0 else None          # a CPU pool is not a NUMA node
    return Rank(local_rank=r, gpu=gpu, bus_id=bus, numa_node=real, cpus=cpus, physical_cores=physical,
                memory_node=real, dataloader_workers=max(1, physical - 1))


def _same_pool(layout: Layout, mode: str, a: Optional[int], b: Optional[int]) -> bool:
    if mode == "socket" and a is not None and b is not None:
        return layout.socket_of.get(a) == layout.socket_of.get(b)
    return a == b


def _nic_name(topo, device: str) -> str:
    return topo.nic_names.get(device, device)


def _assign_nics(snap: Snapshot, ranks: List[Rank]) -> None:
    """Each GPU's nearest NIC by path (PIX > PXB > PHB > NODE > SYS); among equals the one fewest ranks use yet,
    then the lowest index. A port the host reports down is not a candidate."""
    topo = snap.topology
    if not topo or not topo.nics():
        return
    down = {d.name for d in snap.rdma_devices or [] if d.state and "ACTIVE" not in d.state.upper()}
    load: Dict[str, int] = {}
    for rank in ranks:
        if rank.gpu is None:
            continue
        row = topo.matrix.get(f"GPU{rank.gpu}", {})
        options = [(PATH_ORDER[row[nic]], i, nic) for i, nic in enumerate(topo.nics())
                   if row.get(nic) in PATH_ORDER and _nic_name(topo, nic) not in down]
        if not options:
            continue
        best = min(o[0] for o in options)
        _, _, nic = min((load.get(n, 0), i, n) for d, i, n in options if d == best)
        load[nic] = load.get(nic, 0) + 1
        rank.nic, rank.nic_path = _nic_name(topo, nic), row[nic]


def _hca_list(snap: Snapshot, ranks: List[Rank]) -> Optional[str]:
    """One NCCL_IB_HCA for every rank: NCCL requires the same HCA list on all ranks (NVIDIA/nccl#1478) and picks
    the nearest NIC per GPU itself (PXN needs to see them all). The NICs some rank is nearest to, in topo order."""
    used = {r.nic for r in ranks if r.nic}
    if not used:
        return None
    order = [_nic_name(snap.topology, n) for n in snap.topology.nics()] if snap.topology else []
    return "=" + ",".join(sorted(used, key=lambda nic: (order.index(nic) if nic in order else len(order), nic)))


def _env(rank: Rank, with_gpus: bool, hcas: Optional[str] = None) -> Dict[str, str]:
    env = {"OMP_NUM_THREADS": str(rank.physical_cores), "MKL_NUM_THREADS": str(rank.physical_cores),
           "GPUPREP_DATALOADER_WORKERS": str(rank.dataloader_workers)}
    if with_gpus:
        env["CUDA_DEVICE_ORDER"] = "PCI_BUS_ID"      # CUDA's device i is nvidia-smi's GPU i
    if hcas:
        env["NCCL_IB_HCA"] = hcas                     # '=': exactly these devices, not every name they prefix
    return env


def _torchrun(ranks: List[Rank], mode: str, numa: Dict[int, Optional[int]], with_gpus: bool,
              order: List[int]) -> Optional[str]:
    """torchrun binds the same CPUs only when every GPU's node is known (it reads -1 as node 0) and rank i
    drives the i-th visible GPU (it binds by LOCAL_RANK)."""
    if not with_gpus or any(numa.get(r.gpu) is None for r in ranks) \
            or any(r.gpu != order[r.local_rank] for r in ranks):
        return None
    return shlex.join(["torchrun", f"--nproc-per-node={len(ranks)}", f"--numa-binding={mode}", "train.py"])


def launch_line(nproc: int, plan_file: str = "plan.json") -> str:
    return shlex.join(["torchrun", f"--nproc-per-node={nproc}", "--no-python", "gpuprep", "launch",
                       "--plan", plan_file, "--", "python", "train.py"])


# The ids plan_findings reports (rules/ids.py gathers them; it checks each finding against them).
PLAN_IDS = frozenset({"plan.gpu-numa-unknown", "plan.uneven-gpus", "plan.nic-remote", "plan.few-cores"})


def plan_findings(host: str, snap: Snapshot, ranks: List[Rank], numa: Dict[int, Optional[int]],
                  layout: Layout) -> List[Finding]:
    findings: List[Finding] = []
    multi_node = layout.multi_node(snap.system.sockets)
    unknown = [g for g, n in numa.items() if n is None]
    if unknown and multi_node:
        findings.append(Finding(
            "plan.gpu-numa-unknown", "warn", host, "GPUs whose NUMA node is unknown on a multi-node host",
            {"gpus": unknown, "numa_nodes": layout.real_nodes()},
            "These ranks are bound to every CPU; torchrun --numa-binding would read the node as 0. On a VM, "
            "expose the host's NUMA layout (vNUMA) with each GPU's node; on bare metal check the BIOS (NUMA per socket)"))
    # node ids start at 0: a GPU on node 1 means a node 0 exists, even when no capture lists its CPUs
    nodes = range(max(layout.real_nodes(), default=-1) + 1)
    counts = {node: sum(1 for n in numa.values() if n == node) for node in nodes}
    if numa and not unknown and len(counts) > 1 and len(set(counts.values())) > 1:
        findings.append(Finding(
            "plan.uneven-gpus", "warn", host, "GPUs are spread unevenly over the NUMA nodes",
            {"gpus_per_node": {f"node{n}": c for n, c in sorted(counts.items())}},
            "Ranks on the crowded node share fewer cores and its memory bandwidth; move GPUs between sockets or "
            "plan DataLoader workers from the crowded node's cores"))
    remote = [{"rank": r.local_rank, "gpu": r.gpu, "nic": r.nic} for r in ranks if r.nic_path in ("SYS", "SOC")]
    if remote:
        findings.append(Finding(
            "plan.nic-remote", "warn", host, "Ranks whose nearest RDMA NIC is on the other socket",
            {"ranks": remote},
            "Their traffic crosses the inter-socket link; put a NIC on that socket's PCIe switch, or accept the "
            "lower bandwidth (NCCL_CROSS_NIC=1 lets rings use any NIC)"))
    findings += _few_cores(host, ranks)
    return declared(plan_findings, findings)


def _few_cores(host: str, ranks: List[Rank]) -> List[Finding]:
    few = [{"rank": r.local_rank, "physical_cores": r.physical_cores} for r in ranks
           if r.physical_cores < MIN_CORES_PER_RANK]
    if not few:
        return []
    named = ", ".join(f"rank {r['rank']} has {r['physical_cores']}" for r in few[:8]) + (" ..." if len(few) > 8 else "")
    return [Finding("plan.few-cores", "warn", host, f"Ranks with fewer than {MIN_CORES_PER_RANK} physical cores: {named}",
                    {"ranks": few, "threshold": MIN_CORES_PER_RANK},
                    "The rank's own threads and its DataLoader workers compete for them; fewer ranks per node, fewer "
                    "workers, or a host with more cores per GPU")]


plan_findings.ids = PLAN_IDS     # type: ignore[attr-defined]


_RANK_ENV = re.compile(r"[0-9]{1,6}")


def local_rank(environ: Dict[str, str]) -> int:
    value = environ.get("LOCAL_RANK", "0")
    if not _RANK_ENV.fullmatch(value):
        raise BadInput(f"LOCAL_RANK={value!r}: expected a whole number (torchrun sets it)")
    return int(value)
