"""The test harness for the C stand-in of libnvidia-ml.so.1 (tests/nvml_stub/nvml_stub.c).

`build(branch)` compiles it with the system C compiler against nvml.h from NVIDIA's nvidia-nvml-dev wheel;
`config_for(snapshot)` turns a snapshot imported from a real capture into the values each NVML function
returns; `run(...)` starts a process whose dynamic loader finds the stand-in first (LD_LIBRARY_PATH), so the
real nvidia-ml-py loads it through ctypes exactly as it loads NVIDIA's library on a GPU host. Every probe test
runs in such a process: the library a process loaded cannot be swapped for another driver branch later."""
from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Dict, Iterable, List, Optional, Tuple

import pynvml

from gpuprep.parsers.values import expand_cpulist
from gpuprep.snapshot import Snapshot

HERE = Path(__file__).resolve().parent
SOURCE = HERE / "nvml_stub" / "nvml_stub.c"
BUILD = HERE / "nvml_stub" / "build"          # ignored by git; rebuilt when the source or branch changes
REPO = HERE.parent

_ARCH = {"Kepler": 2, "Maxwell": 3, "Pascal": 4, "Volta": 5, "Turing": 6, "Ampere": 7, "Ada Lovelace": 8,
         "Hopper": 9, "Blackwell": 10}
_COMPUTE_MODE = {"Default": 0, "Exclusive_Thread": 1, "Prohibited": 2, "Exclusive_Process": 3}
_REASON_BITS = {"gpu_idle": 0x1, "applications_clocks_setting": 0x2, "sw_power_cap": 0x4, "hw_slowdown": 0x8,
                "sync_boost": 0x10, "sw_thermal_slowdown": 0x20, "hw_thermal_slowdown": 0x40,
                "hw_power_brake_slowdown": 0x80, "display_clocks_setting": 0x100, "board_limit": 0x200,
                "reliability": 0x400}
_NVLINK_CODE = {1: 1, 2: 2, 3: 4, 4: 6, 5: 7, 6: 8}      # NVLink generation -> NVML's nvlink version number
_FABRIC_STATE = {"Not Started": 1, "In Progress": 2, "Completed": 3}
_FABRIC_HEALTH = {"Degraded": 1, "Full": 2}
_FABRIC_SUMMARY = {"Healthy": pynvml.NVML_GPU_FABRIC_HEALTH_SUMMARY_HEALTHY,
                   "Unhealthy": pynvml.NVML_GPU_FABRIC_HEALTH_SUMMARY_UNHEALTHY,
                   "Limited Capacity": pynvml.NVML_GPU_FABRIC_HEALTH_SUMMARY_LIMITED_CAPACITY}
# nvml.h: NVML_GPU_FABRIC_HEALTH_MASK_SHIFT_ROUTE_RECOVERY 2, _ROUTE_UNHEALTHY 4, _ACCESS_TIMEOUT_RECOVERY 6
_FABRIC_FLAG_SHIFTS = (("route recovery in progress", 2), ("route unhealthy", 4), ("access timeout recovery", 6))
# NVML's error codes by the words nvidia-smi prints for them ("Insufficient Resources")
ERROR_CODES = {name[len("NVML_ERROR_"):].replace("_", " ").title(): getattr(pynvml, name)
               for name in dir(pynvml) if name.startswith("NVML_ERROR_") and isinstance(getattr(pynvml, name), int)}
ERROR_CODES["Success"] = 0


def nvml_include() -> Path:
    """The directory holding NVIDIA's nvml.h 13.x (the nvidia-nvml-dev wheel, a test dependency): 13.x declares the
    fabric info v3 with its health summary, which Blackwell drivers report."""
    import nvidia.cu13   # noqa: F401  (namespace package from the nvidia-nvml-dev 13.x wheel)
    for root in nvidia.cu13.__path__:
        header = Path(root) / "include" / "nvml.h"
        if header.is_file():
            return header.parent
    raise FileNotFoundError("nvml.h not found in the nvidia-nvml-dev 13.x wheel")


