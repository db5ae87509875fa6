"""net.*: the RDMA ports a multi-node job runs on (InfiniBand and RoCE): up and active, at the rate their siblings
run, on a full PCIe link, named rightly in NCCL_IB_HCA, with a GID on RoCE. Facts per port from /sys or from
ibstat / ibstatus / ibv_devinfo / ibdev2netdev captures, each tool with its own words for the same state."""
from __future__ import annotations

import re
from typing import Dict, Optional

from ..parsers.topo import nic_device_name
from . import Finding, host, rule, shell_word
from .topology import RDMA_PREFIXES

def _word(text: Optional[str]) -> str:
    """'4: ACTIVE', 'Active', 'PORT_ACTIVE (4)' -> 'ACTIVE'; '5: LinkUp', 'LINK_UP (5)' -> 'LINKUP'."""
    text = re.sub(r"\(\d+\)|^\s*\d+\s*:", "", text or "").upper().replace("PORT_", "")
    return re.sub(r"[^A-Z]", "", text)


def port_active(port) -> Optional[bool]:
    """True/False from the port state, else from ibdev2netdev's (Up)/(Down); None when nothing says."""
    if port.state:
        return _word(port.state) == "ACTIVE"
    return port.netdev_up


def link_up(port) -> Optional[bool]:
    return None if not port.phys_state else _word(port.phys_state) == "LINKUP"


def subject(port) -> str:
    return f"{port.name} port {port.port or 1}" + (f" ({port.netdev})" if port.netdev else "")


class HcaList:
    """NCCL_IB_HCA as NCCL reads it: comma-separated `name[:port]` entries, each a prefix of device names
    ('mlx5' selects mlx5_0..mlx5_11) unless the list starts with '=' (exact names)."""

    def __init__(self, value: str):
        self.exact = value.startswith("=")
        items = [item.strip() for item in value.lstrip("=").split(",") if item.strip()]
        self.entries = [item.split(":")[0].strip() for item in items]
        self.ports = {item.split(":")[0].strip(): item.split(":")[1].strip() for item in items if ":" in item}

    def names_port(self, name: str, port: Optional[int]) -> bool:
        """The list names this very port (`mlx5_0:2`), not only its device."""
        return port is not None and self.ports.get(name) == str(port)

    def selects(self, name: str) -> bool:
        return any(name == e if self.exact else name.startswith(e) for e in self.entries)

    def unmatched(self, names) -> list:
        return [e for e in self.entries if not any(n == e if self.exact else n.startswith(e) for n in names)]


def nccl_hcas(snap) -> Optional[HcaList]:
    """The devices NCCL_IB_HCA selects; None when it is unset or an exclusion list (^)."""
    value = (snap.env or {}).get("NCCL_IB_HCA")
    if not value or value.startswith("^"):
        return None
    return HcaList(value)


def _nccl_would_use(port, wanted: Optional[HcaList]) -> bool:
    """NCCL_IB_HCA's devices when it names them; otherwise every InfiniBand port (RoCE/Ethernet ports are as often
    storage or management as compute, so they only warn)."""
    if wanted is not None:
        return wanted.selects(port.name)
    return (port.link_layer or "").lower() == "infiniband"


def _costs_nccl(port, wanted: Optional[HcaList], serving: set) -> bool:
    """A down port NCCL would use. NCCL uses only ACTIVE ports: the uncabled second port of an HCA whose other port
    serves costs nothing, unless NCCL_IB_HCA names that very port."""
    spare = port.name in serving and not (wanted and wanted.names_port(port.name, port.port))
    return _nccl_would_use(port, wanted) and not spare


