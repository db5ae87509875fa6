"""Drift across a fleet: the facts that should be the same on every node of a multi-node job, grouped by
value, and the hosts that differ from the majority (or from a chosen baseline). Pure: snapshots in,
findings out. An unknown value (None) is never drift: a host that cannot tell is left out of the vote.

Severity is what the difference does to a multi-node job: a different driver, CUDA, NCCL or PyTorch, GPU
model or count, MIG mode or NCCL_* setting can hang or break collectives (fail); firmware, clocks, power,
links, kernel and the rest make one node slower or behave differently (warn).

Peers: what the hardware itself defines (GPU count, NVLinks, PCIe link, power limit, firmware, CPUs, memory,
NICs) is compared among the hosts of the same GPU model only. A PCIe H100 has no NVLink that an SXM H100 has:
that is two SKUs, not drift; an SXM host with fewer GPUs or links than the other SXM hosts is."""
from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from typing import Callable, Dict, Iterable, List, Optional

from ..snapshot import Snapshot, gpu_count
from . import Finding


def _gpu_values(snap: Snapshot, attribute: Callable) -> Optional[str]:
    """The distinct values of one GPU property across the host's GPUs, sorted; None when no GPU tells."""
    values = sorted({str(v) for v in (attribute(g) for g in snap.gpus or []) if v is not None})
    return ", ".join(values) if values else None


def _onoff(value: Optional[bool]) -> Optional[str]:
    return None if value is None else ("on" if value else "off")


def _text(value) -> Optional[str]:
    return str(value) if value not in (None, "") else None


# Parameters of the kernel command line that name this host's own disks and images: never drift.
_HOST_OWN_PARAMETERS = ("BOOT_IMAGE=", "root=", "initrd=", "resume=", "resume_offset=", "cryptdevice=",
                        "rd.lvm.lv=", "rd.luks.uuid=", "ip=", "hostname=")


def _cmdline(snap: Snapshot) -> Optional[str]:
    text = snap.system.kernel_cmdline
    if not text:
        return None
    kept = sorted(p for p in text.split() if not p.startswith(_HOST_OWN_PARAMETERS))
    return " ".join(kept) or "(none)"


def _gpu_count(snap: Snapshot) -> Optional[str]:
    """What the facts count, unknown (never 0) where they list no GPU: NVML down counts none, but the GPUs are
    there (driver.nvml-unavailable says so)."""
    count = gpu_count(snap)
    return None if count is None else str(count)


def _active_links(gpu) -> Optional[int]:
    if gpu.nvlinks is None:
        return None
    return sum(1 for link in gpu.nvlinks if link.active)


def _app_clocks(gpu) -> Optional[str]:
    if gpu.app_clock_graphics_mhz is None or gpu.app_clock_mem_mhz is None:
        return None
    return f"{gpu.app_clock_graphics_mhz}/{gpu.app_clock_mem_mhz} MHz"


def _pcie(gpu) -> Optional[str]:
    if gpu.pcie_gen_max is None or gpu.pcie_width_max is None:
        return None
    return f"Gen{gpu.pcie_gen_max} x{gpu.pcie_width_max}"


def _numa(snap: Snapshot) -> Optional[str]:
    if not snap.numa_nodes:
        return None
    gpu_nodes = sorted({g.numa_node for g in snap.gpus or [] if g.numa_node is not None})
    where = f"; GPUs on node(s) {','.join(map(str, gpu_nodes))}" if gpu_nodes else ""
    return f"{len(snap.numa_nodes)} node(s){where}"


def _prefixed_env(snap: Snapshot, prefixes: tuple) -> Optional[str]:
    if snap.env is None:
        return None
    pairs = sorted((k, v) for k, v in snap.env.items() if k.startswith(prefixes))
    return " ".join(f"{k}={v}" for k, v in pairs) or "(none set)"


def _torch(snap: Snapshot) -> Optional[str]:
    torch = snap.software.torch
    if torch is None or not torch.version:
        return None
    return torch.version + (f" (CUDA {torch.cuda})" if torch.cuda else "")


def _toolkits(snap: Snapshot) -> Optional[str]:
    kits = snap.software.cuda_toolkits
    if kits is None:
        return None
    return ", ".join(sorted({k.version or "?" for k in kits})) or "(none)"


