"""container.*: can containers reach the GPUs (Docker with the NVIDIA runtime, a current toolkit)."""
from __future__ import annotations

from dataclasses import asdict

from ..knowledge import version_key
from ..common.container_smoke import judge_limits, judge_smoke, parse_gpu_list, parse_limits
from . import Finding, host, rule

# nvidia-container-toolkit 1.17.8 fixed CVE-2025-23266 ("NVIDIAScape"); older releases are exploitable.
MIN_TOOLKIT = "1.17.8"


@rule("container.docker-missing", "container.nvidia-runtime-missing")
def docker(snap, ctx):
    c = snap.container
    if c.docker_reachable is False or c.docker_reachable is None and c.error:
        return [Finding("container.docker-missing", "info", host(snap), "Docker is not reachable",
                        {"error": c.error}, "Install and start Docker if this node runs containers")]
    if not c.docker_reachable:
        return []
    findings = [Finding("container.docker-missing", "pass", host(snap), f"Docker {c.docker_version} reachable")]
    if snap.gpus:
        if "nvidia" not in (c.runtimes or []):
            findings.append(Finding("container.nvidia-runtime-missing", "fail", host(snap),
                                    "Docker has no nvidia runtime: containers cannot use the GPUs",
                                    {"runtimes": c.runtimes, "default_runtime": c.default_runtime},
                                    "gpuprep apply --tags container_toolkit"))
        else:
            findings.append(Finding("container.nvidia-runtime-missing", "pass", host(snap), "nvidia runtime registered",
                                    {"runtimes": c.runtimes}))
    return findings


@rule("container.toolkit-old")
def toolkit(snap, ctx):
    version = snap.software.container_toolkit_version
    if not version:
        return []
    if version_key(version) < version_key(MIN_TOOLKIT):
        return [Finding("container.toolkit-old", "warn", host(snap),
                        f"nvidia-container-toolkit {version} is older than {MIN_TOOLKIT}",
                        {"version": version, "minimum": MIN_TOOLKIT},
                        "gpuprep apply --tags container_toolkit", "NVIDIA security bulletin for CVE-2025-23266")]
    return [Finding("container.toolkit-old", "pass", host(snap), f"nvidia-container-toolkit {version}")]


# what a failed smoke container said -> why, and what fixes it (first match wins; patterns are the daemon's
# and nvidia-container-cli's own words, see tests/data/container/PROVENANCE.md)
SMOKE_CAUSES = (
    ("could not select device driver", "Docker has no GPU device driver: the NVIDIA Container Toolkit is not "
     "configured for it", "gpuprep apply --tags container_toolkit"),
    ("runtime specified nvidia", "Docker has no nvidia runtime", "gpuprep apply --tags container_toolkit"),
    ("invalid runtime name: nvidia", "Docker has no nvidia runtime", "gpuprep apply --tags container_toolkit"),
    ("Failed to initialize NVML: Unknown Error", "the container lost access to the GPU device nodes (cgroups; "
     "typically after `systemctl daemon-reload` with the systemd cgroup driver)",
     "Restart the container; to keep it from recurring, NVIDIA's troubleshooting guide gives Docker's cgroupfs driver "
     "(daemon.json \"exec-opts\": [\"native.cgroupdriver=cgroupfs\"]), explicit --device flags, or CDI"),
    ("Driver/library version mismatch", "the loaded kernel module and the driver libraries differ "
     "(the driver was upgraded without a reboot)", "Reboot the node (gpuprep apply --tags driver_pin holds the driver)"),
    ("load library failed", "nvidia-container-cli cannot load the driver's libraries on the host",
     "Install the NVIDIA driver on the host, then gpuprep check"),
    ("driver not loaded", "the nvidia kernel module is not loaded", "Load the driver (modprobe nvidia) or reboot"),
)


def _smoke_cause(text):
    for pattern, cause, remedy in SMOKE_CAUSES:
        if pattern.lower() in text.lower():
            return cause, remedy
    return None, "Run the evidence's command by hand; gpuprep apply --tags container_toolkit reconfigures the runtime"


@rule("container.gpu-smoke")
def gpu_smoke(snap, ctx):
    smoke = snap.container.smoke
    if smoke is None:
        return []                                   # only `check --deep` starts containers
    if smoke.error:
        return [Finding("container.gpu-smoke", "warn", host(snap), "The GPU smoke test could not start",
                        {"error": smoke.error}, "Check that Docker can import and run a local image")]
    if smoke.gpu is None:
        return []                                   # no GPU on the host: nothing to compare
    ok, message = judge_smoke(asdict(smoke.gpu), len(snap.gpus or []))
    evidence = {"command": " ".join(smoke.gpu.argv), "exit": smoke.gpu.rc,
                "listed": [f"GPU {i}: {name}" for i, name, _ in parse_gpu_list(smoke.gpu.stdout)]}
    if ok:
        return [Finding("container.gpu-smoke", "pass", host(snap), message, evidence)]
    cause, remedy = _smoke_cause(smoke.gpu.stderr + smoke.gpu.stdout)
    if cause:
        evidence["cause"] = cause
    return [Finding("container.gpu-smoke", "fail", host(snap), message, evidence, remedy,
                    "NVIDIA Container Toolkit troubleshooting")]


@rule("container.nccl-limits")
def nccl_limits(snap, ctx):
    smoke = snap.container.smoke
    if smoke is None or smoke.limits is None or smoke.limits.rc != 0:
        return []
    limits = parse_limits(smoke.limits.stdout)
    short = judge_limits(limits)
    if short:
        return [Finding("container.nccl-limits", "warn", host(snap),
                        "A container started without options gets less than NCCL needs: " + "; ".join(short),
                        limits, "Start training containers with --shm-size=1g --ulimit memlock=-1, or make that "
                        "Docker's default: gpuprep apply --tags container_toolkit (default-shm-size, default-ulimits)",
                        "NCCL user guide: Docker")]
    return [Finding("container.nccl-limits", "pass", host(snap), "Containers get enough /dev/shm and locked memory",
                    limits)]
