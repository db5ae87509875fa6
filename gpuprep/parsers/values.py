"""Turn nvidia-smi's printed values into typed values; anything it could not report is None."""
from __future__ import annotations

from typing import Iterable, List, Optional

# one implementation of nvidia-smi's value conventions, shared with the roles' modules
from .nvsmi import flag, integer, known, number  # noqa: F401  (re-exported)


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


def cuda_visible(spec: str, indices: List[int], uuids: Optional[dict] = None) -> List[int]:
    """The GPUs CUDA enumerates under CUDA_VISIBLE_DEVICES=`spec`, in its order, as nvidia-smi indices. As CUDA
    reads it: entries are whole numbers or (unique prefixes of) UUIDs; the list ends at the first entry that is
    empty or names no GPU ("0,,1" and "0,9,1" see GPU 0 only); a GPU named twice makes the whole list invalid
    ("0,0" hides every GPU). `uuids`: UUID -> index."""
    seen: List[int] = []
    for item in (part.strip() for part in spec.split(",")):
        found = _cuda_entry(item, indices, uuids or {})
        if found is None:
            break
        if found in seen:
            return []
        seen.append(found)
    return seen


def _cuda_entry(item: str, indices: List[int], uuids: dict) -> Optional[int]:
    if item.isdigit():
        return int(item) if int(item) in indices else None
    matches = {index for uuid, index in uuids.items() if item and (uuid.startswith(item) or
                                                                   uuid.startswith("GPU-" + item))}
    return matches.pop() if len(matches) == 1 else None


def cuda_visible_problem(spec: str, seen: List[int]) -> Optional[str]:
    """Why CUDA sees fewer GPUs than CUDA_VISIBLE_DEVICES=`spec` names (cuda_visible's result `seen`), or None."""
    entries = [part.strip() for part in spec.split(",")]
    if len(seen) == len(entries):
        return None
    if not seen and len(set(entries)) < len(entries):
        return "names a GPU twice, which makes CUDA hide every GPU"
    stop = entries[len(seen)]
    what = ("an empty entry" if not stop else f"no GPU {stop} on this host" if stop.isdigit()
            else f"{stop!r} is neither a GPU index nor a UUID of this host")
    return f"{what}: CUDA stops there and sees {len(seen)} GPU(s)"