@rule("net.ib-port-down")
def ports_down(snap, ctx):
    ports = snap.rdma_devices or []
    wanted = nccl_hcas(snap)
    findings = []
    serving = {p.name for p in ports if port_active(p) and link_up(p) is not False}
    for port in ports:
        active, up = port_active(port), link_up(port)
        if active is not False and up is not False:
            continue
        severity = "fail" if _costs_nccl(port, wanted, serving) else "warn"
        state = ", ".join(v for v in (port.state, port.phys_state) if v) or ("netdev down" if port.netdev_up is False
                                                                              else "down")
        findings.append(Finding("net.ib-port-down", severity, subject(port), f"RDMA port not active: {state}",
                                {"state": port.state, "phys_state": port.phys_state, "link_layer": port.link_layer,
                                 "rate_gbps": port.rate_gbps, "nccl_ib_hca": (snap.env or {}).get("NCCL_IB_HCA")},
                                _remedy_down(port)))
    counted = [p for p in ports if port_active(p) is not None or link_up(p) is not None]
    if counted and not findings:
        return [Finding("net.ib-port-down", "pass", host(snap), f"{len(counted)} RDMA port(s) active")]
    return findings


def _remedy_down(port) -> str:
    phys = _word(port.phys_state)
    if phys == "POLLING":
        return ("No link partner answers: check the cable and transceiver, and the switch port (`ibstat`, "
                "`mlxlink -d " + shell_word(port.name) + "`)")
    if phys == "DISABLED":
        return "The port is administratively disabled: enable it (`mlxconfig`/switch), or take it out of NCCL_IB_HCA"
    if phys == "LINKUP":
        return ("The link is up but the port is not ACTIVE: no subnet manager has configured it (check opensm/UFM, "
                "and the partition key of a virtual function)")
    return "Bring the port up (cable, switch port, subnet manager) or take it out of NCCL_IB_HCA"


@rule("net.ib-rate")
def port_rate(snap, ctx):
    """An active port slower than the fastest active port of the same HCA part on this host (the degraded link
    that makes this node the slowest rank), or a port NCCL would use below the profile's min_rdma_gbps."""
    active = [p for p in snap.rdma_devices or [] if port_active(p) and p.rate_gbps]
    wanted = nccl_hcas(snap)
    fastest: Dict[tuple, float] = {}
    for port in active:
        key = (port.model, (port.link_layer or "").lower())
        fastest[key] = max(fastest.get(key, 0.0), port.rate_gbps)
    minimum = ctx.profile.get("min_rdma_gbps") or 0
    findings = []
    for port in active:
        top = fastest[(port.model, (port.link_layer or "").lower())]
        evidence = {"rate_gbps": port.rate_gbps, "fastest_same_part_gbps": top, "part": port.model,
                    "min_rdma_gbps": minimum or None}
        if minimum and port.rate_gbps < minimum and _nccl_would_use(port, wanted):
            findings.append(Finding("net.ib-rate", "fail", subject(port), f"RDMA port at {port.rate_gbps:g} Gb/s, "
                                    f"below the profile's {minimum:g} Gb/s", evidence, _REMEDY_RATE))
        elif port.rate_gbps < top:
            findings.append(Finding("net.ib-rate", "warn", subject(port), f"RDMA port at {port.rate_gbps:g} Gb/s "
                                    f"while its siblings ({port.model or 'same part'}) run at {top:g} Gb/s",
                                    evidence, _REMEDY_RATE))
    if active and not findings:
        rates = sorted({p.rate_gbps for p in active})
        return [Finding("net.ib-rate", "pass", host(snap),
                        f"{len(active)} active RDMA port(s) at {', '.join(f'{r:g}' for r in rates)} Gb/s")]
    return findings


_REMEDY_RATE = ("A link that trained at a lower rate: reseat or replace the cable/transceiver, check the switch "
                "port's speed, then `ibstat` again; every rank waits for the slowest link")


def _gts(text: Optional[str]) -> Optional[float]:
    match = re.match(r"\s*([0-9.]+)\s*GT/s", text or "")
    return float(match.group(1)) if match else None


@rule("net.nic-pcie")
def nic_pcie(snap, ctx):
    """The NIC's PCIe link below what it can do (a Gen5 x16 ConnectX-7 at x8 or Gen3 halves GPUDirect RDMA)."""
    findings, seen = [], set()
    for port in snap.rdma_devices or []:
        if port.name in seen:
            continue
        seen.add(port.name)
        speed, top = _gts(port.pcie_speed), _gts(port.pcie_speed_max)
        narrow = port.pcie_width and port.pcie_width_max and port.pcie_width < port.pcie_width_max
        if (speed and top and speed < top) or narrow:
            findings.append(Finding("net.nic-pcie", "warn", port.name,
                                    f"NIC PCIe link {port.pcie_speed} x{port.pcie_width}, below its "
                                    f"{port.pcie_speed_max} x{port.pcie_width_max}",
                                    {"current": f"{port.pcie_speed} x{port.pcie_width}",
                                     "max": f"{port.pcie_speed_max} x{port.pcie_width_max}"},
                                    "Reseat the NIC or move it to a slot wired for its full width and generation; "
                                    "check the BIOS PCIe settings of that slot"))
    return findings


