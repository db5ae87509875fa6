"""The watcher on one node of a job that spans nodes, I/O only: it finds the job's ranks on this node (by their
environment: a Slurm job's steps, or the ranks that meet at one MASTER_ADDR:MASTER_PORT), samples them as `watch
--pid` does, runs the node's own check once, reads the flight recorder dumps the ranks wrote and NCCL's RAS report,
and writes JSON lines (job/stream.py) for the command that started it (srun for `watch --job`, Ansible for `watch
-i`) to merge."""
from __future__ import annotations

import os
import signal
import sys
import threading
import time
from typing import Callable, Dict, Optional, Tuple

from ..errors import BadInput
from .slurmjob import JOB_ID
from .stream import Emitter

def split_master(master: str, option: str) -> Tuple[str, str]:
    """(address, port) of ADDR:PORT, as a rank's MASTER_ADDR and MASTER_PORT hold them; BadInput otherwise."""
    from ..burnin import parse_master
    try:
        addr, port = parse_master(str(master or ""))
    except BadInput:
        raise BadInput(f"{option} {str(master)[:80]!r}: give the ranks' MASTER_ADDR:MASTER_PORT, e.g. "
                       "10.0.0.1:29500") from None
    return addr, str(port)


class JobProcesses:
    """The processes on this node of one job, each one's environment read once (a process's initial environment
    does not change). Which job: `of_job(env)` says from a process's environment."""

    def __init__(self, of_job: Callable[[dict], bool]):
        self.of_job = of_job
        self.known: Dict[tuple, Optional[dict]] = {}

    @classmethod
    def of_slurm_job(cls, job_id: str, own_step: Optional[str]) -> "JobProcesses":
        """Slurm job `job_id`'s other steps (their SLURM_JOB_ID and SLURM_STEP_ID): the batch script itself, with no
        step of its own, and this watcher's step are not the job's ranks."""
        if not JOB_ID.fullmatch(job_id or ""):
            raise BadInput(f"--job-node {str(job_id)[:40]!r}: a Slurm job id is a number")
        return cls(lambda env: env.get("SLURM_JOB_ID") == job_id and "SLURM_STEP_ID" in env and
                   env.get("SLURM_STEP_ID") != own_step)

    @classmethod
    def of_rendezvous(cls, master: str) -> "JobProcesses":
        """The ranks that meet at `master` (ADDR:PORT, as their MASTER_ADDR and MASTER_PORT hold it: what torchrun,
        or a launcher of its own, gives every rank of one job, on every node)."""
        addr, port = split_master(master, "--node-of")
        return cls(lambda env: env.get("MASTER_ADDR") == addr and env.get("MASTER_PORT") == port)

    def __call__(self) -> list:
        import psutil
        out, alive = [], set()
        for proc in psutil.process_iter(["pid", "create_time"]):
            key = (proc.info["pid"], proc.info["create_time"])
            alive.add(key)
            if key not in self.known:
                self.known[key] = self._of_job(proc)
            if self.known[key] is not None:
                out.append(proc)
        self.known = {k: v for k, v in self.known.items() if k in alive}
        return out

    def _of_job(self, proc) -> Optional[dict]:
        import psutil
        if proc.pid == os.getpid():
            return None
        try:
            env = proc.environ()
        except (psutil.Error, OSError):
            return None
        return env if self.of_job(env) else None

    def dump_paths(self, ranks) -> Dict[int, str]:
        """Each rank's flight recorder dump file, where the job set TORCH_FR_DUMP_TEMP_FILE (or the NCCL name of
        it): the prefix and the rank, as PyTorch names them."""
        out = {}
        envs = {k[0]: v for k, v in self.known.items() if v}
        for rank in ranks:
            env = envs.get(rank.pid) or {}
            prefix = env.get("TORCH_FR_DUMP_TEMP_FILE") or env.get("TORCH_NCCL_DEBUG_INFO_TEMP_FILE")
            if prefix and rank.rank is not None:
                out[rank.rank] = f"{prefix}{rank.rank}"
        return out


