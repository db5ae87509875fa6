"""`lspci -vvv` captures: the bridges and GPUs, for the ACS check, and the NVSwitches, for Fabric Manager; plain
`lspci` (`lspci | grep -i nvidia`, `-nn`) gives the GPUs and NVSwitches only. The reading is
gpuprep/parsers/lspci_vvv.py."""
from __future__ import annotations

import re
from typing import List

from .lspci_vvv import HEADER, is_gpu, is_nvswitch, is_rdma_nic, parse_lspci_vvv
from ..snapshot import PciDevice, Snapshot


def looks_like_lspci_vvv(text: str) -> bool:
    lines = text.splitlines()[:400]
    return any(HEADER.match(line) for line in lines[:5]) and any("Capabilities:" in line for line in lines)


_COMMAND = re.compile(r"^[$#] .*\blspci\b")      # the command line pasted above the output


def looks_like_lspci(text: str) -> bool:
    """Plain lspci: every line a device's header (a pasted `$ lspci ...` command line aside)."""
    lines = [line for line in text.splitlines()[:4000] if line.strip()]
    if lines and _COMMAND.match(lines[0]):
        lines = lines[1:]
    return bool(lines) and all(HEADER.match(line) for line in lines)


def pci_devices(text: str) -> List[PciDevice]:
    """The devices the checks need: bridges (they have a bus range), NVIDIA GPUs, NVSwitches and RDMA NICs."""
    keep = [d for d in parse_lspci_vvv(text)
            if d["secondary"] is not None or is_gpu(d) or is_nvswitch(d) or is_rdma_nic(d)]
    return [PciDevice(bdf=d["bdf"], kind=d["class"], name=d["name"], port=d["port"], secondary=d["secondary"],
                      subordinate=d["subordinate"], acs_ctl=d["acs_ctl"], denied=d["denied"]) for d in keep]


def import_lspci(text: str, origin: str) -> Snapshot:
    snap = Snapshot(sources=[origin])
    snap.pci = pci_devices(text)
    return snap
