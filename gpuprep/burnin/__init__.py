"""Burn-in: launch torchrun (this module), run the ranks (worker, the only torch import), judge the
per-rank results (judge, pure)."""
from __future__ import annotations

import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from typing import Callable, Dict, List, Optional, Tuple

from ..errors import BadInput, bad_argument

GRACE_SECONDS = 15
DEFAULT_RDZV_TIMEOUT = 60.0


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


_REPORT_RANK = re.compile(r"^\s*rank\s*:\s*(\d+)", re.M)
_REPORT_EXIT = re.compile(r"^\s*exitcode\s*:\s*(-?\d+)", re.M)


def _failures(report: str) -> List[tuple]:
    """(rank, exit code) of each failure in a block of torchrun's error report (entries headed `[N]:`)."""
    entries = re.split(r"^\[\d+\]:\s*$", report, flags=re.M)
    found = [(_REPORT_RANK.search(e), _REPORT_EXIT.search(e)) for e in entries[1:] or entries]
    return [(int(rank.group(1)), int(code.group(1)) if code else None) for rank, code in found if rank]


def root_cause(output: str):
    """(rank, exit code) of the rank that failed first: torchrun's 'Root Cause (first observed failure)', unless
    torchrun saw several ranks fail in one look (their times are the same second) and named one that raised a Python
    error (exit 1, what a rank does when its peer vanishes mid-collective) while exactly one other died abruptly (a
    signal, an exit of its own): that one went first."""
    head, found, cause = output.rpartition("Root Cause")
    if not found:
        return None, None
    first = _failures(cause)
    if not first:
        return None, None
    rank, code = first[0]
    # -15 is SIGTERM, torchrun's own stop of the other ranks: not a death of their own
    abrupt = {failure for failure in _failures(head.rpartition("Failures:")[2]) if failure[1] not in (1, -15, None)}
    if code == 1 and len(abrupt) == 1:
        return abrupt.pop()
    return rank, code


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


def parse_master(text: str):
    host, sep, port = text.rpartition(":")
    if not sep or not host or not port.isdigit() or not 0 < int(port) < 65536:
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


def worker_options(backend: str, collective_timeout: float) -> List[str]:
    """The worker's options: its backend, the collective timeout, and the largest all-reduce message (small on the
    CPU; on NCCL large enough to reach the busbw that data/busbw.csv expects)."""
    return ["--backend", backend, "--timeout", str(collective_timeout),
            "--max-mib", "16" if backend == "gloo" else str(NCCL_SWEEP_MAX_MIB)]


def child_environment(environ: Dict[str, str], nccl_file: Dict[str, str],
                      extra: Optional[Dict[str, str]] = None) -> Dict[str, str]:
    """torchrun's environment: this one, the node's NCCL settings (/etc/gpuprep/env), one OpenMP thread per rank
    unless set. NCCL's error handling stays torch's own (TORCH_NCCL_ASYNC_ERROR_HANDLING defaults to 3; 1 can hang
    in ncclCommAbort on a wedged GPU)."""
    child = dict(environ)
    child.update(nccl_file)
    child.setdefault("OMP_NUM_THREADS", "1")
    child.update(extra or {})
    return child


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def nccl_env_file(path: str = "/etc/gpuprep/env") -> Dict[str, str]:
    """The NCCL/OMP environment `gpuprep apply --tags nccl_env` wrote, when there is one, read as systemd reads
    it (the quotes are the file's syntax: NCCL_SOCKET_IFNAME="=eth0" reaches NCCL as =eth0). A line this file's
    writer never produces is refused, naming it: half an environment would send NCCL the wrong way."""
    from ..common.ncclenv import parse_env_file
    try:
        with open(path, encoding="utf-8", errors="replace") as fh:
            text = fh.read(1 << 20)
    except OSError:
        return {}
    env, skipped = parse_env_file(text)
    if skipped:
        raise BadInput(f"{path}: line {skipped[0]} is not NAME=\"value\" as `gpuprep apply` writes it; "
                       "fix or re-apply the nccl_env role")
    return env


