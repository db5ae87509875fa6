"""Start or attach to the job, run the watcher until the job ends, the time is up or Ctrl-C, and hand back typed
facts. I/O only: the judgement is judge.py's."""
from __future__ import annotations

import os
import subprocess
import tempfile
import time
from typing import Callable, List, Optional

from ..errors import BadInput
from .facts import WatchFacts, watch_rank

# what `watch -- CMD` adds to the job's environment, where the job has not set it: NCCL says which transport it
# uses (per rank, into files), and PyTorch's NCCL flight recorder keeps the last collectives for a hang
JOB_ENV = {"NCCL_DEBUG": "INFO", "NCCL_DEBUG_SUBSYS": "INIT,NET", "TORCH_NCCL_TRACE_BUFFER_SIZE": "2000"}


def watch_job(pid: Optional[int], command: Optional[List[str]], seconds: Optional[float], interval: float,
              on_sample: Optional[Callable] = None, job_stdout=None) -> WatchFacts:
    """`job_stdout`: where a started job's standard output goes (None: this process's own); `on_sample(facts)` is
    called after each sample with the facts so far."""
    import psutil
    from .watch import Watcher
    job = None
    logs = None
    if command is not None:
        logs = tempfile.mkdtemp(prefix="gpuprep-watch-")
        env = dict(os.environ)
        for key, value in JOB_ENV.items():
            env.setdefault(key, value)
        env.setdefault("NCCL_DEBUG_FILE", os.path.join(logs, "nccl.%h.%p.log"))
        try:
            job = subprocess.Popen(command, env=env, stdout=job_stdout)
        except OSError as exc:
            raise BadInput(f"{command[0]}: {exc.strerror or exc}") from None
        pid = job.pid
    elif not psutil.pid_exists(pid):
        raise BadInput(f"no process {pid} on this host")
    watcher = Watcher(pid, interval)
    started = time.monotonic()
    finished = (lambda: job.poll() is not None) if job else (lambda: _gone(pid))
    so_far = (lambda w: on_sample(_facts(w, time.monotonic() - started))) if on_sample else None
    try:
        watcher.run(seconds, finished, so_far)
    except KeyboardInterrupt:
        pass                 # Ctrl-C: the job (same process group) got it too; report what was seen
    ended = finished() or bool(watcher.ranks) and all(r.ended for r in watcher.ranks)
    exit_code = None
    if job is not None:          # our child runs to its end (past --duration too): its exit code passes through
        try:
            exit_code = job.wait()
        except KeyboardInterrupt:
            job.terminate()
            exit_code = job.wait()
    facts = _facts(watcher, time.monotonic() - started, exit_code, _transports(logs) if logs else [], ended)
    if not watcher.ranks:
        facts.notes.append("the job ended before its first sample: nothing was watched")
    return facts


def _facts(watcher, seconds: float, exit_code: Optional[int] = None, transports: Optional[List[str]] = None,
           ended: bool = False) -> WatchFacts:
    return WatchFacts([watch_rank(r) for r in watcher.ranks], seconds, watcher.samples, list(watcher.notes),
                      exit_code, transports or [], ended)


def _gone(pid: int) -> bool:
    """The process ended: no longer there, or a zombie its parent has not reaped yet."""
    import psutil
    try:
        return psutil.Process(pid).status() == psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return True


def _transports(directory: str) -> List[str]:
    """The transports NCCL said it used (IB, Socket, ...), from the job's own log files."""
    import re
    used = set()
    for name in sorted(os.listdir(directory))[:1024]:
        try:
            with open(os.path.join(directory, name), errors="replace") as fh:
                for line in fh.read(1 << 20).splitlines():
                    match = re.search(r"NET/(IB|Socket|OFI|Plugin)\b", line)
                    if match:
                        used.add(match.group(1))
        except OSError:
            continue
    return sorted(used)
