"""`gpuprep watch`: samples a running training job from outside it, I/O only. Per rank (the job's processes that
carry RANK/LOCAL_RANK, or that NVML runs on a GPU, or the process itself), each second: its CPU time and state and
its DataLoader workers' (its child processes, from /proc through psutil), its main thread's Python stack (py-spy
dump --nonblocking: the rank is never stopped), and its GPU through NVML (one session per sample). A signal that
cannot be read (py-spy missing, ptrace refused, NVML absent, another user's process) is dropped with one line that
says what it costs, never the watch. Everything read from the job is untrusted text."""
from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import time
from dataclasses import dataclass, field
from typing import Callable, Dict, List, NamedTuple, Optional

from .stacks import classify, signature, where


class Stack(NamedTuple):
    """One sample of a main thread: its class (stacks.CLASSES), the stack's fingerprint, the collective it is in
    and the job's own line it was called from."""
    kind: str
    sig: str
    collective: Optional[str]
    site: Optional[str]

PYSPY_TIMEOUT = 5.0
MAX_PYSPY_FAILURES = 5
_RANK_VARS = ("RANK", "LOCAL_RANK")
_SLURM_RANK_VARS = ("SLURM_PROCID",)        # srun's own rank, for a job that reads it itself


@dataclass
class RankProcess:
    pid: int
    rank: Optional[int]
    local_rank: Optional[int]
    visible: Optional[str] = None          # CUDA_VISIBLE_DEVICES as the rank got it
    stacks: List[str] = field(default_factory=list)
    cpu_pct: List[float] = field(default_factory=list)
    worker_cpu_pct: List[float] = field(default_factory=list)
    # per sample, the share of the workers running or waiting for a CPU (R), and of those waiting on a disk (D): a
    # process's state does not depend on how busy the host is, its CPU time does
    worker_running_pct: List[float] = field(default_factory=list)
    worker_disk_wait_pct: List[float] = field(default_factory=list)
    workers: int = 0
    cpu_seconds: List[float] = field(default_factory=list)     # the rank's cumulative CPU time at each sample
    # the main thread's voluntary context switches so far, at each sample: it blocked (a read, a sleep, a wait
    # that ended) that many times. A thread stopped, or blocked in one wait, adds none; one that spins adds none
    # either (a yield is no voluntary switch), so a rank waiting in NCCL does not look busy
    switches: List[int] = field(default_factory=list)
    # per sample: the process was stopped (state T: SIGSTOP, Ctrl-Z; t: a debugger holds it). It stands still
    # wherever it was, a collective included, and the others wait for it
    stopped: List[bool] = field(default_factory=list)
    gpu_samples: List[dict] = field(default_factory=list)
    gpu_uuid: Optional[str] = None
    allowed_cpus: Optional[List[int]] = None    # the CPUs the rank may run on (its affinity: a binding, a cpuset)
    ran_on: List[List[int]] = field(default_factory=list)   # per sample: the CPUs the rank and its workers were on
    # per sample: its node's CPU pressure (the kernel's PSI, "some avg10": the share of the last 10 s in which some
    # runnable task waited for a CPU), the same for every rank of the node; a node held by other work shows it
    cpu_pressure_pct: List[float] = field(default_factory=list)
    ended: bool = False
    ended_at: Optional[float] = None        # when the watch first saw it gone (seconds since the epoch)
    stack_sigs: List[Optional[str]] = field(default_factory=list)   # per stack sample: the stack's fingerprint
    sites: List[list] = field(default_factory=list)     # per stack sample: [collective, the job's own line]
    host: Optional[str] = None              # the node it runs on, where a watch spans nodes
    seen: int = 0                           # a merger's count of its samples (its series keep the latest only)


ENVIRON_DENIED = ("the job's environment may not be read (another user's job, or no SYS_PTRACE): ranks are found "
                  "from NVML's process list, without their RANK and LOCAL_RANK")


def _environ(proc, note: Optional[Callable[[str], None]] = None) -> Dict[str, str]:
    import psutil
    try:
        return proc.environ()
    except psutil.AccessDenied:
        if note:
            note(ENVIRON_DENIED)
        return {}
    except (psutil.NoSuchProcess, psutil.ZombieProcess, OSError):
        return {}


def _int(text: Optional[str]) -> Optional[int]:
    return int(text) if text is not None and text.isdigit() else None


