#!/usr/bin/env python3
"""The acceptance run for a machine with one or more NVIDIA GPUs: what the project's CI cannot do.

Steps, each bounded by a timeout and recorded whatever its outcome:
  1. `gpuprep check --json` on the live host (verdict, findings that are not pass);
  2. `gpuprep snapshot` (the live NVML probe) against `nvidia-smi -q` on the same host, field by field, for every
     GPU: both must agree on every field nvidia-smi reports (identity, memory, modes, limits, links, fabric);
  3. `gpuprep apply --local --check --diff` (changes nothing; needs root or passwordless sudo);
  4. a `gpuprep burnin` of --duration (60 s): NCCL with two or more GPUs, one rank otherwise; from its report:
     the training phase's peak power against the enforced limit per rank (goal >= 90%), the memory check's
     coverage of the free memory before the run, and the burn-in's peak all-reduce busbw against nccl-tests'
     `all_reduce_perf` on the same GPUs when that is installed (goal >= 90%);
  5. the wall time of each step.
It writes acceptance.json and acceptance.txt into --out (default: ./gpu-acceptance-<host>/).

Usage: python bench/gpu_acceptance.py [--duration 60] [--out DIR] [--skip-apply] [--all-reduce-perf PATH]
"""
from __future__ import annotations

import argparse
import json
import re
import shutil
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Dict, List, Optional

REPO = Path(__file__).resolve().parent.parent
POWER_GOAL = 0.90
BUSBW_GOAL = 0.90
# fields NVML and nvidia-smi -q both report and that do not move between two readings a second apart
COMPARED_FIELDS = (
    "name", "uuid", "serial", "vbios_version", "inforom_image", "memory_total_mib", "persistence_mode",
    "compute_mode", "mig_mode_current", "mig_mode_pending", "ecc_mode_current", "ecc_mode_pending",
    "power_limit_w", "power_default_limit_w", "power_enforced_limit_w", "power_min_limit_w", "power_max_limit_w",
    "max_clock_graphics_mhz", "max_clock_sm_mhz", "max_clock_mem_mhz", "pcie_gen_max", "pcie_gen_device_max",
    "pcie_width_max", "temperature_shutdown_c", "temperature_slowdown_c", "fabric_state", "fabric_status",
    "remapped_rows_pending", "remapped_rows_failure", "retired_pages_pending",
)


def _bus(bus_id: Optional[str]) -> str:
    """A PCI address in one spelling: nvidia-smi prints 8 domain digits, sysfs and NVML's legacy id 4."""
    if not bus_id:
        return ""
    parts = bus_id.lower().split(":")
    return ":".join([parts[0][-4:].rjust(4, "0")] + parts[1:]) if len(parts) == 3 else bus_id.lower()


def compare(probed: List[dict], reported: List[dict]) -> List[dict]:
    """Each compared field of each GPU (matched by PCI address): what the probe read, what nvidia-smi printed,
    and whether they agree. A field nvidia-smi does not report is left out; one the probe missed disagrees."""
    by_bus = {_bus(g.get("pci_bus_id")): g for g in probed}
    rows = []
    for smi in reported:
        bus = _bus(smi.get("pci_bus_id"))
        mine = by_bus.get(bus)
        if mine is None:
            rows.append({"gpu": bus, "field": "present", "probe": None, "nvidia_smi": True, "agree": False})
            continue
        for name in COMPARED_FIELDS:
            theirs = smi.get(name)
            if theirs is None:
                continue
            ours = mine.get(name)
            agree = ours == theirs or (isinstance(ours, float) and isinstance(theirs, (int, float))
                                       and abs(ours - theirs) < 0.01)
            rows.append({"gpu": bus, "field": name, "probe": ours, "nvidia_smi": theirs, "agree": agree})
    rows += [{"gpu": b, "field": "present", "probe": True, "nvidia_smi": None, "agree": False}
             for b in by_bus if b not in {_bus(s.get("pci_bus_id")) for s in reported}]
    return rows


_NCCL_ROW = re.compile(r"^\s*(\d+)\s+(\d+)\s+\w+\s+\w+\s+-?\d+\s+[\d.]+\s+[\d.]+\s+([\d.]+)\s+\S+\s+[\d.]+\s+[\d.]+\s+([\d.]+)")


def parse_all_reduce_perf(text: str) -> dict:
    """nccl-tests' all_reduce_perf output: each size's out-of-place and in-place busbw, the peak, and its own
    '# Avg bus bandwidth' line."""
    rows = []
    for line in text.splitlines():
        match = _NCCL_ROW.match(line)
        if match:
            rows.append({"bytes": int(match.group(1)), "busbw_out_of_place": float(match.group(3)),
                         "busbw_in_place": float(match.group(4))})
    avg = re.search(r"#\s*Avg bus bandwidth\s*:\s*([\d.]+)", text)
    peak = max((max(r["busbw_out_of_place"], r["busbw_in_place"]) for r in rows), default=None)
    return {"rows": rows, "peak_busbw_gbs": peak, "avg_busbw_gbs": float(avg.group(1)) if avg else None}


