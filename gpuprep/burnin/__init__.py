"""Burn-in: what a run needs before it starts (its duration, the rendezvous, torch and the GPUs checked), the
run on this node (torchrun.py), the ranks (worker.py, the only torch import), the judgement (judge.py, pure)."""
from __future__ import annotations

import re
import socket
from dataclasses import dataclass, field
from typing import Dict, List, Optional, Tuple

from ..errors import BadInput, bad_argument



@dataclass
class RunResult:
    ranks: Dict[int, dict]
    world_size: int
    exit_code: Optional[int]
    timed_out: bool
    wall_seconds: float
    log_tail: List[str] = field(default_factory=list)
    root_cause_rank: Optional[int] = None      # torchrun's "first observed failure"
    root_cause_exit: Optional[int] = None
    rendezvous_failed: bool = False
    nodes: int = 1
    new_xids: List[dict] = field(default_factory=list)
    expected_ranks: Optional[List[int]] = None      # this launch's ranks (a node of a multi-node run)
    setup_errors: List[str] = field(default_factory=list)   # the run could not start: no rank is to blame
    stopped_slow: bool = False          # stopped at the outer bound while its ranks still made progress
    duration: Optional[float] = None    # the --duration asked for


def parse_duration(text: str, shortest: float = 5) -> float:
    """Seconds from '60s', '2m', '1h' or a plain number, between `shortest` and 24 h."""
    units = {"s": 1, "m": 60, "h": 3600}
    try:
        if text and text[-1] in units:
            value = float(text[:-1]) * units[text[-1]]
        else:
            value = float(text)
    except ValueError:
        raise bad_argument("duration", f"{text!r} is not a duration like 60s or 2m") from None
    if not shortest <= value <= 24 * 3600:
        raise bad_argument("duration", f"{text!r} must be between {shortest:g}s and 24h")
    return value


# a host name or address (IPv4, IPv6 without brackets): it reaches torchrun's arguments and playbooks' variables,
# where a brace would be a template
_MASTER_HOST = re.compile(r"[A-Za-z0-9][A-Za-z0-9.:_-]{0,252}")


def parse_master(text: str):
    host, sep, port = text.rpartition(":")
    if not sep or not _MASTER_HOST.fullmatch(host) or not port.isdigit() or not 0 < int(port) < 65536:
        raise bad_argument("master", f"{text!r} is not HOST:PORT")
    return host, int(port)


# torchrun/rank output that means the run could not be set up, not that a rank's GPU failed
SETUP_ERRORS = (
    (re.compile(r"EADDRINUSE|[Aa]ddress already in use"),
     "the rendezvous port is already in use on the master (another burn-in or job holds it): choose another --master port"),
    (re.compile(r"No module named '?gpuprep"), "the ranks cannot import gpuprep: install gpuprep[burnin] in the same "
                                               "Python environment on every node"),
    (re.compile(r"No module named '?torch"), "PyTorch is missing on a node: pip install 'gpuprep[burnin]' there"),
    (re.compile(r"Name or service not known|nodename nor servname|Temporary failure in name resolution|"
                r"failed to resolve|getaddrinfo"), "the --master host name does not resolve on a node"),
    # CUDA's cudaErrorSystemNotReady: on NVSwitch systems, the GPUs are not registered with the NVLink fabric yet
    (re.compile(r"system not yet initiali[sz]ed|cudaErrorSystemNotReady|CUDA_ERROR_SYSTEM_NOT_READY|\(802\)"),
     "CUDA error 802, system not yet initialized: on an NVSwitch system nvidia-fabricmanager is not running or does "
     "not match the driver (`gpuprep check`: fabric.manager, fabric.manager-version)"),
)


def setup_errors(output: str) -> List[str]:
    return [meaning for pattern, meaning in SETUP_ERRORS if pattern.search(output)]


