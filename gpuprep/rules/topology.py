"""topo.*: how GPUs reach each other and the network (from `nvidia-smi topo -m` and NVLink state)."""
from __future__ import annotations

from typing import List, Optional

from ..parsers.topo import gpu_pairs, nic_device_name
from .. import knowledge as kb
from ..parsers.lspci_vvv import acs_unreadable, is_gpu, redirecting, switch_ports_above
from . import Finding, all_gpus, gpu_subject, host, rule

_NEAR = ("PIX", "PXB")
RDMA_PREFIXES = ("mlx", "ib", "bnxt_re", "efa", "irdma")    # RDMA device names, as topo -m's legend gives them


@rule("topo.p2p-path")
def p2p_path(snap, ctx):
    topo = snap.topology
    if not topo or len(topo.gpus()) < 2:
        return []
    sys_pairs = [f"{a}-{b}" for a, b, link in gpu_pairs(topo) if link == "SYS"]
    not_nvlink = [f"{a}-{b}" for a, b, link in gpu_pairs(topo) if link and not link.startswith("NV")]
    findings = []
    if sys_pairs:
        findings.append(Finding("topo.p2p-path", "warn", host(snap),
                                f"{len(sys_pairs)} GPU pair(s) talk only across the CPU interconnect (SYS)",
                                {"pairs": sys_pairs},
                                "Keep a job's GPUs on one NUMA node (CUDA_VISIBLE_DEVICES), or use a host with NVLink/PCIe switches for multi-GPU training",
                                "nvidia-smi topo -m legend"))
    if ctx.profile.get("require_nvlink") and not_nvlink:
        findings.append(Finding("topo.p2p-path", "fail", host(snap),
                                f"{len(not_nvlink)} GPU pair(s) without NVLink; the profile wants NVLink between all",
                                {"pairs": not_nvlink}, "Use an NVLink/NVSwitch (SXM) system for this profile"))
    if not findings:
        findings.append(Finding("topo.p2p-path", "pass", host(snap), "Every GPU pair has a direct path",
                                {"links": sorted({l for _, _, l in gpu_pairs(topo) if l})}))
    return findings


@rule("topo.nvlink-inactive")
def nvlink_inactive(snap, ctx):
    """Links down beside links up are a fault. No link up at all is a fault where NVLink is part of the board
    (SXM) or other GPUs of the host have theirs up; with bridge-only NVLink it may just mean no bridge."""
    out = []
    any_up = any(l.active for g in all_gpus(snap) for l in g.nvlinks or [])
    source = "nvidia-smi nvlink --status"
    for gpu in all_gpus(snap):
        links = gpu.nvlinks
        if links is None:
            continue
        down = [l.link for l in links if l.active is False]
        if links and not down:
            out.append(Finding("topo.nvlink-inactive", "pass", gpu_subject(gpu), f"{len(links)} NVLinks active"))
        elif down and len(down) < len(links):
            out.append(Finding("topo.nvlink-inactive", "fail", gpu_subject(gpu),
                               f"{len(down)} of {len(links)} NVLinks inactive", {"inactive_links": down},
                               "Drain the node; reset the GPUs or reboot; if the links stay down, check the fabric "
                               "manager (`systemctl status nvidia-fabricmanager`) and reseat or RMA the baseboard",
                               source))
        elif (kb.gpu_model(gpu.name) or {}).get("nvlink_form") == "baseboard" or any_up:
            out.append(Finding("topo.nvlink-inactive", "fail", gpu_subject(gpu),
                               "No NVLink of this GPU is active, on a system whose GPUs are NVLink-connected",
                               {"inactive_links": down or "all"},
                               "Drain the node; check the fabric manager / NVLink subnet manager, reset the GPU or "
                               "reboot; if it persists, run the field diagnostics and reseat or RMA", source))
        else:
            out.append(Finding("topo.nvlink-inactive", "info", gpu_subject(gpu), "No NVLink active",
                               {"inactive_links": down or "all"},
                               "Expected without an NVLink bridge; with one, reseat it"))
    return out


@rule("topo.gpu-nic-affinity")
def gpu_nic_affinity(snap, ctx):
    topo = snap.topology
    if not topo:
        return []
    rdma_nics = [n for n in topo.nics() if nic_device_name(topo, n).startswith(RDMA_PREFIXES)]
    if not rdma_nics:
        return []
    out = []
    for gpu in topo.gpus():
        links = {n: topo.matrix.get(gpu, {}).get(n) for n in rdma_nics}
        near = [nic_device_name(topo, n) for n, l in links.items() if l in _NEAR]
        same_node = [nic_device_name(topo, n) for n, l in links.items() if l in ("PHB", "NODE")]
        if near:
            out.append(Finding("topo.gpu-nic-affinity", "pass", gpu, f"RDMA NIC on its PCIe switch: {', '.join(near)}"))
        elif same_node:
            out.append(Finding("topo.gpu-nic-affinity", "info", gpu,
                               f"Nearest RDMA NIC only on the same NUMA node: {', '.join(same_node)}",
                               {"links": {nic_device_name(topo, n): l for n, l in links.items()}}))
        else:
            out.append(Finding("topo.gpu-nic-affinity", "warn", gpu, "No RDMA NIC on this GPU's PCIe switch or NUMA node",
                               {"links": {nic_device_name(topo, n): l for n, l in links.items()}},
                               "GPUDirect RDMA traffic will cross the CPU interconnect: move the NIC or pin jobs accordingly",
                               "nvidia-smi topo -m"))
    return out