def node_watch(processes: JobProcesses, interval: float, seconds: Optional[float], node_check: Callable[[], dict],
               out=None, check_grace: float = 0.0) -> int:
    """The watcher on one node: JSON lines on `out` until the job's ranks here (`processes`) have all ended, the
    merger is gone, `seconds` pass, or SIGTERM. `node_check()` judges this node once (in a thread: the samples
    start at once), for the verdict node or code; a watch whose window ends before the check does waits for it up
    to `check_grace` seconds (a merger that reads the lines only at the end judges without it otherwise)."""
    from ..slurm import node_name
    from .watch import Watcher
    out = out or sys.stdout
    emitter = Emitter(node_name(), out)
    checked: Dict[str, dict] = {}
    checking = threading.Thread(target=lambda: checked.setdefault("node", node_check()), daemon=True)
    checking.start()
    dumps = _DumpReader(processes)
    ras = _RasRelay(os.environ.get("NCCL_RAS_ADDR") or None)
    watcher = Watcher(None, interval, family=processes)

    def sample(w) -> None:
        extra = {"dumps": dumps.new(w.ranks)}
        report = ras.new()
        if report is not None:
            extra["ras"] = report
        if "node" in checked and "sent" not in checked:
            extra["node"], checked["sent"] = checked["node"], {}
        emitter.sample(w, extra)
    for signum in (signal.SIGTERM, signal.SIGUSR1):       # srun passes SIGUSR1 on when the merger is done
        signal.signal(signum, _told_to_stop)
    why = "the job's ranks on this node ended"
    try:
        watcher.run(seconds, lambda: emitter.closed, sample)
        if not (watcher.ranks and all(r.ended for r in watcher.ranks)):
            why = "the watch's time is up" if not emitter.closed else "the merger is gone"
    except KeyboardInterrupt:
        why = "told to stop"
    end = {"end": why}
    if "sent" not in checked and not emitter.closed:
        checking.join(timeout=check_grace)
        if "node" in checked:
            end["node"] = checked["node"]
    emitter.sample(watcher, end)
    return 0


class _RasRelay:
    """NCCL's RAS service on this node (NCCL_RAS_ADDR, else localhost:28028), asked every RAS_EVERY seconds in a
    thread of its own: its report, as the service words it, sent on once each time it changes. Nothing answers
    where the job does not use NCCL (2.24+): then nothing is sent."""
    RAS_EVERY = 10.0

    def __init__(self, addr: Optional[str]):
        from .ras import DEFAULT_ADDR
        self.addr, self.latest, self.sent = addr or DEFAULT_ADDR, None, None
        threading.Thread(target=self._ask, daemon=True).start()

    def _ask(self) -> None:
        from .ras import query_text
        from .stream import MAX_RAS
        while True:
            try:
                text = query_text(self.addr, timeout=3)
                self.latest = text if len(text) <= MAX_RAS else None
            except (OSError, ValueError):
                pass
            time.sleep(self.RAS_EVERY)

    def new(self) -> Optional[str]:
        latest = self.latest
        if latest is None or latest == self.sent:
            return None
        self.sent = latest
        return latest


def _told_to_stop(signum, frame):
    raise KeyboardInterrupt


class _DumpReader:
    """The flight recorder dumps the ranks wrote, each sent once (JSON only: a pickled one is refused)."""

    def __init__(self, processes: JobProcesses):
        self.processes = processes
        self.sent: Dict[str, float] = {}

    def new(self, ranks) -> list:
        from .flight import read_dump
        out = []
        for rank, path in self.processes.dump_paths(ranks).items():
            try:
                mtime = os.stat(path).st_mtime
            except OSError:
                continue
            if self.sent.get(path) == mtime:
                continue
            self.sent[path] = mtime
            try:
                out.append(read_dump(path).to_dict())
            except (BadInput, OSError):
                continue
        return out
