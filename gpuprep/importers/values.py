"""Turn nvidia-smi's printed values into typed values; anything it could not report is None."""
from __future__ import annotations

import re
from typing import Iterable, List, Optional

_UNKNOWN = {"", "n/a", "[n/a]", "unknown", "unknown error", "not supported", "[not supported]",
            "[unknown error]", "requested functionality has been deprecated", "insufficient permissions",
            "[insufficient permissions]", "gpu is lost", "[gpu is lost]"}

_NUMBER = re.compile(r"^\s*(-?\d+(?:\.\d+)?)")


def known(value: Optional[str]) -> Optional[str]:
    if value is None:
        return None
    text = value.strip()
    return None if text.lower() in _UNKNOWN else text


def number(value: Optional[str]) -> Optional[float]:
    text = known(value)
    if text is None:
        return None
    match = _NUMBER.match(text)
    return float(match.group(1)) if match else None


def integer(value: Optional[str]) -> Optional[int]:
    num = number(value)
    return None if num is None else int(num)


def flag(value: Optional[str]) -> Optional[bool]:
    """Enabled/Disabled, On/Off, Yes/No, Active/Not Active."""
    text = known(value)
    if text is None:
        return None
    low = text.lower()
    if low in ("enabled", "on", "yes", "active", "true", "1"):
        return True
    if low in ("disabled", "off", "no", "not active", "false", "0", "none"):
        return False
    return None


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
