"""container.*: can containers reach the GPUs (Docker with the NVIDIA runtime, a current toolkit)."""
from __future__ import annotations

from ..knowledge import version_key
from . import Finding, host, rule

# nvidia-container-toolkit 1.17.8 fixed CVE-2025-23266 ("NVIDIAScape"); older releases are exploitable.
MIN_TOOLKIT = "1.17.8"


@rule
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


@rule
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
