"""Turn nvidia-smi's printed values into typed values; anything it could not report is None."""
from __future__ import annotations

from typing import Iterable, List, Optional

# one implementation of nvidia-smi's value conventions, shared with the roles' modules
from ..module_utils.gpuprep_nvsmi import flag, integer, known, number  # noqa: F401  (re-exported)


def compress_cpulist(cpus: Iterable[int]) -> str:
    """[0,1,2,3,8,9] -> '0-3,8-9' (the kernel's cpulist format)."""
    ordered = sorted(set(cpus))
    ranges: List[str] = []
    start = prev = None
    for cpu in ordered:
        if start is None:
            start = prev = cpu
        elif cpu == prev + 1:
            prev = cpu
        else:
            ranges.append(f"{start}-{prev}" if start != prev else str(start))
            start = prev = cpu
    if start is not None:
        ranges.append(f"{start}-{prev}" if start != prev else str(start))
    return ",".join(ranges)


def expand_cpulist(text: Optional[str]) -> List[int]:
    """'0-3,8-9' -> [0,1,2,3,8,9]; unknown or empty -> []."""
    out: List[int] = []
    if not text or known(text) is None:
        return out
    for part in text.replace(" ", "").split(","):
        if not part:
            continue
        if "-" in part:
            lo, hi = part.split("-", 1)
            out.extend(range(int(lo), int(hi) + 1))
        else:
            out.append(int(part))
    return out