def preflight(nnodes: int, node_rank: int, master: Optional[str], resolve_timeout: float = 10.0) -> None:
    """What can be known before starting torchrun: the master resolves, and on node rank 0 (which hosts
    the rendezvous store) its port is free. BadInput names the problem instead of a rank taking the blame."""
    if nnodes == 1:
        return
    host, port = parse_master(master or "")
    import concurrent.futures
    pool = concurrent.futures.ThreadPoolExecutor(max_workers=1)
    try:
        pool.submit(socket.getaddrinfo, host, port, 0, socket.SOCK_STREAM).result(timeout=resolve_timeout)
    except concurrent.futures.TimeoutError:
        raise bad_argument("master", f"{master}: resolving {host!r} took over {resolve_timeout:.0f} s") from None
    except OSError as exc:
        raise bad_argument("master", f"{master}: {host!r} does not resolve ({exc.strerror or exc})") from None
    finally:
        pool.shutdown(wait=False)
    if node_rank == 0:
        with socket.socket() as probe:
            try:
                probe.bind(("", port))
            except OSError as exc:
                raise bad_argument("master", f"{master}: port {port} is not free on this host, which hosts the "
                               f"rendezvous as node rank 0 ({exc.strerror}): choose another port") from None


# large enough for ring all-reduce to reach its plateau on NVLink (the expectations in data/busbw.csv are for
# 8-16 GiB); the worker lowers it on GPUs with little memory
NCCL_SWEEP_MAX_MIB = 4096
TORCH_FLOOR = (2, 4)     # init_process_group(device_id=) is 2.2; is_bf16_supported(including_emulation=) 2.4


def torch_problem(version: Optional[str] = None) -> Optional[str]:
    """Why this machine's PyTorch cannot run the worker, or None. Read from the installed distribution's metadata,
    so checking costs no torch import."""
    if version is None:
        from importlib import metadata
        try:
            version = metadata.version("torch")
        except metadata.PackageNotFoundError:
            return "PyTorch is not installed: pip install 'gpuprep[burnin]' (or torch) to run the burn-in"
    match = re.match(r"(\d+)\.(\d+)", version)
    if match and (int(match.group(1)), int(match.group(2))) < TORCH_FLOOR:
        return (f"PyTorch {version} is older than the burn-in needs ({TORCH_FLOOR[0]}.{TORCH_FLOOR[1]}): "
                "pip install -U 'gpuprep[burnin]'")
    return None


def detect_gpus() -> int:
    """The GPUs this process may use, one rank each."""
    from ..probe.nvml import probe
    facts = probe()
    # a GPU this process may not open (another Slurm job's, behind the cgroup) gets no rank
    return sum(not gpu.not_permitted for gpu in facts.gpus) if facts.status.available else 0


def gpu_preflight() -> None:
    """BadInput naming why the GPUs cannot take a rank each (gpu_setup_problem), before torchrun starts."""
    from ..probe.nvml import probe
    facts = probe()
    problem = gpu_setup_problem(facts.gpus, facts.cuda_driver_version, _torch_cuda())
    if problem:
        raise BadInput(problem)


def _torch_cuda() -> Tuple[Optional[str], Optional[str]]:
    """(torch's version, the CUDA it was built for or None for a CPU build), from its files (no import)."""
    from ..probe.software import _torch_from_metadata
    info = _torch_from_metadata()
    return (info.version, info.cuda) if info else (None, None)


def gpu_setup_problem(gpus, driver_cuda: Optional[str], torch: Tuple[Optional[str], Optional[str]]) -> Optional[str]:
    """Why a GPU burn-in cannot start here, said before any rank dies and the report blames the GPUs: MIG (CUDA
    enumerates one MIG device per process, so every rank after the first fails), a CPU build of PyTorch, or a
    PyTorch built for a newer CUDA major than the driver runs (a cu130 wheel on an R550/R570 driver)."""
    mig = [str(g.index) for g in gpus if g.mig_mode_current]
    if mig:
        return (f"MIG is enabled on GPU {', '.join(mig)}: CUDA gives each process one MIG instance, so a rank per GPU "
                "cannot run; disable MIG for the burn-in (`nvidia-smi -i N -mig 0`, then reset the GPU) or run one "
                "rank with CUDA_VISIBLE_DEVICES=MIG-<uuid> --nproc 1")
    version, built = torch
    if version and not built and any(not g.not_permitted for g in gpus):
        return (f"PyTorch {version} is a CPU build: install a CUDA wheel that this driver runs (e.g. "
                "pip install torch --index-url https://download.pytorch.org/whl/cu128), or use --backend gloo")
    if built and driver_cuda and int(built.split(".")[0]) > int(driver_cuda.split(".")[0]):
        return (f"PyTorch {version} is built for CUDA {built}, newer than this driver runs (CUDA {driver_cuda}): "
                f"install a cu{driver_cuda.split('.')[0]}x wheel, or upgrade the driver (`gpuprep compat`)")
    return None
