"""Named node profiles (`--profile NAME`) shipped in data/profiles.toml, or a user's TOML file."""
from __future__ import annotations

from typing import Any, Dict

from .errors import BadInput
from .knowledge import data_text, profiles_text

KNOWN_KEYS = {"description", "min_gpus", "min_memory_gib", "min_cpu_cores", "min_cores_per_gpu",
              "min_memory_per_gpu_ratio", "require_nvlink", "require_rdma", "min_rdma_gbps", "require_ecc",
              "act_on"}
ACT_ON = ("fail", "warn", "info")     # severities a scheduler adapter may act on (a drain, a condition, a page)


def _toml(text: str, origin: str) -> Dict[str, Any]:
    try:
        import tomllib  # novermin (guarded: ImportError below on Python < 3.11)
    except ImportError:      # the node probe runs on the node's python3, which may predate 3.11's tomllib
        import sys
        raise BadInput(f"{origin}: reading a TOML profile needs Python >= 3.11 on this host (this is "
                       f"{sys.version.split()[0]}); use a built-in profile (dev, training, inference)") from None
    try:
        return tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise BadInput(f"{origin}: invalid TOML ({exc})") from None


def builtin() -> Dict[str, Dict[str, Any]]:
    """The built-in profiles: data/profiles.toml, or in the node probe's zipapp the JSON the build wrote from it
    (nodes' older Pythons have no TOML reader)."""
    import json
    try:
        return json.loads(data_text("profiles.json"))
    except FileNotFoundError:
        return _toml(profiles_text(), "profiles.toml")


def load(name_or_path: str) -> Dict[str, Any]:
    if name_or_path.endswith(".toml") or "/" in name_or_path:
        try:
            with open(name_or_path, "rb") as fh:
                raw = fh.read(1 << 20)          # a profile is a few lines; a bigger file is the wrong file
        except OSError as exc:
            raise BadInput(f"{name_or_path}: cannot read profile ({exc.strerror})") from None
        try:
            data = _toml(raw.decode("utf-8"), name_or_path)
        except UnicodeDecodeError as exc:
            raise BadInput(f"{name_or_path}: not UTF-8 text (byte {exc.start}); TOML files are UTF-8") from None
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
    for key, value in profile.items():
        problem = _value_problem(key, value)
        if problem:
            raise BadInput(f"profile {name_or_path}: {key} = {value!r}: {problem}")
    if not set(profile) - {"description"}:
        raise BadInput(f"profile {name_or_path}: defines no requirement (keys: {', '.join(sorted(KNOWN_KEYS))})")
    return profile


def _value_problem(key: str, value: Any) -> str:
    if key == "act_on":
        good = isinstance(value, list) and value and all(v in ACT_ON for v in value)
        return "" if good else f"expected a list of severities from {', '.join(ACT_ON)}"
    if key == "description":
        return "" if isinstance(value, str) else "expected text"
    if key.startswith("require_"):
        return "" if isinstance(value, bool) else "expected true or false"
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return "expected a number"
    return "" if value >= 0 else "expected a number >= 0"