def discover(root_pid: Optional[int], gpu_pids: Optional[set] = None, note: Optional[Callable[[str], None]] = None,
             family: Optional[list] = None) -> List[RankProcess]:
    """The job's ranks under (or at) `root_pid`, or among `family` (the processes of a job on this node): those
    with RANK/LOCAL_RANK in their environment, else Slurm's SLURM_PROCID, else those running on a GPU, else the
    root itself. A rank's descendants are its workers, never ranks of their own."""
    import psutil
    if family is None:
        root = psutil.Process(root_pid)
        family = [root] + root.children(recursive=True)
    tagged = [(p, _environ(p, note)) for p in family]
    ranks = []
    for names in (_RANK_VARS, _SLURM_RANK_VARS):
        ranks = [(p, env) for p, env in tagged if any(v in env for v in names)]
        if ranks:       # a DataLoader worker inherits RANK: a rank is one whose parent is no rank
            pids = {p.pid for p, _ in ranks}
            ranks = [(p, env) for p, env in ranks if _parent(p) not in pids]
            break
    if not ranks and gpu_pids:
        ranks = [(p, env) for p, env in tagged if p.pid in gpu_pids]
    if not ranks and root_pid is not None:
        ranks = [(family[0], tagged[0][1])]
    found = [RankProcess(p.pid, _int(env.get("RANK", env.get("SLURM_PROCID"))),
                         _int(env.get("LOCAL_RANK", env.get("SLURM_LOCALID"))), env.get("CUDA_VISIBLE_DEVICES"))
             for p, env in ranks]
    return sorted(found, key=lambda r: (r.rank if r.rank is not None else 1 << 30, r.pid))


def _parent(proc) -> Optional[int]:
    try:
        return proc.ppid()
    except Exception:      # noqa: BLE001 (gone)
        return None


class StackSampler:
    """py-spy dump --nonblocking of one process's main thread; None (and one note) when py-spy cannot."""

    def __init__(self, note: Callable[[str], None]):
        import sys
        beside = os.path.join(os.path.dirname(sys.executable), "py-spy")     # installed in gpuprep's own venv
        self.pyspy = shutil.which("py-spy") or (beside if os.access(beside, os.X_OK) else None)
        self.note = note
        self.broken = False
        self.failures = 0
        if self.pyspy is None:
            note("py-spy is not found (it comes with gpuprep: reinstall it, or pip install py-spy): no stacks; the "
                 "data/sync/collective verdicts rest on GPU utilisation and CPU time alone")

    def sample(self, pid: int) -> Optional["Stack"]:
        """Where `pid`'s main thread is now, or None (no py-spy, a failed dump, the process gone)."""
        if self.pyspy is None or self.broken:
            return None
        try:
            done = subprocess.run([self.pyspy, "dump", "--pid", str(pid), "--nonblocking", "--json"],
                                  capture_output=True, text=True, timeout=PYSPY_TIMEOUT)
        except (OSError, subprocess.TimeoutExpired) as exc:
            return self._lost(f"py-spy did not answer ({exc})")
        if done.returncode != 0:
            return self._failed(pid, done.stderr or done.stdout)
        self.failures = 0
        try:
            threads = json.loads(done.stdout)
        except ValueError:
            return None
        main = next((t for t in threads if t.get("os_thread_id") == pid), threads[0] if threads else None)
        if not isinstance(main, dict):
            return None
        raw = [f for f in main.get("frames") or [] if isinstance(f, dict)]
        frames = [(str(f.get("name", "")), str(f.get("filename", ""))) for f in raw]
        lines = [f.get("line") if isinstance(f.get("line"), int) else None for f in raw]
        collective, site = where(frames, lines)
        return Stack(classify(frames, _source_line, [n for n in lines if n]), signature(frames, lines),
                     collective, site)

    def _failed(self, pid: int, text: str) -> None:
        if not os.path.exists(f"/proc/{pid}"):
            return None
        if re.search(r"ermission denied|not permitted|EPERM|ptrace", text):
            return self._lost("py-spy may not read the job (ptrace restricted, another user's job, or a container "
                              "without SYS_PTRACE)")
        # a process in the middle of an import or of starting up can fail one dump: a few in a row cannot
        self.failures += 1
        if self.failures >= MAX_PYSPY_FAILURES:
            first = next((line for line in text.splitlines() if line.strip()), "")
            return self._lost(f"py-spy failed {self.failures} times in a row ({first.strip()[:100]})")
        return None

    def _lost(self, why: str) -> None:
        self.broken = True
        self.note(why + ": stacks dropped for the rest of the watch")
        return None