def _runtimes(snap: Snapshot) -> Optional[str]:
    c = snap.container
    if not c.docker_reachable:
        return None
    return f"{', '.join(c.runtimes or []) or '(none)'} (default {c.default_runtime or '?'})"


def _tuned(snap: Snapshot) -> Optional[str]:
    """The settings gpuprep's system_tuning role sets, as one value."""
    s = snap.settings
    parts = [("governor", ",".join(s.cpu_governors) if s.cpu_governors else None),
             ("thp", s.thp_enabled), ("numa_balancing", s.numa_balancing), ("swappiness", s.swappiness),
             ("memlock", s.memlock_soft)]
    known = [f"{k}={v}" for k, v in parts if v is not None]
    return " ".join(known) or None


def _rdma_values(snap: Snapshot, attribute: Callable) -> Optional[str]:
    """One RDMA port fact across the host's ports, counted: 'MT4129 x8, MT4125 x2'; None when no port says."""
    from collections import Counter
    values = Counter(str(attribute(p)) for p in snap.rdma_devices or [] if attribute(p) is not None)
    return ", ".join(f"{v} x{n}" for v, n in sorted(values.items())) or None


def _rate_text(port) -> Optional[str]:
    return None if port.rate_gbps is None else f"{port.rate_gbps:g} Gb/s {port.link_layer or ''}".strip()


def _memory_gib(snap: Snapshot) -> Optional[float]:
    mib = snap.system.memory_total_mib
    return mib / 1024 if mib else None


@dataclass(frozen=True)
class Fact:
    id: str
    severity: str
    label: str
    value: Callable[[Snapshot], object]
    tolerance: float = 0.0        # numbers within this fraction of each other are the same value
    per_sku: bool = False         # the hardware defines it: compared among hosts of the same GPU model only


FACTS: List[Fact] = [Fact(*row) for row in [
    ("drift.gpu-model", "fail", "GPU model", lambda s: _gpu_values(s, lambda g: g.name)),
    ("drift.gpu-count", "fail", "GPU count", _gpu_count, 0.0, True),
    ("drift.driver", "fail", "NVIDIA driver", lambda s: _text(s.software.driver_version)),
    ("drift.cuda-driver", "fail", "CUDA driver API", lambda s: _text(s.software.cuda_driver_version)),
    ("drift.mig-mode", "fail", "MIG mode", lambda s: _gpu_values(s, lambda g: _onoff(g.mig_mode_current))),
    ("drift.nccl", "fail", "NCCL", lambda s: _text(s.software.nccl_version)),
    ("drift.torch", "fail", "PyTorch", _torch),
    ("drift.nccl-env", "fail", "NCCL_* environment", lambda s: _prefixed_env(s, ("NCCL_",))),
    ("drift.vbios", "warn", "VBIOS", lambda s: _gpu_values(s, lambda g: g.vbios_version), 0.0, True),
    ("drift.inforom", "warn", "InfoROM image", lambda s: _gpu_values(s, lambda g: g.inforom_image), 0.0, True),
    ("drift.gsp-firmware", "warn", "GSP firmware", lambda s: _gpu_values(s, lambda g: g.gsp_firmware), 0.0, True),
    ("drift.ecc-mode", "warn", "ECC mode", lambda s: _gpu_values(s, lambda g: _onoff(g.ecc_mode_current))),
    ("drift.persistence", "warn", "persistence mode",
     lambda s: _gpu_values(s, lambda g: _onoff(g.persistence_mode))),
    ("drift.app-clocks", "warn", "application clocks", lambda s: _gpu_values(s, _app_clocks), 0.0, True),
    ("drift.power-limit", "warn", "power limit",
     lambda s: _gpu_values(s, lambda g: None if g.power_limit_w is None else f"{g.power_limit_w:.0f} W"), 0.0, True),
    ("drift.pcie-link", "warn", "PCIe link (max)", lambda s: _gpu_values(s, _pcie), 0.0, True),
    ("drift.nvlink", "warn", "active NVLinks per GPU", lambda s: _gpu_values(s, _active_links), 0.0, True),
    ("drift.kernel", "warn", "kernel", lambda s: _text(s.system.kernel)),
    ("drift.kernel-cmdline", "warn", "kernel command line", _cmdline),
    ("drift.os", "warn", "OS", lambda s: _text(" ".join(p for p in (s.system.os_name, s.system.os_version) if p))),
    ("drift.cpu-model", "warn", "CPU model", lambda s: _text(s.system.cpu_model), 0.0, True),
    ("drift.cpu-cores", "warn", "CPU cores", lambda s: _text(s.system.cores), 0.0, True),
    ("drift.memory", "warn", "memory (GiB)", _memory_gib, 0.02, True),
    ("drift.numa", "warn", "NUMA layout", _numa, 0.0, True),
    ("drift.cuda-toolkit", "warn", "CUDA toolkits", _toolkits),
    ("drift.cudnn", "warn", "cuDNN", lambda s: _text(s.software.cudnn_version)),
    ("drift.container-toolkit", "warn", "nvidia-container-toolkit",
     lambda s: _text(s.software.container_toolkit_version)),
    ("drift.docker-runtimes", "warn", "Docker runtimes", _runtimes),
    ("drift.omp-env", "warn", "OMP_* environment", lambda s: _prefixed_env(s, ("OMP_",))),
    ("drift.system-tuning", "warn", "tuned settings", _tuned),
    # the NICs a job's all-reduce crosses: a part, firmware or rate unlike the fleet's makes this the slowest rank
    ("drift.nic-model", "warn", "RDMA NIC parts", lambda s: _rdma_values(s, lambda p: p.model), 0.0, True),
    ("drift.nic-firmware", "warn", "RDMA NIC firmware", lambda s: _rdma_values(s, lambda p: p.firmware), 0.0, True),
    ("drift.nic-rate", "warn", "RDMA port rates", lambda s: _rdma_values(s, _rate_text), 0.0, True),
]]
DRIFT_IDS = frozenset(f.id for f in FACTS)
# A host of the fleet that could not be checked (unreachable, or its probe failed). Not a check: it cannot
# be waived with --skip, since a fleet whose unreachable hosts vanish from the verdict reads healthy.
UNCHECKED = ("fleet.host-unchecked", "fail", "host could not be checked")


