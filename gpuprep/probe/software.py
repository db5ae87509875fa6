"""Versions of the driver and the CUDA stack, read from files and package metadata. torch is
never imported here: its version files say enough, and importing it costs seconds."""
from __future__ import annotations

import glob
import json
import re
import shutil
import subprocess
from typing import List, Optional

from ..parsers.kernel_log import module_flavor
from ..snapshot import Software, Toolkit, TorchInfo
from .system import Root

_TIMEOUT = 5


def probe_software(root: Root) -> Software:
    software = Software()
    proc_version = root.read("/proc/driver/nvidia/version") or ""
    flavor, version = module_flavor(proc_version)
    software.kernel_module_flavor = flavor
    software.kernel_module_version = version or root.first_line("/sys/module/nvidia/version")
    software.cuda_toolkits = _toolkits(root)     # [] is a reading (none here); captures leave None (unknown)
    software.cudnn_version = _header_version(root, "cudnn_version.h", "CUDNN") or \
        _header_version(root, "cudnn.h", "CUDNN")
    software.nccl_version = _header_version(root, "nccl.h", "NCCL")
    if root.live:
        software.torch = _torch_from_metadata() or TorchInfo()      # no version: looked for, not installed
        if software.nccl_version is None:
            for major in (13, 12, 11):
                version = _dist_version(f"nvidia-nccl-cu{major}")
                if version:
                    software.nccl_version, software.nccl_cuda_major = version, major
                    break
        software.cudnn_version = software.cudnn_version or _dist_version("nvidia-cudnn-cu12") or \
            _dist_version("nvidia-cudnn-cu13") or _dist_version("nvidia-cudnn-cu11")
        software.container_toolkit_version = _ctk_version()
    return software


def _toolkits(root: Root) -> List[Toolkit]:
    found = []
    for path in sorted(glob.glob(str(root.path("/usr/local")) + "/cuda*")):
        rel = "/usr/local/" + path.rsplit("/", 1)[1]
        if root.path(rel).is_symlink():
            continue
        version = None
        raw = root.read(f"{rel}/version.json")
        if raw:
            try:
                version = json.loads(raw).get("cuda", {}).get("version")
            except ValueError:
                version = None
        if version is None:
            text = root.read(f"{rel}/version.txt") or ""
            match = re.search(r"CUDA Version (\S+)", text)
            version = match.group(1) if match else None
        if version is None and root.live and root.path(f"{rel}/bin/nvcc").exists():
            version = _nvcc_version(str(root.path(f"{rel}/bin/nvcc")))
        if version is not None or root.path(f"{rel}/bin/nvcc").exists():
            found.append(Toolkit(path=rel, version=version))
    return found


def _nvcc_version(nvcc: str) -> Optional[str]:
    try:
        out = subprocess.run([nvcc, "--version"], capture_output=True, text=True, timeout=_TIMEOUT).stdout
    except (OSError, subprocess.SubprocessError):
        return None
    match = re.search(r"release (\d+\.\d+), V(\S+)", out)
    return match.group(2) if match else None


def _header_version(root: Root, header: str, prefix: str) -> Optional[str]:
    for directory in ("/usr/include", "/usr/include/x86_64-linux-gnu", "/usr/local/cuda/include"):
        text = root.read(f"{directory}/{header}")
        if not text:
            continue
        parts = [re.search(rf"#define {prefix}_{name}\s+(\d+)", text) for name in ("MAJOR", "MINOR", "PATCHLEVEL")]
        if parts[0] and parts[1]:
            return ".".join(p.group(1) for p in parts if p)
    return None


def _dist_version(name: str) -> Optional[str]:
    from importlib import metadata
    try:
        return metadata.version(name)
    except metadata.PackageNotFoundError:
        return None


def _torch_from_metadata() -> Optional[TorchInfo]:
    from importlib import metadata
    try:
        dist = metadata.distribution("torch")
    except metadata.PackageNotFoundError:
        return None
    info = TorchInfo(version=dist.version)
    try:
        text = dist.locate_file("torch/version.py").read_text()
    except OSError:
        return info
    cuda = re.search(r"^cuda\s*(?::\s*\S+)?\s*=\s*'([^']+)'", text, re.M)
    info.cuda = cuda.group(1) if cuda else None
    if info.cuda:
        info.arch_list = _torch_arch_list(dist)
        info.cudnn = _torch_cudnn(info)
    return info


# torch.cuda.get_arch_list() is the CUDA_ARCH_FLAGS string compiled into libtorch_python.so ("sm_75 sm_80 ... sm_120"
# in torch 2.14.1+cu130): read from the file, torch is never imported (seconds, and hundreds of MB, on every check)
_ARCH_FLAGS = re.compile(rb"(?:sm|compute)_\d+[a-z]?(?: (?:sm|compute)_\d+[a-z]?)+")
_TORCH_LIBRARY_MAX = 1 << 30


def _torch_arch_list(dist) -> Optional[List[str]]:
    """Scanned in 8 MiB chunks, each overlapping the last by more than the longest flags string; the regex only
    runs where memchr-fast find() sees "sm_" (a few places in a 34 MB library)."""
    try:
        with open(dist.locate_file("torch/lib/libtorch_python.so"), "rb") as fh:
            tail, read = b"", 0
            while read < _TORCH_LIBRARY_MAX:
                chunk = fh.read(8 << 20)
                if not chunk:
                    return None
                read += len(chunk)
                found = _arch_flags(tail + chunk)
                if found:
                    return found
                tail = chunk[-512:]
    except OSError:
        return None
    return None


def _arch_flags(data: bytes) -> Optional[List[str]]:
    at = data.find(b"sm_")
    while at >= 0:
        match = _ARCH_FLAGS.match(data, at)
        if match and match.end() < len(data):
            return [a for a in match.group().decode().split() if a.startswith("sm_")] or None
        at = data.find(b"sm_", at + 3)
    return None


def _torch_cudnn(info: TorchInfo) -> Optional[str]:
    """The cuDNN a pip wheel of torch runs with: the nvidia-cudnn-cuXX wheel of its CUDA major."""
    major = (info.cuda or "").split(".")[0]
    return _dist_version(f"nvidia-cudnn-cu{major}") if major.isdigit() else None


def _ctk_version() -> Optional[str]:
    for tool in ("nvidia-ctk", "nvidia-container-toolkit"):
        exe = shutil.which(tool)
        if not exe:
            continue
        try:
            out = subprocess.run([exe, "--version"], capture_output=True, text=True, timeout=_TIMEOUT).stdout
        except (OSError, subprocess.SubprocessError):
            continue
        match = re.search(r"version (\d+\.\d+\.\d+)", out)
        if match:
            return match.group(1)
    return None
