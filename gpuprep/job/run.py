"""Start or attach to the job, run the watcher until the job ends, the time is up or Ctrl-C, and hand back typed
facts. I/O only: the judgement is judge.py's."""
from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import tempfile
import time
from typing import Callable, List, Optional

from ..errors import BadInput
from .facts import WatchFacts, watch_rank

# what `watch -- CMD` adds to the job's environment, where the job has not set it: NCCL says which transport it
# uses (per rank, into files), and PyTorch's NCCL flight recorder keeps the last collectives for a hang
JOB_ENV = {"NCCL_DEBUG": "INFO", "NCCL_DEBUG_SUBSYS": "INIT,NET", "TORCH_NCCL_TRACE_BUFFER_SIZE": "2000"}


STOP_GRACE_SECONDS = 30      # a job told to stop (SIGTERM/SIGINT forwarded) gets this long before SIGKILL
PID_MAX = 4194304            # Linux's largest pid_max


class _Stopped(Exception):
    """watch itself was told to stop (SIGTERM, or SIGINT sent to it alone)."""

    def __init__(self, signum: int):
        super().__init__(signum)
        self.signum = signum


def watch_job(pid: Optional[int], command: Optional[List[str]], seconds: Optional[float], interval: float,
              on_sample: Optional[Callable] = None, job_stdout=None) -> WatchFacts:
    """`job_stdout`: where a started job's standard output goes (None: this process's own); `on_sample(facts)` is
    called after each sample with the facts so far, and stops the watch by returning True. A started job runs in a process group of its own: a SIGTERM or
    SIGINT to watch is forwarded to it once, it is waited for (STOP_GRACE_SECONDS, then killed), and the report is
    still written. Nothing is left in TMPDIR."""
    import shutil
    logs = tempfile.mkdtemp(prefix="gpuprep-watch-") if command is not None else None
    try:
        with _signals_stop_the_watch():
            return _watch(pid, command, seconds, interval, on_sample, job_stdout, logs)
    finally:
        if logs:
            shutil.rmtree(logs, ignore_errors=True)


def _watch(pid, command, seconds, interval, on_sample, job_stdout, logs) -> WatchFacts:
    from .watch import Watcher, process_gone
    job = _start(command, job_stdout, logs) if command is not None else None
    started, stopped, watcher, attached = time.monotonic(), None, None, None

    def finished() -> bool:
        if job is not None:
            return job.poll() is not None
        return attached is not None and process_gone(attached)
    # from the job's start on, a stop is the job's to hear: one that comes while the watcher is still being set up
    # (its imports take a while on a loaded host) is forwarded as any other, never left to orphan the job
    try:
        attached = job.pid if job is not None else _a_job(pid)
        watcher = Watcher(attached, interval)
        so_far = (lambda w: on_sample(_facts(w, time.monotonic() - started))) if on_sample else None
        watcher.run(seconds, finished, so_far)
    except (KeyboardInterrupt, _Stopped) as exc:
        stopped = getattr(exc, "signum", signal.SIGINT)        # report what was seen
    ranks = watcher.ranks if watcher is not None else []
    ended = finished() or bool(ranks) and all(r.ended for r in ranks)
    exit_code = _finish(job, stopped) if job is not None else None
    facts = _facts(watcher, time.monotonic() - started, exit_code, _transports(logs) if logs else [], ended)
    facts.signal = stopped
    facts.ras = _ras_now()
    if not ranks:
        facts.notes.append("watch was stopped before its first sample: nothing was watched" if watcher is None else
                           "the job ended before its first sample: nothing was watched")
    return facts


def _ras_now():
    """NCCL's RAS report of this node's NCCL processes (NCCL_RAS_ADDR, else localhost:28028), or None where nothing
    answers (no NCCL job, NCCL before 2.24, RAS off)."""
    from .ras import DEFAULT_ADDR, query
    try:
        return query(os.environ.get("NCCL_RAS_ADDR") or DEFAULT_ADDR, timeout=3)
    except (OSError, ValueError, BadInput):
        return None