def _source_line(path: str, line: Optional[int]) -> Optional[str]:
    """One line of the job's source (to see a .item() no frame names); None when unreadable."""
    if not line or not path.endswith(".py"):
        return None
    try:
        with open(path, encoding="utf-8", errors="replace") as fh:
            for number, text in enumerate(fh, 1):
                if number == line:
                    return text[:400]
                if number > line:
                    break
    except OSError:
        return None
    return None


STOPPED_STATES = ("stopped", "tracing-stop")     # psutil's words for T and t


PSI_CPU = "/proc/pressure/cpu"


def cpu_pressure(path: str = PSI_CPU) -> Optional[float]:
    """The node's CPU pressure now: "some avg10" of the kernel's pressure stall information (Linux 4.20+,
    Documentation/accounting/psi.rst), in %. None where the kernel keeps none (built without PSI, or psi=0: the
    file is missing or refuses to be read)."""
    try:
        with open(path, "rb") as fh:
            text = fh.read(4096).decode("ascii", "replace")
    except OSError:
        return None
    match = _PSI_SOME.search(text)
    value = float(match.group(1)) if match else None
    return value if value is not None and value <= 100 else None


_PSI_SOME = re.compile(r"^some avg10=(\d{1,3}\.\d\d) ", re.M)


def _state(proc) -> Optional[str]:
    """psutil's word for the process's state now (running, sleeping, disk-sleep, ...); None when it is gone."""
    try:
        return proc.status()
    except Exception:      # noqa: BLE001 (gone, or not ours)
        return None


def _cpu_times(proc) -> Optional[float]:
    try:
        times = proc.cpu_times()
        return times.user + times.system
    except Exception:      # noqa: BLE001 (gone, or not ours)
        return None


