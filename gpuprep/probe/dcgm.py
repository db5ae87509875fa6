"""DCGM on this host, asked only by `check --deep`: `dcgmi diag -r LEVEL -j` and `dcgmi health -c -j`. Levels 2-4 load
the GPUs for minutes and run only when asked. No dcgmi installed is information; a dcgmi that exits non-zero (226:
DCGM_ST_NVVS_ERROR), hangs, or answers something that is no report failed, and says so: a tool that failed is not
a tool that found nothing."""
from __future__ import annotations

import json
import shutil
import subprocess

from ..parsers.dcgm import closed_prefix, diag_from_json, health_from_json
from ..snapshot import Dcgm

LEVEL_SECONDS = {1: 300, 2: 1200, 3: 3600, 4: 3 * 3600}     # far above what each level takes on 8 GPUs


def _dcgmi(*args: str, timeout: float):
    """(JSON document or None, why dcgmi failed or None)."""
    try:
        done = subprocess.run(["dcgmi", *args], capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        return None, f"dcgmi {args[0]} did not finish in {timeout:.0f} s"
    except OSError as exc:
        return None, f"dcgmi could not run ({exc.strerror or exc})"
    said = (done.stderr or done.stdout).strip().splitlines()
    try:
        data = json.loads(done.stdout)
    except (ValueError, RecursionError):
        whole = closed_prefix(done.stdout)      # a report cut short: what it shows (a failed test) still counts
        if whole is not None:
            return json.loads(whole), f"dcgmi {args[0]}'s report was cut short (exit {done.returncode})"
        return None, f"dcgmi {args[0]} answered no report ({said[-1][:160] if said else f'exit {done.returncode}'})"
    return data, (f"dcgmi {args[0]} exited {done.returncode}" + (" (DCGM_ST_NVVS_ERROR: the diagnostic itself "
                  "failed)" if done.returncode == 226 else "") if done.returncode else None)


def probe_dcgm(level: int = 1) -> Dcgm:
    if shutil.which("dcgmi") is None:
        return Dcgm(missing="dcgmi is not installed")
    data, why = _dcgmi("diag", "-r", str(level), "-j", timeout=LEVEL_SECONDS[level])
    if data is None:
        return Dcgm(failed=why, level=level)
    try:
        result = diag_from_json(data)
    except (ValueError, RecursionError) as exc:
        return Dcgm(failed=f"dcgmi diag's report could not be read ({exc})", level=level)
    result.level, result.failed = level, why
    # dcgmi prints "Error: Health watches not enabled" (exit 253) where no watch was ever set: nothing is watched,
    # and the health is unknown, not fine. gpuprep does not set them: watches live on in nv-hostengine.
    health, why = _dcgmi("health", "-c", "-j", timeout=60)
    try:
        checked = health_from_json(health) if isinstance(health, dict) else None
    except (ValueError, RecursionError):
        checked = None
    if checked is not None and checked.health:
        result.health, result.incidents = checked.health, checked.incidents
    else:
        result.health_failed = why or "dcgmi health answered no Overall Health"
    return result
