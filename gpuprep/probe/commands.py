"""Bounded runs of host commands whose output the parsers already understand."""
from __future__ import annotations

import os
import shutil
import subprocess
from typing import Dict, List, Optional

from ..errors import BadInput
from ..parsers.kernel_log import parse_events
from ..parsers.topo import parse_topology
from ..snapshot import Topology, XidEvent

_TIMEOUT = 10
_MAX_LOG_LINES = 5000


def run(argv: List[str], timeout: float = _TIMEOUT) -> Optional[str]:
    if not shutil.which(argv[0]):
        return None
    try:
        done = subprocess.run(argv, capture_output=True, text=True, timeout=timeout)
    except (OSError, subprocess.SubprocessError):
        return None
    return done.stdout if done.returncode == 0 else None


def recent_xids() -> Optional[List[XidEvent]]:
    """Xid/SXid lines of this boot, from the journal or else dmesg (the last few thousand lines)."""
    text = run(["journalctl", "-k", "-b", "--no-pager", "-q", "-o", "short-iso", "-n", str(_MAX_LOG_LINES),
                "--grep", "Xid"])
    if text is None:
        text = run(["dmesg", "--time-format=iso"])
    if text is None:
        return None
    return parse_events(text.splitlines()[-_MAX_LOG_LINES:])


# without persistence mode every NVML client initialises every GPU (1-3 s each): 10 s expired on 8-GPU nodes
TOPOLOGY_TIMEOUT = 40


def nvidia_topology() -> Optional[Topology]:
    text = run(["nvidia-smi", "topo", "-m"], timeout=TOPOLOGY_TIMEOUT)
    if not text or "GPU0" not in text:
        return None
    try:
        return parse_topology(text)
    except BadInput:
        return None


def gpu_uuids() -> Dict[int, str]:
    """nvidia-smi's index -> UUID, for CUDA_VISIBLE_DEVICES given as UUIDs (Kubernetes' device plugin does)."""
    text = run(["nvidia-smi", "--query-gpu=index,uuid", "--format=csv,noheader"]) or ""
    pairs = (line.split(",", 1) for line in text.splitlines() if "," in line)
    return {int(i): u.strip() for i, u in pairs if i.strip().isdigit()}


def sshd_settings() -> Optional[Dict[str, str]]:
    """sshd's effective settings: `sshd -T` (needs root and host keys), else sshd_config and its drop-ins."""
    from ..parsers.sshd import parse_sshd_config, parse_sshd_t
    sshd = shutil.which("sshd") or ("/usr/sbin/sshd" if os.path.exists("/usr/sbin/sshd") else None)
    if sshd is None:
        return None
    text = run([sshd, "-T"])
    if text:
        return parse_sshd_t(text) or None
    return parse_sshd_config() or None


def pci_devices():
    """Bridges, GPUs and RDMA NICs from `lspci -vvv` (capabilities, and so ACS, only when run as root); None without lspci."""
    from ..parsers.lspci import pci_devices as parse
    lspci = shutil.which("lspci")
    if lspci is None:
        return None
    text = run([lspci, "-vvv"])
    return parse(text) if text else None
