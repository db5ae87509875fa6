"""The burn-in's run on this node: torchrun started with gpuprep's worker as every rank (worker.py, the only torch
import), watched until the ranks report or the time is up, and its output read for the rank that failed first and
the set-up errors a user can fix."""
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
from typing import Callable, Dict, List, Optional

from ..errors import BadInput
from . import NCCL_SWEEP_MAX_MIB, RunResult, parse_master, preflight, setup_errors
from .report_schema import typed

GRACE_SECONDS = 15
SLOW_FACTOR = 3       # a run still making progress is given up to 3x its duration and grace before it is stopped
DEFAULT_RDZV_TIMEOUT = 60.0

_REPORT_RANK = re.compile(r"^\s*rank\s*:\s*(\d+)", re.M)
_REPORT_EXIT = re.compile(r"^\s*exitcode\s*:\s*(-?\d+)", re.M)


def _failures(report: str) -> List[tuple]:
    """(rank, exit code) of each failure in a block of torchrun's error report (entries headed `[N]:`)."""
    entries = re.split(r"^\[\d+\]:\s*$", report, flags=re.M)
    found = [(_REPORT_RANK.search(e), _REPORT_EXIT.search(e)) for e in entries[1:] or entries]
    return [(int(rank.group(1)), int(code.group(1)) if code else None) for rank, code in found if rank]


_AFTER_A_PEER = (1, -6)


def root_cause(output: str):
    """(rank, exit code) of the rank that failed first: torchrun's 'Root Cause (first observed failure)', unless
    torchrun saw several ranks fail in one look (their times are the same second) and named one that raised a Python
    error (exit 1, what a rank does when its peer vanishes mid-collective) or was aborted (SIGABRT, as NCCL's watchdog
    tears such a rank down) while exactly one other died abruptly (another signal, an exit of its own): that one
    went first."""
    head, found, cause = output.rpartition("Root Cause")
    if not found:
        return None, None
    first = _failures(cause)
    if not first:
        return None, None
    rank, code = first[0]
    # what a rank does because a peer vanished: exit 1 (a Python error from the collective) or -6 (SIGABRT: NCCL's
    # watchdog, and gloo's teardown, abort the process); -15 is SIGTERM, torchrun's own stop of the other ranks
    abrupt = {failure for failure in _failures(head.rpartition("Failures:")[2])
              if failure[1] not in (*_AFTER_A_PEER, -15, None)}
    if code in _AFTER_A_PEER and len(abrupt) == 1:
        return abrupt.pop()
    return rank, code


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


def stall_window(duration: float) -> float:
    """How long a run may go without a heartbeat before it is hung: the worker's collective timeout (gloo and NCCL
    raise on their own past it) and the grace after it."""
    return max(10.0, min(60.0, duration)) + GRACE_SECONDS


def _watch(proc: subprocess.Popen, out_dir: str, duration: float, rdzv_timeout: float,
           on_progress: Optional[Callable[[dict], None]]):
    """Wait for torchrun. Kill its whole process group when the rendezvous has not completed within
    `rdzv_timeout`; past duration + grace, when no rank has made progress (the heartbeat) for the stall window
    (a hang), or, while still progressing, past SLOW_FACTOR times that (a slow run, never a hang).
    Returns (hung, rendezvous failed, stopped while progressing)."""
    start = time.monotonic()
    joined_at = None
    beats, beat_at = None, start
    while proc.poll() is None:
        time.sleep(0.25)
        now = time.monotonic()
        elapsed = now - start
        if joined_at is None and os.path.exists(os.path.join(out_dir, "joined")):
            joined_at, beat_at = elapsed, now
        progress = _read_json(os.path.join(out_dir, "progress.json"))
        if progress and progress.get("beats") != beats:
            beats, beat_at = progress.get("beats"), now
            if on_progress:
                on_progress(progress)
        if joined_at is None:
            if elapsed > rdzv_timeout:
                return _stop(proc, False, True, False)
            continue
        overdue = elapsed > joined_at + duration + GRACE_SECONDS
        if overdue and now - beat_at > stall_window(duration):
            return _stop(proc, True, False, False)
        if elapsed > joined_at + SLOW_FACTOR * (duration + GRACE_SECONDS):
            return _stop(proc, False, False, True)
    return False, False, False


def _stop(proc: subprocess.Popen, hung: bool, rendezvous_failed: bool, slow: bool):
    os.killpg(proc.pid, signal.SIGKILL)
    proc.wait()
    return hung, rendezvous_failed, slow


def _rank_results(out_dir: str) -> Dict[int, dict]:
    ranks = {}
    for name in os.listdir(out_dir):
        if re.fullmatch(r"rank\d+\.json", name):
            data = _read_json(os.path.join(out_dir, name))
            try:
                ranks[typed(data, name).rank] = data
            except ValueError:
                continue        # a rank whose result is not a rank's result did not report: judged as missing
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
        timed_out, rendezvous_failed, stopped_slow = _watch(proc, out_dir, duration, rdzv_timeout, on_progress)
        wall = time.monotonic() - start
        log.seek(0)
        output = log.read()
    ranks = _rank_results(out_dir)
    if not keep:
        shutil.rmtree(out_dir, ignore_errors=True)
    cause_rank, cause_exit = root_cause(output)
    xids_after = _xids()
    new_xids = xids_after[len(xids_before):] if xids_before is not None and xids_after is not None else []
    return RunResult(ranks=ranks, world_size=nproc * nnodes,
                     exit_code=None if timed_out or stopped_slow else proc.returncode,
                     stopped_slow=stopped_slow, duration=duration,
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
