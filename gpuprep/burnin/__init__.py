"""Burn-in: launch torchrun (launcher), judge the per-rank results (judge, pure)."""
from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from typing import Dict, List, Optional

from ..errors import BadInput

GRACE_SECONDS = 15


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


def root_cause(output: str):
    """(rank, exit code) of torchrun's 'Root Cause (first observed failure)' block, if any."""
    import re
    block = output.split("Root Cause", 1)
    if len(block) < 2:
        return None, None
    rank = re.search(r"rank\s*:\s*(\d+)", block[1])
    code = re.search(r"exitcode\s*:\s*(-?\d+)", block[1])
    return (int(rank.group(1)) if rank else None), (int(code.group(1)) if code else None)


def parse_duration(text: str) -> float:
    units = {"s": 1, "m": 60, "h": 3600}
    try:
        if text and text[-1] in units:
            value = float(text[:-1]) * units[text[-1]]
        else:
            value = float(text)
    except ValueError:
        raise BadInput(f"--duration {text!r} is not a duration like 60s or 2m") from None
    if not 5 <= value <= 24 * 3600:
        raise BadInput(f"--duration {text!r} must be between 5s and 24h")
    return value


def torch_available() -> bool:
    import importlib.util
    return importlib.util.find_spec("torch") is not None


def detect_gpus() -> int:
    from ..probe.nvml import probe
    facts = probe()
    return len(facts.gpus) if facts.status.available else 0


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def launch(duration: float, nproc: int, backend: str, env: Optional[Dict[str, str]] = None,
           timeout: Optional[float] = None, port: Optional[int] = None) -> RunResult:
    """Run torchrun for one node; a watchdog ends the whole process group past duration + grace."""
    out_dir = tempfile.mkdtemp(prefix="gpuprep-burnin-")
    collective_timeout = max(10.0, min(60.0, duration))
    argv = [sys.executable, "-m", "torch.distributed.run", "--nnodes", "1", "--nproc-per-node", str(nproc),
            "--max-restarts", "0", "--rdzv-backend", "c10d", "--rdzv-endpoint", f"127.0.0.1:{port or _free_port()}",
            "-m", "gpuprep.burnin.worker", "--duration", str(duration), "--out", out_dir,
            "--backend", backend, "--timeout", str(collective_timeout), "--max-mib", "16" if backend == "gloo" else "256"]
    child_env = dict(os.environ)
    child_env.setdefault("OMP_NUM_THREADS", "1")
    child_env["TORCH_NCCL_ASYNC_ERROR_HANDLING"] = "1"
    child_env.update(env or {})
    limit = timeout if timeout is not None else duration + GRACE_SECONDS + 30
    start = time.monotonic()
    proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=child_env,
                            start_new_session=True)
    timed_out = False
    try:
        output, _ = proc.communicate(timeout=limit)
    except subprocess.TimeoutExpired:
        timed_out = True
        os.killpg(proc.pid, signal.SIGKILL)
        output, _ = proc.communicate()
    wall = time.monotonic() - start
    ranks = {}
    for name in os.listdir(out_dir):
        with open(os.path.join(out_dir, name)) as fh:
            data = json.load(fh)
        ranks[data["rank"]] = data
    shutil.rmtree(out_dir, ignore_errors=True)
    cause_rank, cause_exit = root_cause(output or "")
    return RunResult(ranks=ranks, world_size=nproc, exit_code=None if timed_out else proc.returncode,
                     timed_out=timed_out, wall_seconds=wall, log_tail=(output or "").splitlines()[-20:],
                     root_cause_rank=cause_rank, root_cause_exit=cause_exit)
