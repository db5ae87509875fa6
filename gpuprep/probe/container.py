"""The container runtime: is Docker reachable, which runtimes does it know, which is default."""
from __future__ import annotations

from ..snapshot import Container

_TIMEOUT = 3


def probe_docker() -> Container:
    try:
        import docker
    except ImportError:
        return Container(docker_reachable=None, error="docker SDK not installed")
    try:
        client = docker.from_env(timeout=_TIMEOUT)
        info = client.info()
    except Exception as exc:   # the SDK raises several unrelated types for "no daemon"
        return Container(docker_reachable=False, error=str(exc).splitlines()[0][:200])
    return Container(docker_reachable=True, docker_version=info.get("ServerVersion"),
                     runtimes=sorted((info.get("Runtimes") or {}).keys()),
                     default_runtime=info.get("DefaultRuntime"))