def _torchrun(duration: float, nproc: int, backend: str, nnodes: int, node_rank: int, master: Optional[str],
              out_dir: str) -> List[str]:
    collective_timeout = max(10.0, min(60.0, duration))
    if nnodes == 1:
        rendezvous = ["--rdzv-backend", "c10d", "--rdzv-endpoint", f"127.0.0.1:{free_port()}"]
    else:
        host, port = parse_master(master or "")
        # static rendezvous: the first node (node rank 0) hosts the store, as SuperBench does
        rendezvous = ["--node-rank", str(node_rank), "--master-addr", host, "--master-port", str(port)]
    return [sys.executable, "-m", "torch.distributed.run", "--nnodes", str(nnodes), "--nproc-per-node", str(nproc),
            "--max-restarts", "0", *rendezvous,
            "-m", "gpuprep.burnin.worker", "--duration", str(duration), "--out", out_dir,
            *worker_options(backend, collective_timeout)]


def _watch(proc: subprocess.Popen, out_dir: str, duration: float, rdzv_timeout: float,
           on_progress: Optional[Callable[[dict], None]]):
    """Wait for torchrun; kill its whole process group when the rendezvous has not completed within
    `rdzv_timeout`, or the ranks outlive duration + grace after it. Returns (timed out, rendezvous failed)."""
    start = time.monotonic()
    joined_at = None
    while proc.poll() is None:
        time.sleep(0.25)
        elapsed = time.monotonic() - start
        if joined_at is None and os.path.exists(os.path.join(out_dir, "joined")):
            joined_at = elapsed
        rendezvous_failed = joined_at is None and elapsed > rdzv_timeout
        timed_out = joined_at is not None and elapsed > joined_at + duration + GRACE_SECONDS
        if rendezvous_failed or timed_out:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
            return timed_out, rendezvous_failed
        progress = _read_json(os.path.join(out_dir, "progress.json")) if on_progress else None
        if progress:
            on_progress(progress)
    return False, False


def _rank_results(out_dir: str) -> Dict[int, dict]:
    ranks = {}
    for name in os.listdir(out_dir):
        if re.fullmatch(r"rank\d+\.json", name):
            data = _read_json(os.path.join(out_dir, name))
            if data:
                ranks[data["rank"]] = data
    return ranks


def launch(duration: float, nproc: int, backend: str, env: Optional[Dict[str, str]] = None,
           nnodes: int = 1, node_rank: int = 0, master: Optional[str] = None,
           rdzv_timeout: float = DEFAULT_RDZV_TIMEOUT, out_dir: Optional[str] = None,
           on_progress: Optional[Callable[[dict], None]] = None,
           env_file: str = "/etc/gpuprep/env") -> RunResult:
    """Run torchrun for this node (watched by _watch) and gather each rank's results and the new Xids."""
    preflight(nnodes, node_rank, master)
    keep = out_dir is not None
    out_dir = out_dir or tempfile.mkdtemp(prefix="gpuprep-burnin-")
    os.makedirs(out_dir, exist_ok=True)
    argv = _torchrun(duration, nproc, backend, nnodes, node_rank, master, out_dir)
    child_env = child_environment(dict(os.environ), nccl_env_file(env_file), env)
    xids_before = _xids()
    start = time.monotonic()
    with tempfile.TemporaryFile(mode="w+") as log:
        proc = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT, text=True, env=child_env,
                                start_new_session=True)
        timed_out, rendezvous_failed = _watch(proc, out_dir, duration, rdzv_timeout, on_progress)
        wall = time.monotonic() - start
        log.seek(0)
        output = log.read()
    ranks = _rank_results(out_dir)
    if not keep:
        shutil.rmtree(out_dir, ignore_errors=True)
    cause_rank, cause_exit = root_cause(output)
    xids_after = _xids()
    new_xids = xids_after[len(xids_before):] if xids_before is not None and xids_after is not None else []
    return RunResult(ranks=ranks, world_size=nproc * nnodes, exit_code=None if timed_out else proc.returncode,
                     timed_out=timed_out, wall_seconds=wall, log_tail=output.splitlines()[-20:],
                     root_cause_rank=cause_rank, root_cause_exit=cause_exit, rendezvous_failed=rendezvous_failed,
                     nodes=nnodes, new_xids=new_xids,
                     expected_ranks=list(range(node_rank * nproc, (node_rank + 1) * nproc)),
                     setup_errors=setup_errors(output) if proc.returncode or rendezvous_failed else [])


def _xids():
    from ..probe.commands import recent_xids
    events = recent_xids()
    return None if events is None else [{"code": e.code, "pci": e.pci, "time": e.time, "message": e.message}
                                        for e in events]


def _read_json(path: str) -> Optional[dict]:
    try:
        with open(path) as fh:
            return json.load(fh)
    except (OSError, ValueError):
        return None