@rule("net.nccl-ib-hca")
def nccl_ib_hca(snap, ctx):
    """NCCL_IB_HCA naming a device this host does not have: NCCL falls back to fewer NICs, or to sockets."""
    wanted = nccl_hcas(snap)
    if wanted is None or snap.rdma_devices is None:
        return []
    present = {p.name for p in snap.rdma_devices}
    missing = wanted.unmatched(present)
    evidence = {"NCCL_IB_HCA": snap.env.get("NCCL_IB_HCA"), "devices": sorted(present)}
    if missing:
        return [Finding("net.nccl-ib-hca", "fail", host(snap), f"NCCL_IB_HCA names {', '.join(missing)}, which "
                        "this host does not have", evidence,
                        "Set NCCL_IB_HCA to this host's devices (`gpuprep nccl-env` prints them), or leave it unset")]
    return [Finding("net.nccl-ib-hca", "pass", host(snap), "NCCL_IB_HCA names devices this host has", evidence)]


_ZERO_GID = re.compile(r"^[0:]+$")


@rule("net.roce-gid")
def roce_gid(snap, ctx):
    """An active RoCE port whose GID 0 is empty: no IP configured on its netdev, so RDMA CM and NCCL cannot use it."""
    wanted = nccl_hcas(snap)
    findings = []
    for port in snap.rdma_devices or []:
        if (port.link_layer or "").lower() != "ethernet" or not port_active(port) or port.gid is None:
            continue
        if _ZERO_GID.match(port.gid):
            findings.append(Finding("net.roce-gid", "fail" if wanted and wanted.selects(port.name) else "warn",
                                    subject(port), "RoCE port without a usable GID", {"gid0": port.gid},
                                    f"Give {port.netdev or 'its netdev'} an address (RoCE v2 needs an IP), then "
                                    "check `show_gids`"))
    return findings


# topo -m's words for the path from a NIC to a GPU, nearest first (SOC: SYS before CUDA 9); GPUDirect RDMA is fast
# over the first two
_PATHS = ("PIX", "PXB", "PHB", "NODE", "SYS")
_OLD_NAMES = {"SOC": "SYS"}


def _topo_paths(topo, name: str) -> Optional[list]:
    """The paths from the NIC `name` to every GPU in topo -m, or None when topo -m does not list it."""
    if not topo:
        return None
    columns = [c for c in topo.nics() if nic_device_name(topo, c) == name]
    if not columns:
        return None
    paths = [topo.matrix.get(gpu, {}).get(columns[0]) for gpu in topo.gpus()]
    return [_OLD_NAMES.get(p, p) for p in paths]


def _gpu_numa_nodes(snap) -> set:
    """The NUMA nodes the GPUs sit on (NVML, else topo -m's NUMA Affinity); -1 (a VM, no NUMA) counts as unknown."""
    nodes = {g.numa_node for g in snap.gpus or []}
    if snap.topology:
        nodes |= {snap.topology.numa_affinity.get(g) for g in snap.topology.gpus()}
    return {n for n in nodes if isinstance(n, int) and n >= 0}


def _placement(snap, topo_paths: Optional[list], numa_node: Optional[int]) -> Optional[tuple]:
    """(nearest path to a GPU, where that was read) for one NIC, or None when neither topo -m nor NUMA nodes say."""
    paths = [p for p in topo_paths or [] if p in _PATHS]
    if paths:
        return min(paths, key=_PATHS.index), "nvidia-smi topo -m"
    gpu_nodes = _gpu_numa_nodes(snap)
    if numa_node is None or numa_node < 0 or not gpu_nodes:
        return None
    return ("NODE" if numa_node in gpu_nodes else "SYS"), f"NUMA node {numa_node}, GPUs on {sorted(gpu_nodes)}"


