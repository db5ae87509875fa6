"""The container runtime: is Docker reachable, which runtimes does it know, which is default.
Through the Docker SDK where gpuprep is installed; through the `docker` CLI on a node that has only
the probe's zipapp (no SDK there)."""
from __future__ import annotations

import json
import shutil
import subprocess

from ..snapshot import Container, Smoke, build

_TIMEOUT = 3


def probe_docker() -> Container:
    try:
        import docker
    except ImportError:
        return _probe_docker_cli()
    try:
        client = docker.from_env(timeout=_TIMEOUT)
        info = client.info()
    except Exception as exc:   # the SDK raises several unrelated types for "no daemon"
        return Container(docker_reachable=False, error=str(exc).splitlines()[0][:200])
    return _from_info(info)


def _from_info(info: dict) -> Container:
    return Container(docker_reachable=True, docker_version=info.get("ServerVersion"),
                     runtimes=sorted((info.get("Runtimes") or {}).keys()),
                     default_runtime=info.get("DefaultRuntime"))


def _probe_docker_cli() -> Container:
    cli = shutil.which("docker")
    if not cli:
        return Container(docker_reachable=None, error="neither the docker SDK nor the docker CLI is installed")
    try:
        done = subprocess.run([cli, "info", "--format", "{{json .}}"], capture_output=True, text=True,
                              timeout=_TIMEOUT * 3)
        info = json.loads(done.stdout) if done.returncode == 0 else None
    except (OSError, subprocess.TimeoutExpired, ValueError) as exc:
        return Container(docker_reachable=False, error=f"docker info: {exc}"[:200])
    if not isinstance(info, dict) or not info.get("ServerVersion"):
        reason = (done.stderr or "").strip().splitlines()
        return Container(docker_reachable=False, error=(reason[-1] if reason else "docker info failed")[:200])
    return _from_info(info)


def probe_smoke(container: Container, with_gpus: bool) -> Smoke:
    """Start the smoke containers through the docker CLI (argument lists, each run bounded)."""
    from ..common.container_smoke import smoke
    cli = shutil.which("docker")
    if not cli:
        return Smoke(error="no docker CLI to start containers with")
    return build(Smoke, smoke(cli, runtimes=container.runtimes or (), with_gpus=with_gpus))