def burnin_figures(document: dict, free_mib: Dict[str, float]) -> dict:
    """From a burn-in report: per rank the training phase's peak power against its limit and the memory check's
    share of the GPU's free memory before the run (free_mib by GPU UUID); the peak all-reduce busbw."""
    ranks = []
    for rank in document.get("ranks", []):
        gpu = rank.get("gpu") or {}
        peak, limit = gpu.get("training_max_power_w"), gpu.get("power_limit_w")
        checked = (rank.get("memory") or {}).get("bytes") or 0
        free = free_mib.get(str(rank.get("gpu_uuid") or "").replace("GPU-", "")) or free_mib.get(str(rank.get("gpu_uuid")))
        ranks.append({"rank": rank.get("rank"), "gpu": rank.get("gpu_uuid"), "steps": rank.get("steps"),
                      "setup_ms": rank.get("setup_ms"),
                      "power_share": round(peak / limit, 3) if peak and limit else None,
                      "memory_coverage": round(checked / (free * (1 << 20)), 3) if free else None})
    sweep = [row for rank in document.get("ranks", []) for row in rank.get("allreduce") or []]
    single = len(document.get("ranks", [])) < 2
    return {"ranks": ranks, "peak_busbw_gbs": None if single else max((r["busbw_gbs"] for r in sweep), default=None),
            "busbw_note": "n/a with one GPU" if single else None, "verdict": document.get("verdict")}


def _run(argv: List[str], timeout: float) -> dict:
    start = time.monotonic()
    try:
        done = subprocess.run(argv, capture_output=True, text=True, timeout=timeout)
        out = {"rc": done.returncode, "stdout": done.stdout, "stderr": done.stderr[-4000:]}
    except subprocess.TimeoutExpired:
        out = {"rc": None, "stdout": "", "stderr": f"timed out after {timeout:.0f} s"}
    except OSError as exc:
        out = {"rc": None, "stdout": "", "stderr": str(exc)}
    out["seconds"] = round(time.monotonic() - start, 1)
    return out


def _gpuprep(*args: str, timeout: float = 600) -> dict:
    return _run([sys.executable, "-m", "gpuprep", *args], timeout)


def free_memory_mib() -> Dict[str, float]:
    text = _run(["nvidia-smi", "--query-gpu=uuid,memory.free", "--format=csv,noheader,nounits"], 60)["stdout"]
    pairs = (line.split(",") for line in text.splitlines() if "," in line)
    return {uuid.strip().replace("GPU-", ""): float(free) for uuid, free in pairs}


def run_acceptance(duration: int, skip_apply: bool, all_reduce_perf: Optional[str], out: Optional[Path] = None) -> dict:
    from gpuprep.parsers import import_text
    result: dict = {"host": socket.gethostname(), "started": time.strftime("%Y-%m-%dT%H:%M:%S%z"), "steps": {}}
    steps = result["steps"]
    check = _gpuprep("check", "--json", "--no-docker")
    steps["check"] = {"rc": check["rc"], "seconds": check["seconds"], "stderr": check["stderr"][-500:]}
    try:
        doc = json.loads(check["stdout"])
        steps["check"].update(verdict=doc["verdict"], not_passing=[
            f"{f['severity']} {f['id']} {f['subject']}: {f['title']}" for f in doc["findings"] if f["severity"] != "pass"])
    except (ValueError, KeyError):
        steps["check"]["verdict"] = None

    snap = _gpuprep("snapshot", "--no-docker")
    smi = _run(["nvidia-smi", "-q"], 120)
    try:
        probed = json.loads(snap["stdout"]).get("gpus") or []
        reported = [g.__dict__ for g in import_text(smi["stdout"], "nvidia-smi-q.txt").gpus or []]
        rows = compare(probed, reported)
    except Exception as exc:     # noqa: BLE001 - the step is recorded as failed with its reason
        rows, steps["compare_error"] = [], f"{type(exc).__name__}: {exc}"
    steps["probe_vs_nvidia_smi"] = {"gpus": len(reported) if rows else 0, "fields": len(rows),
                                    "disagree": [r for r in rows if not r["agree"]],
                                    "seconds": snap["seconds"] + smi["seconds"]}

    if not skip_apply:
        apply = _gpuprep("apply", "--local", "--check", "--diff", timeout=900)
        steps["apply_check_diff"] = {"rc": apply["rc"], "seconds": apply["seconds"],
                                     "tail": (apply["stdout"] + apply["stderr"])[-1500:]}

    gpus = len(reported) if rows else 0
    free = free_memory_mib()
    backend = ["--backend", "nccl"] if gpus >= 2 else ["--nproc", "1"]
    burnin = _gpuprep("burnin", "--duration", f"{duration}s", *backend, "--json", timeout=duration * 6 + 300)
    steps["burnin"] = {"rc": burnin["rc"], "seconds": burnin["seconds"], "stderr": burnin["stderr"][-1500:]}
    if out is not None:          # the raw report, kept whatever it says
        (out / "burnin.json").write_text(burnin["stdout"] or "")
    try:
        figures = burnin_figures(json.loads(burnin["stdout"]), free)
        steps["burnin"].update(figures)
    except ValueError:
        figures = {}
    tool = all_reduce_perf or shutil.which("all_reduce_perf")
    if tool and gpus >= 2:
        nccl = _run([tool, "-b", "8", "-e", "4G", "-f", "2", "-g", str(gpus)], 900)
        parsed = parse_all_reduce_perf(nccl["stdout"])
        ours = figures.get("peak_busbw_gbs")
        steps["nccl_tests"] = {**parsed, "rc": nccl["rc"], "seconds": nccl["seconds"],
                               "burnin_share": round(ours / parsed["peak_busbw_gbs"], 3)
                               if ours and parsed["peak_busbw_gbs"] else None}
    result["goals"] = goals(result)
    result["wall_seconds"] = round(sum(s.get("seconds") or 0 for s in steps.values() if isinstance(s, dict)), 1)
    return result


