"""`gpuprep watch --job JOBID`: the job across its nodes, with Slurm as the engine. One watcher a node is started
as a step of the job itself (`srun --overlap --jobid JOBID --ntasks-per-node=1`, as an admin attaches to a running
job): each finds the job's ranks on its node (the processes of the job's other steps) and writes JSON lines
(job/nodewatch.py). This side merges the lines and hands back WatchFacts. I/O only: the verdict is the
job rules'."""
from __future__ import annotations

import json
import os
import queue
import re
import signal
import subprocess
import sys
import threading
import time
from dataclasses import dataclass
from typing import Callable, Dict, List, Optional

from ..errors import BadInput, GpuprepError
from .facts import WatchFacts
from ..ansible.reducer import WATCH_MARK
from .stream import MAX_LINE, Merged

JOB_ID = re.compile(r"[0-9]{1,10}")
STOP_GRACE_SECONDS = 10


JUDGED_RANKS_PER_SECOND = 2000       # a verdict every interval up to 2,000 ranks; a larger job's every few seconds


def judge_every(ranks: int, interval: float) -> float:
    """Seconds between two verdicts of the merged facts: the merge reads every line as it comes, the judgement (all
    ranks at once) waits a little longer as a job grows, so that 1,000 nodes x 8 ranks take one core at most."""
    return max(interval, ranks / JUDGED_RANKS_PER_SECOND)


def stale_after(interval: float) -> float:
    """A node not heard from for this long has stopped answering (its watcher writes every interval)."""
    return max(10.0, 5 * interval)


@dataclass
class SlurmJob:
    id: str
    state: str
    nodes: List[str]


def _run(argv: List[str]) -> str:
    from ..slurm import run_command
    return run_command(argv, "watch --job needs Slurm's client commands on this host", refused=BadInput)


def job_info(job_id: str, scontrol: str = "scontrol") -> SlurmJob:
    """The job's state and its nodes, from `scontrol show job` (one line) and `scontrol show hostnames`."""
    if not JOB_ID.fullmatch(job_id or ""):
        raise BadInput(f"--job {str(job_id)[:40]!r}: a Slurm job id is a number")
    text = _run([scontrol, "show", "job", "--oneliner", job_id])
    state = re.search(r"(?:^|\s)JobState=(\S+)", text)
    nodelist = re.search(r"(?:^|\s)NodeList=(\S+)", text)
    if state is None:
        raise GpuprepError(f"scontrol show job {job_id}: no JobState= in its answer")
    nodes = []
    if nodelist and nodelist.group(1) != "(null)":
        nodes = _run([scontrol, "show", "hostnames", nodelist.group(1)]).split()
    return SlurmJob(job_id, state.group(1), nodes)


def watcher_argv(job: SlurmJob, interval: float, srun: str = "srun") -> List[str]:
    """One watcher on each of the job's nodes, as a step that shares the job's CPUs (--overlap) and never kills
    the job's other steps. The watcher is this gpuprep, by the same path (installed alike on every node)."""
    n = str(len(job.nodes))
    return [srun, "--overlap", f"--jobid={job.id}", f"--nodes={n}", f"--ntasks={n}", "--ntasks-per-node=1",
            "--kill-on-bad-exit=0", "--quiet", "--label", sys.executable, "-m", "gpuprep", "watch", "--job-node", job.id,
            "--interval", f"{interval:g}"]


def watch_job_nodes(job_id: str, seconds: Optional[float], interval: float,
                    on_sample: Optional[Callable[[WatchFacts], bool]] = None, srun: str = "srun",
                    scontrol: str = "scontrol") -> WatchFacts:
    """Start the watchers, merge what they write until the job ends, `seconds` pass, Ctrl-C, or `on_sample(facts)`
    (called each interval with the facts so far) says it has seen enough; then stop them."""
    job = job_info(job_id, scontrol)
    if job.state != "RUNNING" or not job.nodes:
        raise BadInput(f"--job {job_id}: the job is {job.state.lower()}, not running: nothing to watch")
    watchers = subprocess.Popen(watcher_argv(job, interval, srun), stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE, text=True, errors="replace", process_group=0)
    lines: "queue.Queue[Optional[str]]" = queue.Queue(maxsize=100000)
    errors: List[str] = []
    threading.Thread(target=_pump, args=(watchers.stdout, lines), daemon=True).start()
    threading.Thread(target=_tail, args=(watchers.stderr, errors), daemon=True).start()
    merged, started = Merged(), time.monotonic()
    stopped, why = None, "interrupted"
    try:
        why = _merge(merged, lines, job, seconds, interval, on_sample, started)
    except KeyboardInterrupt:
        stopped = 2
    finally:
        _stop(watchers)
    # the ranks, the watchers or srun ended: Slurm ends the watchers' step with the job, so ask Slurm how the job is
    # (waiting for it to leave RUNNING); the watch stopped by itself: the job runs on, as it did at the start
    state = _state_at_end(job, scontrol) if why.endswith("ended") else _state_now(job, scontrol)
    ended = why == "ranks ended" or state not in (None, "RUNNING", "COMPLETING")
    facts = merged.facts(time.monotonic() - started, stale_after(interval), job_ended=ended, job_id=job.id)
    facts.signal = stopped
    facts.job_state = state
    if not merged.heard and why == "srun ended":
        raise GpuprepError(f"srun started no watcher in job {job.id}" +
                           (f": {errors[-1][:200]}" if errors else "") + " (watch --job runs as the job's user or root)")
    missing = sorted(set(job.nodes) - set(merged.heard))
    if missing:
        facts.notes.append(f"no watcher answered from {', '.join(missing[:8])}: its ranks are not judged" +
                           "".join(f"; srun: {line[:200]}" for line in errors[-3:]))
    return facts


