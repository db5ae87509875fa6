"""Named node profiles (`--profile NAME`) shipped in data/profiles.toml, or a user's TOML file."""
from __future__ import annotations

from typing import Any, Dict

from .errors import BadInput
from .knowledge import profiles_text

KNOWN_KEYS = {"description", "min_gpus", "min_memory_gib", "min_cpu_cores", "min_cores_per_gpu",
              "min_memory_per_gpu_ratio", "require_nvlink", "require_rdma", "min_rdma_gbps", "require_ecc"}


def _toml(text: str, origin: str) -> Dict[str, Any]:
    import tomllib
    try:
        return tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise BadInput(f"{origin}: invalid TOML ({exc})") from None


def builtin() -> Dict[str, Dict[str, Any]]:
    return _toml(profiles_text(), "profiles.toml")


def load(name_or_path: str) -> Dict[str, Any]:
    if name_or_path.endswith(".toml") or "/" in name_or_path:
        try:
            with open(name_or_path, encoding="utf-8") as fh:
                data = _toml(fh.read(), name_or_path)
        except OSError as exc:
            raise BadInput(f"{name_or_path}: cannot read profile ({exc.strerror})") from None
        tables = [v for v in data.values() if isinstance(v, dict)]
        profile = tables[0] if len(tables) == 1 and len(data) == 1 else data
    else:
        profiles = builtin()
        if name_or_path not in profiles:
            raise BadInput(f"unknown profile {name_or_path!r} (known: {', '.join(sorted(profiles))})")
        profile = profiles[name_or_path]
    unknown = set(profile) - KNOWN_KEYS
    if unknown:
        raise BadInput(f"profile {name_or_path}: unknown key(s) {', '.join(sorted(unknown))}")
    return profile
