"""The compatibility knowledge base: data files in gpuprep/data, each row with its source.
Loaded lazily and once; nothing here decides a verdict."""
from __future__ import annotations

import functools
import re
from dataclasses import dataclass
from typing import Dict, List, Optional, Tuple

from .common.gputable import model_row, read_table


def data_text(name: str) -> str:
    """A file of gpuprep/data: beside the code in a wheel or a checkout, inside the archive in the node probe's
    zipapp (pkgutil asks the package's loader, so both work; importlib.resources costs ~10 ms of start-up)."""
    import pkgutil
    data = pkgutil.get_data(__package__, "data/" + name)
    if data is None:
        raise FileNotFoundError(f"gpuprep data file {name} is missing")
    return data.decode("utf-8")


def _rows(name: str) -> List[Dict[str, str]]:
    return read_table(data_text(name))


def version_key(text: str) -> Tuple[int, ...]:
    """'535.104.05' -> (535, 104, 5); '2.5.1+cu124' -> (2, 5, 1)."""
    return tuple(int(p) for p in re.findall(r"\d+", text.split("+")[0])[:4])


@dataclass(frozen=True)
class CudaRelease:
    cuda: str               # "12.4"
    label: str              # "CUDA 12.4 Update 1"
    toolkit_driver: str     # full compatibility minimum (Linux x86_64)
    minor_compat_driver: Optional[str]   # minimum under minor-version compatibility (11.0+)
    source: str


@functools.lru_cache(maxsize=None)
def cuda_releases() -> List[CudaRelease]:
    return [CudaRelease(r["cuda_toolkit"], r["release_label"], r["toolkit_driver_linux_x86_64"],
                        r["minor_compat_min_driver"] or None, r["source"]) for r in _rows("cuda-driver.csv")]


def cuda_release(cuda: str) -> Optional[CudaRelease]:
    """The GA release of a CUDA minor version (its driver minimum is the one the runtime needs)."""
    key = version_key(cuda)[:2]
    matches = [r for r in cuda_releases() if version_key(r.cuda)[:2] == key]
    if not matches:
        return None
    ga = [r for r in matches if " GA" in r.label or "general release" in r.label]
    released = [r for r in matches if " RC" not in r.label]
    return min(ga or released or matches, key=lambda r: version_key(r.toolkit_driver))


@functools.lru_cache(maxsize=None)
def cudnn_rows() -> List[Dict[str, str]]:
    return _rows("cudnn.csv")


@functools.lru_cache(maxsize=None)
def torch_arch_rows() -> List[Dict[str, str]]:
    return _rows("torch-arch.csv")


def torch_arch(torch_version: str, cuda_variant: str) -> Optional[Dict[str, str]]:
    release = ".".join(str(p) for p in version_key(torch_version)[:2])
    for row in torch_arch_rows():
        if row["torch"] == release and row["cuda_variant"] == cuda_variant:
            return row
    return None


@functools.lru_cache(maxsize=None)
def gpu_models() -> List[Dict[str, str]]:
    return _rows("gpus.csv")


def gpu_model(name: Optional[str]) -> Optional[Dict[str, str]]:
    return model_row(gpu_models(), name)


@functools.lru_cache(maxsize=None)
def xid_catalog() -> Dict[int, Dict[str, str]]:
    return {int(r["xid"]): r for r in _rows("xid.csv") if r["xid"].isdigit()}


@functools.lru_cache(maxsize=None)
def sxid_catalog() -> Dict[int, Dict[str, str]]:
    return {int(r["sxid"]): r for r in _rows("sxid.csv") if r["sxid"].isdigit()}


def profiles_text() -> str:
    return data_text("profiles.toml")


@functools.lru_cache(maxsize=None)
def first_cuda_for(cc: str) -> Optional[Dict[str, str]]:
    """The first CUDA release that supports compute capability `cc` (data/gpu-arch-cuda.csv), or None."""
    return next((r for r in _rows("gpu-arch-cuda.csv") if r["compute_capability"] == cc), None)


def last_branch_for(cc: str) -> Optional[Dict[str, str]]:
    """The last driver branch that supports compute capability `cc` (data/arch-eol.csv), or None (ongoing)."""
    return next((r for r in _rows("arch-eol.csv") if r["compute_capability"] == cc), None)


def newest_known_branch() -> int:
    """The newest driver branch gpuprep's CUDA table knows (its newest toolkit's driver)."""
    return max(int(r.toolkit_driver.split(".")[0]) for r in cuda_releases() if r.toolkit_driver[:1].isdigit())


@functools.lru_cache(maxsize=None)
def expected_busbw() -> List[Dict[str, str]]:
    return _rows("busbw.csv")