def _usable_rdma_nics(snap, minimum: float) -> Optional[List[str]]:
    """The RDMA NICs a job could use: active and fast enough where /sys says, else the ones topo -m names; None
    when neither source is there."""
    if snap.rdma_devices is not None:
        nics = [d for d in snap.rdma_devices if "ACTIVE" in (d.state or "ACTIVE").upper()]
        return [d.name for d in nics if d.rate_gbps is None or d.rate_gbps >= minimum]
    if not snap.topology:
        return None
    names = [nic_device_name(snap.topology, n) for n in snap.topology.nics()]
    names = [n for n in names if n.startswith(RDMA_PREFIXES)]
    if any("eth" in n for n in names) and any("_ib" in n for n in names):
        names = [n for n in names if "_ib" in n]     # IB ports for compute, the Ethernet ones for storage
    return names


@rule("topo.rdma-nics")
def rdma_nics(snap, ctx):
    """Profiles that train across nodes want an RDMA NIC per GPU pair, fast enough."""
    if not ctx.profile.get("require_rdma") or not snap.gpus:
        return []
    wanted = max(1, len(snap.gpus) // 2)
    minimum = ctx.profile.get("min_rdma_gbps") or 0
    names = _usable_rdma_nics(snap, minimum)
    if names is None:
        return []
    evidence = {"rdma_nics": names, "gpus": len(snap.gpus), "wanted": wanted, "min_gbps": minimum}
    if len(names) < wanted:
        return [Finding("topo.rdma-nics", "fail", host(snap),
                        f"{len(names)} RDMA NIC(s) for {len(snap.gpus)} GPUs; the profile wants one per GPU pair ({wanted})",
                        evidence, "Add RDMA NICs (>= {} Gb/s) or use a single-node profile".format(minimum))]
    return [Finding("topo.rdma-nics", "pass", host(snap), f"{len(names)} RDMA NICs for {len(snap.gpus)} GPUs", evidence)]


def _as_dict(device):
    return {"bdf": device.bdf, "class": device.kind, "name": device.name, "port": device.port,
            "secondary": device.secondary, "subordinate": device.subordinate, "acs_ctl": device.acs_ctl,
            "denied": device.denied}


@rule("topo.pcie-acs")
def pcie_acs(snap, ctx):
    """ACS redirect bits on the PCIe switch ports above the GPUs and RDMA NICs (NCCL troubleshooting, "PCI Access
    Control Services"), chosen as the system_tuning role's ACS concern chooses the ports it clears."""
    if not snap.pci:
        return []
    devices = [_as_dict(d) for d in snap.pci]
    switch_ports = switch_ports_above(devices)
    if not any(is_gpu(d) for d in devices) or not switch_ports:
        return []
    if acs_unreadable(devices, switch_ports):
        return [Finding("topo.pcie-acs", "info", host(snap), "ACS on the PCIe switches above the GPUs is unknown",
                        {"bridges": sorted(switch_ports)}, "Run gpuprep check as root (lspci reads capabilities then)")]
    on = {bdf: redirecting(b) for bdf, b in sorted(switch_ports.items()) if redirecting(b)}
    if on:
        return [Finding("topo.pcie-acs", "warn", host(snap),
                        f"ACS redirects peer-to-peer traffic on {len(on)} PCIe switch port(s) above the GPUs/NICs",
                        {"bridges": {bdf: " ".join(f"{bit}+" for bit in bits) for bdf, bits in on.items()},
                         "below": {bdf: switch_ports[bdf]["below"] for bdf in on}},
                        "Bare metal only (VMs need ACS): disable IO virtualization/VT-d (ACS) in the BIOS, or clear it "
                        "at every boot with `gpuprep apply --tags system_tuning_acs -e system_tuning_acs_enabled=true` "
                        "(setpci -s BDF ECAP_ACS+0x6.w=0000 on each bridge listed; reverted by gpuprep revert)",
                        "NCCL troubleshooting: PCI Access Control Services (ACS)")]
    return [Finding("topo.pcie-acs", "pass", host(snap),
                    f"No ACS redirect on the {len(switch_ports)} PCIe switch port(s) above the GPUs/NICs",
                    {"bridges": sorted(switch_ports)})]
