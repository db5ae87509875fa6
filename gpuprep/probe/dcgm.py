"""DCGM on this host, asked only by `check --deep`: `dcgmi diag -r LEVEL -j` and `dcgmi health -c -j`. Levels 2-4 load
the GPUs for minutes and run only when asked. No dcgmi, or no host engine answering, is information."""
from __future__ import annotations

import json
import shutil
import subprocess

from ..importers.dcgm import diag_from_json, health_from_json
from ..snapshot import Dcgm

LEVEL_SECONDS = {1: 300, 2: 1200, 3: 3600, 4: 3 * 3600}     # far above what each level takes on 8 GPUs


def _dcgmi(*args: str, timeout: float):
    """(JSON document or None, why not)."""
    try:
        done = subprocess.run(["dcgmi", *args], capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        return None, f"dcgmi {args[0]} did not finish in {timeout:.0f} s"
    except OSError as exc:
        return None, f"dcgmi could not run ({exc.strerror or exc})"
    try:
        return json.loads(done.stdout), None
    except (ValueError, RecursionError):
        said = (done.stderr or done.stdout).strip().splitlines()
        return None, f"dcgmi {args[0]} answered no report ({said[-1][:160] if said else f'exit {done.returncode}'})"


def probe_dcgm(level: int = 1) -> Dcgm:
    if shutil.which("dcgmi") is None:
        return Dcgm(missing="dcgmi is not installed")
    data, why = _dcgmi("diag", "-r", str(level), "-j", timeout=LEVEL_SECONDS[level])
    if data is None:
        return Dcgm(missing=why)
    try:
        result = diag_from_json(data)
    except (ValueError, RecursionError) as exc:
        return Dcgm(missing=f"dcgmi diag's report could not be read ({exc})")
    result.level = level
    health, _ = _dcgmi("health", "-c", "-j", timeout=60)
    if isinstance(health, dict):
        try:
            checked = health_from_json(health)
            result.health, result.incidents = checked.health, checked.incidents
        except (ValueError, RecursionError):
            pass
    return result