def goals(result: dict) -> Dict[str, Optional[bool]]:
    steps = result["steps"]
    ranks = (steps.get("burnin") or {}).get("ranks") or []
    shares = [r["power_share"] for r in ranks if r.get("power_share") is not None]
    nccl = steps.get("nccl_tests") or {}
    compared = steps.get("probe_vs_nvidia_smi") or {}
    return {"probe_agrees_with_nvidia_smi": bool(compared.get("fields")) and not compared.get("disagree"),
            "power_at_least_90pct": min(shares) >= POWER_GOAL if shares else None,
            "busbw_at_least_90pct_of_nccl_tests": (nccl["burnin_share"] >= BUSBW_GOAL
                                                   if nccl.get("burnin_share") is not None else None),
            "burnin_passed": (steps.get("burnin") or {}).get("verdict") == "pass"}


def text_report(result: dict) -> str:
    steps = result["steps"]
    lines = [f"gpuprep GPU acceptance on {result['host']} ({result['started']}), {result['wall_seconds']} s"]
    check = steps.get("check", {})
    lines.append(f"check: verdict {check.get('verdict')} (exit {check.get('rc')}, {check.get('seconds')} s)")
    lines += [f"  {line}" for line in check.get("not_passing", [])[:20]]
    compared = steps.get("probe_vs_nvidia_smi", {})
    lines.append(f"probe vs nvidia-smi -q: {compared.get('fields')} fields over {compared.get('gpus')} GPU(s), "
                 f"{len(compared.get('disagree') or [])} disagree")
    lines += [f"  {r['gpu']} {r['field']}: probe {r['probe']!r}, nvidia-smi {r['nvidia_smi']!r}"
              for r in (compared.get("disagree") or [])[:20]]
    if "apply_check_diff" in steps:
        lines.append(f"apply --local --check --diff: exit {steps['apply_check_diff']['rc']}")
    burnin = steps.get("burnin", {})
    busbw = burnin.get("busbw_note") or f"{burnin.get('peak_busbw_gbs')} GB/s"
    lines.append(f"burnin: verdict {burnin.get('verdict')} (exit {burnin.get('rc')}, {burnin.get('seconds')} s), "
                 f"peak busbw {busbw}")
    lines += [f"  rank {r['rank']}: {r.get('steps')} steps, set-up (model build + first step) {r.get('setup_ms')} ms, "
              f"power {r['power_share']} of the limit, memory check {r['memory_coverage']} of free memory"
              for r in burnin.get("ranks", [])]
    if "nccl_tests" in steps:
        nccl = steps["nccl_tests"]
        lines.append(f"nccl-tests all_reduce_perf: peak {nccl.get('peak_busbw_gbs')} GB/s, avg "
                     f"{nccl.get('avg_busbw_gbs')}; burn-in / nccl-tests = {nccl.get('burnin_share')}")
    lines.append("goals: " + ", ".join(f"{k}={v}" for k, v in result["goals"].items()))
    return "\n".join(lines) + "\n"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--duration", type=int, default=60)
    parser.add_argument("--out", default=None)
    parser.add_argument("--skip-apply", action="store_true")
    parser.add_argument("--all-reduce-perf", default=None, help="nccl-tests' all_reduce_perf (default: on PATH)")
    args = parser.parse_args()
    if not shutil.which("nvidia-smi"):
        print("gpu_acceptance: no nvidia-smi on this machine: nothing to accept", file=sys.stderr)
        return 2
    out = Path(args.out or f"gpu-acceptance-{socket.gethostname()}")
    out.mkdir(parents=True, exist_ok=True)
    result = run_acceptance(args.duration, args.skip_apply, args.all_reduce_perf, out)
    (out / "acceptance.json").write_text(json.dumps(result, indent=2, default=str) + "\n")
    report = text_report(result)
    (out / "acceptance.txt").write_text(report)
    sys.stdout.write(report)
    return 0 if all(v is not False for v in result["goals"].values()) else 1


if __name__ == "__main__":
    sys.exit(main())