def build(branch: int = 570) -> Path:
    """A directory holding libnvidia-ml.so.1 modelling driver `branch` (functions newer than it absent)."""
    include = nvml_include()
    digest = hashlib.sha256(SOURCE.read_bytes() + (include / "nvml.h").read_bytes() + str(branch).encode())
    out = BUILD / f"r{branch}-{digest.hexdigest()[:12]}"
    lib = out / "libnvidia-ml.so.1"
    if not lib.is_file():
        out.mkdir(parents=True, exist_ok=True)
        tmp = out / f".libnvidia-ml.so.1.{os.getpid()}"
        subprocess.run([os.environ.get("CC", "cc"), "-shared", "-fPIC", "-O1", "-Wall", "-Werror",
                        "-pthread", "-fvisibility=hidden", "-DNVML_NO_UNVERSIONED_FUNC_DEFS", f"-DNVML_BRANCH={branch}",
                        "-I", str(include), "-Wl,-soname,libnvidia-ml.so.1", "-o", str(tmp), str(SOURCE)],
                       check=True, capture_output=True, text=True, timeout=120)
        os.replace(tmp, lib)
    return out


def _line(index: int, key: str, value) -> str:
    return f"gpu {index} {key} {value}"


def _gpu_lines(i: int, gpu) -> List[str]:
    lines: List[str] = []
    text = {"name": gpu.name, "uuid": gpu.uuid, "serial": gpu.serial, "busid": gpu.pci_bus_id,
            "vbios": gpu.vbios_version, "inforom": gpu.inforom_image, "gsp": gpu.gsp_firmware,
            "cc": gpu.compute_capability}
    lines += [_line(i, k, v) for k, v in text.items() if v is not None]
    numbers = {
        "arch": _ARCH.get(gpu.architecture), "compute_mode": _COMPUTE_MODE.get(gpu.compute_mode),
        "mem_total": gpu.memory_total_mib << 20 if gpu.memory_total_mib is not None else None,
        "persistence": None if gpu.persistence_mode is None else int(gpu.persistence_mode),
        "clock.0": gpu.clock_graphics_mhz, "clock.1": gpu.clock_sm_mhz, "clock.2": gpu.clock_mem_mhz,
        "app_clock.0": gpu.app_clock_graphics_mhz, "app_clock.2": gpu.app_clock_mem_mhz,
        "default_app_clock.0": gpu.default_app_clock_graphics_mhz, "default_app_clock.2": gpu.default_app_clock_mem_mhz,
        "max_clock.0": gpu.max_clock_graphics_mhz, "max_clock.1": gpu.max_clock_sm_mhz, "max_clock.2": gpu.max_clock_mem_mhz,
        "power_usage": _mw(gpu.power_draw_w), "power_limit": _mw(gpu.power_limit_w),
        "power_default_limit": _mw(gpu.power_default_limit_w), "power_enforced_limit": _mw(gpu.power_enforced_limit_w),
        "temp": gpu.temperature_c, "temp_threshold.0": gpu.temperature_shutdown_c,
        "temp_threshold.1": gpu.temperature_slowdown_c, "temp_threshold.3": gpu.temperature_max_operating_c,
        f"field.{pynvml.NVML_FI_DEV_MEMORY_TEMP}": gpu.memory_temperature_c, "tlimit": gpu.tlimit_margin_c,
        f"field.{pynvml.NVML_FI_DEV_TEMPERATURE_SHUTDOWN_TLIMIT}": gpu.tlimit_shutdown_c,
        f"field.{pynvml.NVML_FI_DEV_TEMPERATURE_SLOWDOWN_TLIMIT}": gpu.tlimit_slowdown_c,
        f"field.{pynvml.NVML_FI_DEV_TEMPERATURE_GPU_MAX_TLIMIT}": gpu.tlimit_max_operating_c,
        "ecc.0.0": gpu.ecc_volatile_corrected, "ecc.1.0": gpu.ecc_volatile_uncorrected,
        "ecc.0.1": gpu.ecc_aggregate_corrected, "ecc.1.1": gpu.ecc_aggregate_uncorrected,
        "retired.0": gpu.retired_pages_single_bit, "retired.1": gpu.retired_pages_double_bit,
        "retired_pending": None if gpu.retired_pages_pending is None else int(gpu.retired_pages_pending),
        "pcie_gen_current": gpu.pcie_gen_current, "pcie_gen_max": gpu.pcie_gen_max,
        "pcie_gen_device_max": gpu.pcie_gen_device_max, "pcie_width_current": gpu.pcie_width_current,
        "pcie_width_max": gpu.pcie_width_max, "numa": gpu.numa_node,
    }
    lines += [_line(i, k, v) for k, v in numbers.items() if v is not None]
    if gpu.power_min_limit_w is not None and gpu.power_max_limit_w is not None:
        lines.append(_line(i, "power_constraints", f"{_mw(gpu.power_min_limit_w)} {_mw(gpu.power_max_limit_w)}"))
    if gpu.mig_mode_current is not None:
        lines.append(_line(i, "mig_mode", f"{int(gpu.mig_mode_current)} {int(bool(gpu.mig_mode_pending))}"))
    if gpu.clock_event_reasons is not None:
        lines.append(_line(i, "reasons", hex(sum(_REASON_BITS[r] for r in gpu.clock_event_reasons))))
    if gpu.ecc_mode_current is not None:
        lines.append(_line(i, "ecc_mode", f"{int(gpu.ecc_mode_current)} {int(bool(gpu.ecc_mode_pending))}"))
    if gpu.remapped_rows_pending is not None:
        lines.append(_line(i, "remapped", f"{gpu.remapped_rows_correctable or 0} {gpu.remapped_rows_uncorrectable or 0} "
                                          f"{int(gpu.remapped_rows_pending)} {int(bool(gpu.remapped_rows_failure))}"))
    if gpu.supported_clocks:
        lines.append(_line(i, "supported_mem", ",".join(str(p.mem_mhz) for p in gpu.supported_clocks)))
        lines += [_line(i, f"supported_gr.{p.mem_mhz}", ",".join(map(str, p.graphics_mhz))) for p in gpu.supported_clocks]
    if gpu.nvlinks:
        lines.append(_line(i, "nvlinks", len(gpu.nvlinks)))
        for link in gpu.nvlinks:
            lines.append(_line(i, f"nvlink_state.{link.link}", int(link.active)))
            if link.version is not None:
                lines.append(_line(i, f"nvlink_version.{link.link}", _NVLINK_CODE[link.version]))
    if gpu.fabric_state in _FABRIC_STATE:
        status = ERROR_CODES[gpu.fabric_status] if gpu.fabric_status else 0
        health = _FABRIC_HEALTH.get(gpu.fabric_bandwidth or "", 0)
        if gpu.fabric_health_flags is not None:     # nvml.h: each two-bit field 1 TRUE, 2 FALSE
            health |= sum((1 if name in gpu.fabric_health_flags else 2) << shift for name, shift in _FABRIC_FLAG_SHIFTS)
        summary = _FABRIC_SUMMARY.get(gpu.fabric_health or "", 0)
        lines.append(_line(i, "fabric", f"{_FABRIC_STATE[gpu.fabric_state]} {status} 0 {health} {summary}"))
    if gpu.cpu_affinity:
        cpus = expand_cpulist(gpu.cpu_affinity)
        words = [0] * (max(cpus) // 64 + 1)
        for cpu in cpus:
            words[cpu // 64] |= 1 << (cpu % 64)
        lines.append(_line(i, "affinity", ",".join(f"{w:x}" for w in words)))
    return lines


def _mw(watts: Optional[float]) -> Optional[int]:
    return None if watts is None else int(round(watts * 1000))


def config_for(snapshot: Snapshot, errors: Iterable[Tuple[object, str, str, int]] = (),
               mig_uuids: Optional[Dict[int, List[str]]] = None, init: Optional[str] = None) -> str:
    """The stand-in's configuration: the snapshot's values, plus errors injected as
    (gpu index or '*', C function name, NVML error name such as 'GPU_IS_LOST', first failing call)."""
    lines = []
    if init:
        lines.append(f"init {getattr(pynvml, 'NVML_ERROR_' + init)}")
    software = snapshot.software
    if software.driver_version:
        lines.append(f"driver {software.driver_version}")
    if snapshot.nvml.library_version:
        lines.append(f"nvml {snapshot.nvml.library_version}")
    if software.cuda_driver_version:
        major, minor = software.cuda_driver_version.split(".")
        lines.append(f"cuda {int(major) * 1000 + int(minor) * 10}")
    for i, gpu in enumerate(snapshot.gpus or []):
        lines += _gpu_lines(i, gpu)
        if gpu.mig_devices and i not in (mig_uuids or {}):
            raise ValueError(f"GPU {i} has {gpu.mig_devices} MIG instances: give their UUIDs (mig_uuids)")
    for parent, uuids in (mig_uuids or {}).items():
        lines += [f"mig {parent} {slot} {uuid}" for slot, uuid in enumerate(uuids)]
    for who, fn, code, first in errors:
        lines.append(f"error {who} {fn} {getattr(pynvml, 'NVML_ERROR_' + code)} {first}")
    return "\n".join(lines) + "\n"


def mig_uuids_of(listing: Path) -> Dict[int, List[str]]:
    """MIG instances' UUIDs per GPU index from a real `nvidia-smi -L`."""
    found: Dict[int, List[str]] = {}
    gpu = -1
    for line in listing.read_text().splitlines():
        if line.startswith("GPU "):
            gpu = int(line.split()[1].rstrip(":"))
        elif line.strip().startswith("MIG ") and "UUID: " in line:
            found.setdefault(gpu, []).append(line.split("UUID: ")[1].rstrip(")"))
    return found


def stub_env(config_path: Path, branch: int = 570) -> dict:
    lib_dir = build(branch)
    return dict(os.environ, LD_LIBRARY_PATH=str(lib_dir), GPUPREP_FAKE_NVML=str(config_path))


def run(config_path: Path, argv: List[str], branch: int = 570, timeout: int = 120) -> subprocess.CompletedProcess:
    """Run argv (a Python -c snippet or a gpuprep command) with the stand-in as the process's libnvidia-ml."""
    return subprocess.run(argv, capture_output=True, text=True, timeout=timeout, cwd=str(REPO),
                          env=stub_env(config_path, branch))


PROBE = """
import dataclasses, json, sys
from gpuprep.probe.nvml import probe
facts = probe()
json.dump({"status": dataclasses.asdict(facts.status), "driver": facts.driver_version,
           "cuda": facts.cuda_driver_version, "gpus": [dataclasses.asdict(g) for g in facts.gpus]}, sys.stdout)
"""

SAMPLE = """
import json, sys
from gpuprep.probe.nvml import sample
print(json.dumps([sample(int(sys.argv[1]), uuid=sys.argv[2] or None) for _ in range(int(sys.argv[3]))]))
"""


def probe_json(config_path: Path, branch: int = 570) -> dict:
    done = run(config_path, [sys.executable, "-c", PROBE], branch)
    if done.returncode != 0:
        raise AssertionError(f"probe process exited {done.returncode}: {done.stderr[-2000:]}")
    return json.loads(done.stdout)


def samples(config_path: Path, index: int = 0, uuid: Optional[str] = None, count: int = 1) -> list:
    done = run(config_path, [sys.executable, "-c", SAMPLE, str(index), uuid or "", str(count)])
    if done.returncode != 0:
        raise AssertionError(f"sample process exited {done.returncode}: {done.stderr[-2000:]}")
    return json.loads(done.stdout)


def compiler_available() -> bool:
    return shutil.which(os.environ.get("CC", "cc")) is not None