def _start(command: List[str], job_stdout, logs: str) -> subprocess.Popen:
    env = dict(os.environ)
    for key, value in JOB_ENV.items():
        env.setdefault(key, value)
    env.setdefault("NCCL_DEBUG_FILE", os.path.join(logs, "nccl.%h.%p.log"))
    try:     # its own process group: a signal reaches it once, from watch, and never twice from the terminal
        return subprocess.Popen(command, env=env, stdin=subprocess.DEVNULL, stdout=job_stdout, process_group=0)
    except OSError as exc:
        raise BadInput(f"{command[0]}: {exc.strerror or exc}") from None


def _finish(job: subprocess.Popen, stopped: Optional[int]) -> int:
    """Our child runs to its end (past --duration too) and its exit code passes through; told to stop, watch tells
    the job's process group, waits for it within the grace, then kills it."""
    if stopped is not None and job.poll() is None:
        _signal_group(job.pid, stopped)
        grace = time.monotonic() + STOP_GRACE_SECONDS
        while job.poll() is None and time.monotonic() < grace:
            try:
                job.wait(timeout=max(0.0, grace - time.monotonic()))
            except subprocess.TimeoutExpired:
                break
            except (KeyboardInterrupt, _Stopped):       # told again within the grace: the grace goes on
                pass
        if job.poll() is None:
            _signal_group(job.pid, signal.SIGKILL)
    while True:
        try:
            return job.wait()
        except (KeyboardInterrupt, _Stopped) as exc:         # told again while waiting: the job is told again
            _signal_group(job.pid, getattr(exc, "signum", signal.SIGINT))


def _signal_group(pid: int, signum: int) -> None:
    try:
        os.killpg(pid, signum)
    except ProcessLookupError:
        pass


@contextlib.contextmanager
def _signals_stop_the_watch():
    """SIGTERM (and SIGINT) raise _Stopped in the main thread while watching; elsewhere, nothing changes."""
    import threading
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def stop(signum, frame):
        raise _Stopped(signum)
    before = {s: signal.signal(s, stop) for s in (signal.SIGTERM, signal.SIGINT)}
    try:
        yield
    finally:
        for s, handler in before.items():
            signal.signal(s, handler)


def _a_job(pid: int) -> int:
    """The process to watch, checked: it exists, is not init, and it or a child of it runs Python (a training job);
    one line naming what it is otherwise. A child that ends while it is looked at is no error of the PID's."""
    import psutil
    if not 0 < pid <= PID_MAX:
        raise BadInput(f"--pid {pid}: not a process id (1 to {PID_MAX})")
    if pid == 1:
        raise BadInput("--pid 1 is the system's first process (init), not a training job")
    try:
        proc = psutil.Process(pid)
        proc.name()
    except psutil.NoSuchProcess:
        raise BadInput(f"--pid {pid}: no process {pid} on this host") from None
    except psutil.AccessDenied:
        return pid          # another user's job: the watch says what it cannot read
    try:
        family = [proc] + proc.children(recursive=True)
    except psutil.Error:
        family = [proc]
    names = []
    for member in family[:256]:
        try:
            names.append((member.name() or "", " ".join(member.cmdline()[:1])))
        except psutil.Error:
            continue        # ended, or not ours to read
    if names and not any("python" in (name + " " + exe).lower() for name, exe in names):
        raise BadInput(f"--pid {pid} ({names[0][0][:40]}) runs no Python process, nor does any of its children: "
                       "not a training job to watch")
    return pid


def _facts(watcher, seconds: float, exit_code: Optional[int] = None, transports: Optional[List[str]] = None,
           ended: bool = False) -> WatchFacts:
    """What the watcher saw (None: stopped before it was set up, so nothing)."""
    if watcher is None:
        return WatchFacts([], seconds, 0, [], exit_code, transports or [], ended)
    return WatchFacts([watch_rank(r) for r in watcher.ranks], seconds, watcher.samples, list(watcher.notes),
                      exit_code, transports or [], ended)


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