def _merge(merged: Merged, lines, job: SlurmJob, seconds, interval, on_sample, started) -> str:
    """Feed the nodes' lines into `merged` until there is a reason to stop: which one."""
    deadline = None if seconds is None else started + seconds
    next_sample = started + interval
    while deadline is None or time.monotonic() < deadline:
        try:
            line = lines.get(timeout=max(0.05, min(interval, next_sample - time.monotonic())))
        except queue.Empty:
            line = ""
        if line is None:                       # srun ended: every watcher is gone
            return "srun ended"
        if line.strip():
            merged.feed(line.strip(), "srun")
        if time.monotonic() >= next_sample:
            next_sample = time.monotonic() + judge_every(len(merged.ranks), interval)
            if on_sample and on_sample(merged.facts(time.monotonic() - started, stale_after(interval), job_id=job.id)):
                return "seen enough"
        if job.nodes and all(h in merged.ended for h in job.nodes):
            return "ranks ended" if _job_ended(merged) else "watchers ended"
    return "time is up"


def _state_at_end(job: SlurmJob, scontrol: str) -> Optional[str]:
    """Slurm's word for the job once its ranks have ended: it leaves RUNNING/COMPLETING within seconds (the batch
    script returns); None when it does not say in time, or cannot be asked."""
    deadline = time.monotonic() + 15
    while True:
        try:
            state = job_info(job.id, scontrol).state
        except (BadInput, GpuprepError):
            return None
        if state not in ("RUNNING", "COMPLETING") or time.monotonic() > deadline:
            return state
        time.sleep(0.5)


def _state_now(job: SlurmJob, scontrol: str) -> Optional[str]:
    try:
        return job_info(job.id, scontrol).state
    except (BadInput, GpuprepError):
        return None


def drain_at_fault(findings, scontrol: str = "scontrol") -> list:
    """Drain each node the verdict found at fault (job.node-or-code: node), with the health check's reason
    format (so the health check resumes it once it passes); a finding says what was done or why not."""
    from .. import adapters
    from ..rules import Finding
    from ..slurm import Scontrol
    out = []
    for f in findings:
        host = f.evidence.get("host")
        if f.id != "job.node-or-code" or f.evidence.get("fault") != "node" or not host:
            continue
        reason = adapters.slurm_reason([f])
        try:
            Scontrol(scontrol).drain(host, reason)
        except (GpuprepError, BadInput) as exc:
            out.append(Finding("job.drained", "warn", host, f"{host} was not drained: {str(exc)[:200]}",
                               {"host": host}))
            continue
        out.append(Finding("job.drained", "info", host, f"{host} drained: {reason}", {"host": host, "reason": reason}))
    return out


def _job_ended(merged: Merged) -> bool:
    return bool(merged.ranks) and all(r.ended for r in merged.ranks.values())


# srun --label's mark before each piece of a task's output: the task's number, zero-padded to the widest
_LABEL = re.compile(r"([0-9]{1,7}): ")


class TaskLines:
    """srun --label's output back into each task's whole lines. slurmstepd sends a task's output in messages of at
    most 1024 bytes (SLURM_IO_MAX_MSG_LEN), so a longer line reaches srun in pieces, between other tasks' pieces
    (a node's check is such a line); with --label srun writes each piece on a line of its own behind the task's
    number. A watcher's line is one JSON object, and no proper prefix of an object is a whole object: a task's
    pieces are joined until they parse. A piece that starts a new object ends a joined line that never did."""

    def __init__(self, limit: int = MAX_LINE):
        self.limit = limit
        self.held: Dict[str, str] = {}

    def feed(self, raw: str) -> List[str]:
        """The whole lines this piece of srun's output completes (none while a line is still in pieces)."""
        raw = raw[:-1] if raw.endswith("\n") else raw
        label = _LABEL.match(raw)
        if label is None:
            return [raw]        # not a task's (srun's own words): the merger names what it is
        task, piece = label.group(1), raw[label.end():]
        out = []
        if task in self.held and piece.startswith(WATCH_MARK):
            out.append(self.held.pop(task))
        line = self.held.pop(task, "") + piece
        if _whole(line) or len(line) > self.limit:
            out.append(line)
        else:
            self.held[task] = line
        return out

    def rest(self) -> List[str]:
        """What is still in pieces once srun has ended: the merger drops each, with a note."""
        out, self.held = list(self.held.values()), {}
        return out


def _whole(line: str) -> bool:
    if not line.endswith("}"):
        return False
    try:
        json.loads(line)
    except (ValueError, RecursionError):
        return False
    return True


def _pump(stream, lines) -> None:
    tasks = TaskLines()
    for piece in stream:
        for line in tasks.feed(piece):
            lines.put(line)
    for line in tasks.rest():
        lines.put(line)
    lines.put(None)


def _tail(stream, kept: List[str]) -> None:
    for line in stream:
        if line.strip():
            kept.append(line.strip())
            del kept[:-20]


def _stop(watchers: subprocess.Popen) -> None:
    """srun passes SIGUSR1 on to the watchers (its step alone, never the job's own steps; a SIGTERM would make it
    kill them): each writes its last line and ends, then srun does. Killed only past the grace."""
    if watchers.poll() is None:
        try:
            watchers.send_signal(signal.SIGUSR1)
            watchers.wait(timeout=STOP_GRACE_SECONDS)
        except subprocess.TimeoutExpired:
            os.killpg(watchers.pid, signal.SIGKILL)
            watchers.wait()
        except ProcessLookupError:
            pass