def _rdma_nics(snap) -> Dict[str, Optional[int]]:
    """Each RDMA device of the host (from /sys or captures, and topo -m's NIC legend) with its NUMA node."""
    nics: Dict[str, Optional[int]] = {}
    for port in snap.rdma_devices or []:
        if nics.get(port.name) is None:
            nics[port.name] = port.numa_node
    if snap.topology:
        for column in snap.topology.nics():
            name = nic_device_name(snap.topology, column)
            if name.startswith(RDMA_PREFIXES):
                nics.setdefault(name, None)
    return nics


def _stranded_by_topo(topo, paths: list) -> list:
    """The GPUs whose every known path to an RDMA NIC is SYS in topo -m (`paths`: each NIC's, GPU by GPU)."""
    known = [[p[i] for p in paths if len(p) > i and p[i] in _PATHS] for i in range(len(topo.gpus()))]
    return [gpu for gpu, found in zip(topo.gpus(), known) if found and set(found) == {"SYS"}]


def _stranded_by_numa(gpus, nics: Dict[str, Optional[int]]) -> list:
    """The GPUs on a NUMA node without an RDMA NIC (both known)."""
    nic_nodes = {n for n in nics.values() if n is not None and n >= 0}
    if not nic_nodes:
        return []
    return [f"GPU{g.index}" for g in gpus or [] if g.numa_node is not None and 0 <= g.numa_node
            and g.numa_node not in nic_nodes]


def _stranded_gpus(snap, nics: Dict[str, Optional[int]], paths: Dict[str, Optional[list]]) -> list:
    """The GPUs with no RDMA NIC nearer than the CPU interconnect: NCCL carries their traffic through a far NIC."""
    if any(paths.values()):
        return _stranded_by_topo(snap.topology, [p for p in paths.values() if p])
    return _stranded_by_numa(snap.gpus, nics)


@rule("net.nic-placement")
def nic_placement(snap, ctx):
    """An RDMA NIC with no GPU on its PCIe switch or NUMA node: GPUDirect RDMA through it crosses the CPU
    interconnect (topo -m's SYS). Judged from topo -m where it lists the NIC, else from the NUMA nodes /sys and
    NVML give; only on hosts with GPUs. NCCL picks the NICs nearest each GPU, so such a NIC (often storage, as on
    DGX A100) is information; a warning where NCCL will use it: NCCL_IB_HCA names it, or some GPU has no nearer NIC."""
    if not snap.gpus and not (snap.topology and snap.topology.gpus()):
        return []
    nics, wanted = _rdma_nics(snap), nccl_hcas(snap)
    paths = {name: _topo_paths(snap.topology, name) for name in nics}
    stranded = _stranded_gpus(snap, nics, paths)
    findings, judged = [], 0
    for name, numa_node in sorted(nics.items()):
        placed = _placement(snap, paths[name], numa_node)
        if placed is None:
            continue
        judged += 1
        if placed[0] == "SYS":
            named = bool(wanted and wanted.selects(name))
            findings.append(_far_nic(name, placed[1], named or bool(stranded), stranded, snap))
    if judged and not findings:
        return [Finding("net.nic-placement", "pass", host(snap),
                        f"{judged} RDMA NIC(s), each with a GPU on its PCIe switch or NUMA node")]
    return findings


def _far_nic(name: str, read_from: str, used: bool, stranded: list, snap) -> Finding:
    return Finding("net.nic-placement", "warn" if used else "info", name,
                   "RDMA NIC with no GPU on its PCIe switch or NUMA node" +
                   (f"; NCCL carries {len(stranded)} GPU(s) through such a NIC" if stranded else ""),
                   {"nearest_gpu_path": "SYS", "read_from": read_from, "gpus_without_a_nearer_nic": stranded,
                    "nccl_ib_hca": (snap.env or {}).get("NCCL_IB_HCA")},
                   "GPUDirect RDMA through this NIC crosses the CPU interconnect: fine for storage; for training "
                   "traffic move it to a slot on a GPU's socket, or leave it out of NCCL_IB_HCA so NCCL uses the NICs "
                   "near each GPU")