@dataclass
class Drift:
    """One fact across the fleet: its value on each host that could tell, the reference value (the majority's
    or the baseline's; None when the hosts split with no majority) and the hosts that differ from it."""
    fact: Fact
    values: Dict[str, str]
    reference: Optional[str]
    odd: List[str] = field(default_factory=list)
    unknown: List[str] = field(default_factory=list)
    sku: Optional[str] = None       # the GPU model whose hosts were compared (a per-SKU fact)

    def groups(self) -> Dict[str, List[str]]:
        out: Dict[str, List[str]] = {}
        for host, value in sorted(self.values.items()):
            out.setdefault(value, []).append(host)
        return dict(sorted(out.items(), key=lambda kv: (-len(kv[1]), kv[0])))

    def to_dict(self) -> dict:
        return {"id": self.fact.id, "fact": self.fact.label, "severity": self.fact.severity, "sku": self.sku,
                "reference": self.reference, "odd_hosts": list(self.odd), "unknown_hosts": list(self.unknown),
                "groups": [{"value": v, "hosts": hosts} for v, hosts in self.groups().items()]}


def _cluster(numbers: Dict[str, float], tolerance: float) -> Dict[str, str]:
    """Numbers within `tolerance` of the first of their run are one value (memory reported a few MiB apart
    by two identical servers is not drift); each run is named by its rounded first member."""
    out: Dict[str, str] = {}
    start: Optional[float] = None
    for host, number in sorted(numbers.items(), key=lambda kv: kv[1]):
        if start is None or number > start * (1 + tolerance):
            start = number
        out[host] = f"{start:.0f}"
    return out


def _values(fact: Fact, snapshots: Dict[str, Snapshot]) -> Dict[str, Optional[str]]:
    raw = {host: fact.value(snap) for host, snap in snapshots.items()}
    if fact.tolerance:
        known = _cluster({h: float(v) for h, v in raw.items() if v is not None}, fact.tolerance)
        return {h: known.get(h) for h in raw}
    return {h: None if v is None else str(v) for h, v in raw.items()}