class Watcher:
    """Samples the ranks every `interval` seconds until `done()` says stop; `notes` are the one-line statements of
    signals that could not be read."""

    def __init__(self, root_pid: Optional[int], interval: float = 1.0, gpu_sample=None,
                 family: Optional[Callable[[], list]] = None):
        """`family()`, where given, lists the processes to find ranks among (a Slurm job's on this node) in place
        of `root_pid` and its descendants."""
        from ..probe.nvml import job_sample
        self.root_pid, self.interval, self.family = root_pid, interval, family
        self.gpu_sample = gpu_sample or job_sample
        self.notes: List[str] = []
        self.stacks = StackSampler(self._note)
        self.ranks: List[RankProcess] = []
        self.samples = 0
        self.started = time.monotonic()
        self._last: Dict[int, tuple] = {}
        self._nvml_said = False

    def _note(self, line: str) -> None:
        if line not in self.notes:
            self.notes.append(line)

    def step(self) -> None:
        import psutil
        gpus = self.gpu_sample()
        if gpus is None and not self._nvml_said:
            self._nvml_said = True
            self._note("NVML is not available here: no GPU samples (utilisation, clocks, throttling, memory)")
        gpu_pids = {pid for g in gpus or [] for pid in g.get("pids") or []}
        self._rediscover(gpu_pids)
        now = time.monotonic()
        pressure = cpu_pressure()
        for rank in self.ranks:
            try:
                proc = psutil.Process(rank.pid)
                if proc.status() == psutil.STATUS_ZOMBIE:
                    raise psutil.NoSuchProcess(rank.pid)
                workers = proc.children(recursive=True)
            except psutil.NoSuchProcess:
                _end(rank)
                continue
            self._cpu(rank, proc, workers, now)
            self._placement(rank, proc, workers)
            if pressure is not None:
                rank.cpu_pressure_pct.append(pressure)
            stack = self.stacks.sample(rank.pid)
            if stack:
                rank.stacks.append(stack.kind)
                rank.stack_sigs.append(stack.sig)
                rank.sites.append([stack.collective, stack.site])
            reading = self._gpu_of(rank, gpus or [])
            if reading:
                rank.gpu_uuid = rank.gpu_uuid or reading.get("uuid")
                rank.gpu_samples.append(reading)
        self.samples += 1

    def _rediscover(self, gpu_pids: set) -> None:
        """The ranks, found again at every sample (torchrun starts them after its agent): known ranks keep their
        samples; a rank that disappears stays, marked ended; the agent found alone first is replaced by its ranks."""
        import psutil
        try:
            found = discover(self.root_pid, gpu_pids, self._note, self.family() if self.family else None)
        except psutil.NoSuchProcess:
            return
        known = {r.pid: r for r in self.ranks}
        fresh = [known.get(r.pid, r) for r in found]
        if self.ranks and [r.pid for r in found] == [self.root_pid] and len(self.ranks) > 1:
            return       # the ranks are gone and only the agent is left: keep what was seen
        ended = [r for r in self.ranks if r.pid not in {f.pid for f in fresh} and r.pid != self.root_pid]
        for r in ended:
            _end(r)
        self.ranks = sorted(fresh + ended, key=lambda r: (r.rank if r.rank is not None else 1 << 30, r.pid))

    def _cpu(self, rank: RankProcess, proc, workers, now: float) -> None:
        own = _cpu_times(proc)
        theirs = sum(t for t in (_cpu_times(w) for w in workers) if t is not None)
        try:
            rank.switches.append(proc.num_ctx_switches().voluntary)
        except Exception:      # noqa: BLE001 (gone, or not ours)
            pass
        state = _state(proc)
        if state is not None:
            rank.stopped.append(state in STOPPED_STATES)
        last = self._last.get(rank.pid)
        if own is not None:
            rank.cpu_seconds.append(own)
        if last and own is not None:
            elapsed = max(now - last[0], 1e-6)
            rank.cpu_pct.append(round(100 * (own - last[1]) / elapsed, 1))
            if workers:
                rank.worker_cpu_pct.append(round(100 * max(0.0, theirs - last[2]) / elapsed / len(workers), 1))
        rank.workers = max(rank.workers, len(workers))
        self._last[rank.pid] = (now, own or 0.0, theirs)
        states = [_state(w) for w in workers]
        states = [state for state in states if state is not None]
        if states:
            rank.worker_running_pct.append(round(100 * states.count("running") / len(states), 1))
            rank.worker_disk_wait_pct.append(round(100 * states.count("disk-sleep") / len(states), 1))

    @staticmethod
    def _placement(rank: RankProcess, proc, workers) -> None:
        """Where the rank and its workers run now (the CPU each last ran on), and where the rank may run."""
        import psutil
        if rank.allowed_cpus is None:
            try:
                rank.allowed_cpus = sorted(proc.cpu_affinity())
            except (psutil.Error, OSError, AttributeError):
                pass
        on = []
        for p in [proc] + list(workers):
            try:
                on.append(p.cpu_num())
            except (psutil.Error, OSError, AttributeError):
                continue
        if on:
            rank.ran_on.append(sorted(set(on)))

    @staticmethod
    def _gpu_of(rank: RankProcess, gpus: List[dict]) -> Optional[dict]:
        """The GPU this rank runs on: NVML's process list, else its LOCAL_RANK's GPU."""
        for reading in gpus:
            if rank.pid in (reading.get("pids") or []):
                return reading
        if rank.local_rank is not None and rank.local_rank < len(gpus) and not rank.visible:
            return gpus[rank.local_rank]
        return None

    def run(self, duration: Optional[float], finished: Callable[[], bool],
            on_sample: Optional[Callable[["Watcher"], Optional[bool]]] = None) -> None:
        """Sample until `finished()`, `duration` s, every rank ended, or `on_sample(self)` returns True."""
        deadline = None if duration is None else self.started + duration
        while not finished() and (deadline is None or time.monotonic() < deadline):
            tick = time.monotonic()
            self.step()
            if on_sample and on_sample(self):
                break
            if self.ranks and all(r.ended for r in self.ranks):
                break
            self._until(tick + self.interval)

    def _until(self, when: float) -> None:
        """Sleep until `when`, looking every LIVENESS_POLL s for a rank that ended: the time a rank was gone is
        then known to that, and so is which rank of a job went first."""
        while True:
            left = when - time.monotonic()
            if left <= 0:
                return
            time.sleep(min(left, LIVENESS_POLL))
            for rank in self.ranks:
                if not rank.ended and process_gone(rank.pid):
                    _end(rank)


LIVENESS_POLL = 0.05


def _end(rank: RankProcess) -> None:
    if not rank.ended:
        rank.ended, rank.ended_at = True, round(time.time(), 3)


def process_gone(pid: int) -> bool:
    """The process is gone, or a zombie its parent has not reaped: /proc alone, cheap enough to ask 20 times a
    second."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as fh:
            return fh.read().rsplit(b")", 1)[-1].split()[0] in (b"Z", b"X")
    except (OSError, IndexError):
        return True