def _sku(snap: Snapshot) -> Optional[str]:
    return _gpu_values(snap, lambda g: g.name)


def _peers(fact: Fact, snapshots: Dict[str, Snapshot]) -> List[tuple]:
    """(GPU model or None, the hosts compared): the whole fleet, or for a fact the hardware defines, each model's
    hosts apart (the hosts whose GPU model is not known, GPU-less or NVML down, are one group of their own)."""
    if not fact.per_sku:
        return [(None, snapshots)]
    groups: Dict[Optional[str], Dict[str, Snapshot]] = {}
    for host, snap in snapshots.items():
        groups.setdefault(_sku(snap), {})[host] = snap
    return sorted(groups.items(), key=lambda kv: kv[0] or "")


def _drift(fact: Fact, snapshots: Dict[str, Snapshot], reference: Optional[str], sku: Optional[str]):
    values = _values(fact, snapshots)
    known = {h: v for h, v in values.items() if v is not None}
    distinct = set(known.values())
    if len(distinct) < 2 and (reference is None or distinct <= {reference}):
        return None
    if reference is None:
        ranked = Counter(known.values()).most_common()
        unique_top = len(ranked) == 1 or ranked[0][1] > ranked[1][1]
        reference = ranked[0][0] if unique_top else None
    odd = sorted(h for h, v in known.items() if reference is None or v != reference)
    return Drift(fact, known, reference, odd, sorted(h for h, v in values.items() if v is None), sku)


def fleet_drift(snapshots: Dict[str, Snapshot], baseline: Optional[Snapshot] = None) -> List[Drift]:
    """Every fact on which the hosts (with known values) do not all agree: the whole fleet, or the hosts of one GPU
    model for what the hardware defines. `baseline` is the reference instead of the majority (for a per-model fact,
    of its own model's hosts): a host of the fleet, or a snapshot of a known-good node."""
    found = []
    for fact in FACTS:
        for sku, peers in _peers(fact, snapshots):
            use = baseline is not None and (sku is None or _sku(baseline) == sku)
            drift = _drift(fact, peers, _values(fact, {"": baseline})[""] if use else None, sku)
            if drift is not None:
                found.append(drift)
    return found


def drift_findings(drifts: Iterable[Drift], baseline_name: Optional[str] = None) -> List[Finding]:
    """One finding per host that differs (subject: the host), or one for the fleet when it splits evenly.
    `baseline_name`: one host judged against a baseline snapshot (check --baseline FILE) of that name."""
    findings = []
    for d in drifts:
        fact = d.fact
        if d.reference is None:
            split = "; ".join(f"{v} on {', '.join(hosts)}" for v, hosts in d.groups().items())
            whose = f"the {d.sku} hosts" if d.sku else "the fleet"
            findings.append(Finding(fact.id, fact.severity, "fleet",
                                    f"{fact.label} splits {whose} with no majority: {split}",
                                    {"groups": {v: hosts for v, hosts in d.groups().items()}},
                                    _remedy(fact), "fleet drift"))
            continue
        agreeing = sum(1 for v in d.values.values() if v == d.reference)
        peers = f"{d.sku} host(s)" if d.sku else "host(s)"
        for host in d.odd:
            against = (f"the baseline's {d.reference} ({baseline_name})" if baseline_name else
                       f"the fleet's {d.reference} ({agreeing} of {len(d.values)} {peers})")
            findings.append(Finding(fact.id, fact.severity, host,
                                    f"{fact.label} {d.values[host]} differs from {against}",
                                    {"value": d.values[host], "fleet_value": d.reference, "hosts_agreeing": agreeing},
                                    _remedy(fact), "fleet drift"))
    return findings


def _remedy(fact: Fact) -> str:
    if fact.severity == "fail":
        return (f"bring {fact.label} in line before a multi-node job (gpuprep apply --tags driver_pin pins the "
                "driver; images/venvs carry CUDA, NCCL and PyTorch), or leave the odd host out of the job")
    return f"align {fact.label} at the next maintenance window; until then expect the odd host to run differently"
