"""gpuprep as Slurm's HealthCheckProgram, Prolog and Epilog: judge this node, drain it with gpuprep's reason when
it fails, resume it when it is healthy again (optionally only after a passing burn-in). Standard library only:
the node probe's zipapp runs it on nodes where nothing is installed.

It never touches a drain that is not its own: an admin's, NHC's, a failed prolog's reason stays. The decision is
pure (decide); the I/O is scontrol, the journal (syslog), and a small per-job file for the epilog's baseline."""
from __future__ import annotations

import contextlib
import json
import os
import re
import signal
import socket
import stat
import subprocess
import time
from dataclasses import dataclass, field
from typing import Callable, List, Optional, Sequence

from . import adapters
from .errors import BadInput, GpuprepError
from .rules import Finding

SCONTROL_TIMEOUT = 20       # seconds: slurmctld answers in milliseconds; a hung one must not hang the hook
BASELINE_DIR = "/run/gpuprep/slurm"     # the prolog's record of each job's start, read by its epilog
HOOKS = ("healthcheck", "prolog", "epilog")


@dataclass
class NodeState:
    """What `scontrol show node` says of the node: its state flags (IDLE, ALLOCATED, DRAIN, DOWN, ...) and the
    reason an earlier drain or down gave, without the '[user@time]' Slurm appends; that time as `reason_at`."""
    name: str
    flags: List[str] = field(default_factory=list)
    reason: str = ""
    reason_at: Optional[float] = None

    @property
    def drained(self) -> bool:
        return any(f in ("DRAIN", "DRAINED", "DRAINING", "DOWN", "FAIL") for f in self.flags)

    @property
    def ours(self) -> bool:
        return adapters.is_own_reason(self.reason)


def parse_node(text: str, name: str) -> NodeState:
    state = re.search(r"(?:^|\s)State=(\S+)", text)
    if state is None:
        raise GpuprepError(f"scontrol show node {name}: no State= in its answer")
    reason = re.search(r"^\s*Reason=(.*?)(?:\s+\[[^\]]*@([^\]]*)\])?\s*$", text, re.M)
    return NodeState(name, [f.rstrip("*~#!%$@^-") for f in state.group(1).split("+")],
                     reason.group(1) if reason else "", _local_time(reason.group(2)) if reason else None)


def _local_time(text: Optional[str]) -> Optional[float]:
    """slurmctld's '2026-11-25T02:40:01' (its local time) as a Unix time; None when absent or unreadable."""
    import datetime as dt
    try:
        return dt.datetime.fromisoformat(text).timestamp() if text else None
    except ValueError:
        return None


@dataclass
class Action:
    kind: str           # drain | resume | keep | none
    why: str
    reason: str = ""    # the drain reason, for a drain


def decide(node: NodeState, found: Sequence[Finding], resume_blocked: Optional[str] = None,
           facts_at: Optional[float] = None) -> Action:
    """What to do with the node. `found`: the problems to act on; `resume_blocked`: why a node gpuprep drained may
    not return yet although it is healthy (no passing burn-in recorded), or None; `facts_at`: when the facts were
    gathered (a drain stamped at or after that second came from newer facts than these: never undone by them)."""
    if found:
        reason = adapters.slurm_reason(found)
        if not node.drained:
            return Action("drain", "failing", reason)
        if not node.ours:
            return Action("keep", f"failing, and already drained by someone else ({node.reason or 'no reason'})")
        if node.reason != reason:
            return Action("drain", "failing, for another reason now", reason)
        return Action("keep", "failing, drained by gpuprep already")
    if node.drained and node.ours:
        if facts_at is not None and node.reason_at is not None and node.reason_at >= int(facts_at):
            return Action("keep", "drained after these facts were gathered: the next run judges newer ones")
        if resume_blocked:
            return Action("keep", f"healthy again, but {resume_blocked}")
        return Action("resume", "healthy again")
    if node.drained:
        return Action("keep", f"healthy; drained by someone else ({node.reason or 'no reason'}), left as it is")
    return Action("none", "healthy")


REPORT_LIMIT = 64 << 20


def read_regular(path: str, limit: int) -> bytes:
    """A regular file's first `limit` bytes. A FIFO, device or symbolic link is refused before it is opened for
    reading in a way that could block (O_NONBLOCK, O_NOFOLLOW): a planted FIFO must not hang a hook."""
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_NOFOLLOW", 0))
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise OSError(0, "not a regular file (a FIFO, device or link)")
        with os.fdopen(fd, "rb", closefd=False) as fh:
            return fh.read(limit)
    finally:
        os.close(fd)


@dataclass
class Gate:
    """What a passing burn-in must show to let a node gpuprep drained return: a report that passed, by the
    schema, after the drain, on this node (its host name among the ranks', and its GPUs among the ranks' GPUs)."""
    path: Optional[str]
    within_seconds: Optional[float] = None
    host: str = ""
    gpus: Sequence[str] = ()      # this node's GPU UUIDs (and bus ids), when known


def burnin_gate(gate: Gate, now: float, drained_at: Optional[float] = None) -> Optional[str]:
    """None when a drained node may return: no burn-in asked for, or the report passes every test of Gate;
    otherwise every reason why not, in one line."""
    if not gate.path:
        return None
    path = gate.path
    try:
        document = json.loads(read_regular(path, REPORT_LIMIT))
    except (OSError, ValueError, RecursionError) as exc:
        return f"no readable burn-in report at {path} ({str(getattr(exc, 'strerror', None) or exc)[:80]})"
    if not isinstance(document, dict) or not str(document.get("schema", "")).startswith("gpuprep.burnin/"):
        return f"{path} is not a gpuprep burn-in report"
    problems = [p for p in (_verdict_problem(document), _report_ranks_problem(document, gate),
                            _date_problem(document, gate, now, drained_at)) if p]
    return f"the burn-in in {path}: " + "; ".join(problems) if problems else None


def _verdict_problem(document: dict) -> Optional[str]:
    verdict = document.get("verdict")
    return None if verdict == "pass" else f"did not pass (verdict {str(verdict)[:20]!r})"


def _date_problem(document: dict, gate: Gate, now: float, drained_at: Optional[float]) -> Optional[str]:
    stamp = _timestamp(document.get("generated_at"))
    age = now - stamp
    if age < -300:
        return f"is dated {-age / 86400:.1f} day(s) ahead of this node's clock"
    if gate.within_seconds is not None and not age <= gate.within_seconds:
        return f"is {age / 3600:.1f} h old (at most {gate.within_seconds / 3600:.1f} h)"
    if drained_at is not None and stamp < drained_at:
        return "ran before the node was drained"
    return None


def _report_ranks_problem(document: dict, gate: Gate) -> Optional[str]:
    from .burnin.report_schema import checked_ranks
    try:
        ranks = checked_ranks(document)
    except ValueError as exc:
        return f"is malformed ({str(exc)[:80]})"
    if not ranks:
        return "has no ranks"
    problems = []
    short = gate.host.split(".")[0]
    hosts = {str(r.get("host") or "").split(".")[0] for r in ranks}
    if short and short not in hosts:
        problems.append(f"ran on {', '.join(sorted(hosts))[:60]}, not on this node ({short})")
    seen = {str(r.get(k)) for r in ranks for k in ("gpu_uuid", "pci_bus_id") if r.get(k)}
    missing = [g for g in gate.gpus if g not in seen]
    if gate.gpus and seen and len(missing) == len(gate.gpus):
        problems.append("did not run on this node's GPUs")
    elif gate.gpus and seen and missing:
        problems.append(f"did not cover every GPU of this node ({len(missing)} missing)")
    return "; ".join(problems) or None


# --drain-slow-gpu: a GPU the burn-in named slow against its peers (burnin.slow-gpu, a warning in the report) drains
# its node only when the admin asks for it; the reason names the GPU. Every field is the report's: checked, never
# copied as words.
_BUS_ID = re.compile(r"[0-9A-Fa-f]{4,8}:[0-9A-Fa-f]{2}:[0-9A-Fa-f]{2}\.[0-7]")
_FIGURES = {"compute step": "ms", "peak training power": "W", "lowest SM clock": "MHz"}


def slow_gpus(path: str, gate: Gate, now: float):
    """(problems, why not): the GPUs of this node the burn-in report at `path` names slow against their peers, as
    failing findings; none, with the reason, when the report is not this node's usable one."""
    try:
        document = json.loads(read_regular(path, REPORT_LIMIT))
    except (OSError, ValueError, RecursionError) as exc:
        return [], f"no readable burn-in report at {path} ({str(getattr(exc, 'strerror', None) or exc)[:80]})"
    if not isinstance(document, dict) or not str(document.get("schema", "")).startswith("gpuprep.burnin/"):
        return [], f"{path} is not a gpuprep burn-in report"
    problems = [p for p in (_report_ranks_problem(document, gate), _date_problem(document, gate, now, None)) if p]
    if problems:
        return [], f"the burn-in in {path}: " + "; ".join(problems)
    short = gate.host.split(".")[0]
    found = [_slow_gpu(f.get("evidence"), path) for f in document.get("findings") or []
             if isinstance(f, dict) and f.get("id") == "burnin.slow-gpu" and f.get("severity") == "warn"]
    return [f for f in found if f is not None and str(f.evidence["host"]).split(".")[0] == short], None


def _slow_gpu(evidence, path: str) -> Optional[Finding]:
    if not isinstance(evidence, dict) or evidence.get("figure") not in _FIGURES:
        return None
    bus, host = str(evidence.get("pci_bus_id") or ""), evidence.get("host")
    numbers = [evidence.get(k) for k in ("value", "peers_median")]
    if not _BUS_ID.fullmatch(bus) or not isinstance(host, str) or \
            not all(isinstance(n, (int, float)) and abs(n) < 1e12 for n in numbers):
        return None
    unit, model = _FIGURES[evidence["figure"]], adapters._printable(str(evidence.get("model") or "GPU"))[:60]
    return Finding("burnin.slow-gpu", "fail", f"GPU {bus}", f"GPU {bus} ({model}) is slow against its peers: "
                   f"{evidence['figure']} {numbers[0]:.1f} {unit}, the peers' median {numbers[1]:.1f} {unit}",
                   {"host": host, "pci_bus_id": bus, "figure": evidence["figure"], "value": numbers[0],
                    "peers_median": numbers[1], "report": path},
                   "Take the node out and compare the GPU with its neighbours (`gpuprep check`: clocks, throttle "
                   "reasons, power, PCIe link); swap it with a peer to tell the GPU from the slot",
                   "gpuprep burnin (peers of the same model), --drain-slow-gpu")


def parse_age(text: str) -> float:
    """Seconds from '90m', '24h', '7d' (or a plain number of seconds)."""
    from .errors import bad_argument
    match = re.fullmatch(r"([0-9]+(?:\.[0-9]+)?)([smhd]?)", text.strip())
    if not match:
        raise bad_argument("age", f"{text[:40]!r} is not a duration like 90m, 24h or 7d")
    return float(match.group(1)) * {"": 1, "s": 1, "m": 60, "h": 3600, "d": 86400}[match.group(2)]


def _timestamp(text) -> float:
    import datetime as dt
    try:
        return dt.datetime.fromisoformat(str(text)).timestamp()
    except ValueError:
        return float("-inf")       # unknown age: never fresh


def node_name(given: Optional[str] = None) -> str:
    """Slurm's name for this node: the one given, slurmd's (SLURMD_NODENAME, set for every hook), else the short
    host name (Slurm's default NodeHostname)."""
    name = given or os.environ.get("SLURMD_NODENAME") or socket.gethostname().split(".")[0]
    if not re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9._-]{0,62}", name):
        raise BadInput(f"node name {name[:70]!r}: not a Slurm node name")
    return name


def run_command(argv: Sequence[str], missing: str, refused=GpuprepError) -> str:
    """A Slurm client command's standard output; `refused` (an error class) with its last line when it says no, a
    GpuprepError when it is not there (`missing` says what that means) or does not answer."""
    try:
        done = subprocess.run(list(argv), capture_output=True, text=True, timeout=SCONTROL_TIMEOUT)
    except FileNotFoundError:
        raise GpuprepError(f"{argv[0]} not found: {missing}") from None
    except subprocess.TimeoutExpired:
        raise GpuprepError(f"{' '.join(argv[:3])} did not answer in {SCONTROL_TIMEOUT} s") from None
    if done.returncode != 0:
        said = (done.stderr or done.stdout).strip().splitlines()
        raise refused(f"{' '.join(argv[:4])}: {said[-1][:200] if said else done.returncode}")
    return done.stdout


class Scontrol:
    """The two things gpuprep asks of slurmctld: a node's state, and an update of it. Argument lists only."""

    def __init__(self, program: str = "scontrol"):
        self.program = program

    def _run(self, *args: str) -> str:
        return run_command([self.program, *args], missing="this is not a Slurm node (or give --scontrol)")

    def node(self, name: str) -> NodeState:
        return parse_node(self._run("show", "node", name), name)

    def drain(self, name: str, reason: str) -> None:
        self._run("update", f"NodeName={name}", "State=DRAIN", f"Reason={reason}")

    def resume(self, name: str) -> None:
        self._run("update", f"NodeName={name}", "State=RESUME")


def journal(lines: Sequence[str]) -> None:
    """Each line to syslog (the journal), as gpuprep; nothing when the host has no syslog socket."""
    try:
        import syslog
    except ImportError:
        return
    from .report.sanitize import text_safe
    syslog.openlog("gpuprep", 0, syslog.LOG_DAEMON)
    for line in lines:      # words from a node or a report: one journal line each, control characters escaped
        syslog.syslog(syslog.LOG_WARNING, text_safe(line))


@dataclass
class HookResult:
    node: str
    action: Action
    problems: List[Finding]


def act(name: str, found: List[Finding], scontrol: Scontrol, gate: Optional[Gate] = None,
        log: Callable[[Sequence[str]], None] = journal, facts_at: Optional[float] = None) -> HookResult:
    """Read the node's state, decide, and carry it out; every problem and the action go to the journal. The burn-in
    gate is asked only of a healthy node gpuprep drained, against the time of that drain."""
    node = scontrol.node(name)
    blocked = None
    if gate is not None and not found and node.drained and node.ours:
        blocked = burnin_gate(gate, time.time(), node.reason_at)
    action = decide(node, found, blocked, facts_at)
    if action.kind == "drain":
        scontrol.drain(name, action.reason)
    elif action.kind == "resume":
        scontrol.resume(name)
    log([f"slurm node {name}: {action.kind}: {action.why}"] + adapters.log_lines(found))
    return HookResult(name, action, list(found))


def baseline_path(job_id: str, directory: str = BASELINE_DIR) -> str:
    if not re.fullmatch(r"[0-9]{1,12}(_[0-9]{1,12})?", job_id or ""):
        raise BadInput(f"SLURM_JOB_ID={str(job_id)[:40]!r}: not a Slurm job id")
    return os.path.join(directory, f"job-{job_id}.json")


def state_directory(directory: str = BASELINE_DIR) -> str:
    """gpuprep's own directory for the hooks (baselines, the lock): created 0700, and refused when it is a
    symbolic link or not a directory (the prolog would write, and the epilog delete, wherever it points)."""
    try:
        os.makedirs(os.path.dirname(os.path.abspath(directory)), exist_ok=True)
        try:
            os.mkdir(directory, 0o700)
        except FileExistsError:
            pass
        info = os.lstat(directory)
    except OSError as exc:
        raise GpuprepError(f"state directory {directory}: {exc.strerror or exc}") from None
    if stat.S_ISLNK(info.st_mode) or not stat.S_ISDIR(info.st_mode):
        raise GpuprepError(f"{directory}: not a plain directory (a symbolic link or a file): not used")
    return directory


def write_state(path: str, text: str) -> None:
    """One of the hooks' own files, replaced whole. Never written through: a FIFO or device planted where it goes
    would block the hook until its budget ran out (output.write_atomic writes through to those, for -o /dev/stdout)."""
    from .output import write_atomic
    try:
        if os.path.lexists(path) and not stat.S_ISREG(os.lstat(path).st_mode):
            raise OSError(0, "not a regular file (a FIFO, device or link): not replaced")
        write_atomic(path, text, option="state file")
    except OSError as exc:      # a full or read-only disk
        raise GpuprepError(f"{path}: {exc.strerror or exc}") from None


def record_baseline(job_id: str, xid_count: Optional[int], directory: str = BASELINE_DIR) -> None:
    """The prolog's note of how many Xid/SXid lines the kernel log held when the job started (without it, the
    epilog judges every Xid line)."""
    write_state(baseline_path(job_id, state_directory(directory)), json.dumps({"xids": xid_count, "at": time.time()}) + "\n")


@dataclass
class JobStart:
    """What the prolog noted when the job started: the kernel log's Xid lines then, and the time."""
    xids: Optional[int] = None
    at: Optional[float] = None


def read_baseline(job_id: str, directory: str = BASELINE_DIR) -> JobStart:
    """The job's start as the prolog noted it (then the file is removed); unknowns where it left none."""
    path = baseline_path(job_id, state_directory(directory))
    try:
        data = json.loads(read_regular(path, 1 << 16))
        os.remove(path)
    except (OSError, ValueError, RecursionError):
        return JobStart()
    data = data if isinstance(data, dict) else {}
    count, at = data.get("xids"), data.get("at")
    return JobStart(count if isinstance(count, int) and not isinstance(count, bool) and count >= 0 else None,
                    float(at) if isinstance(at, (int, float)) and not isinstance(at, bool) and 0 < at < 1e11 else None)


class HookLock:
    """One lock per node (flock on a file in gpuprep's state directory) held from reading the facts to acting on
    them: slurmd starts a health check while the last still runs, and a prolog, an epilog and health checks may
    overlap; without it a check with older facts could resume a node the epilog had just drained."""

    def __init__(self, directory: str = BASELINE_DIR):
        self.path = os.path.join(state_directory(directory), "hook.lock")
        self.fd: Optional[int] = None

    def acquire(self, wait_seconds: float) -> bool:
        import fcntl
        self.fd = os.open(self.path, os.O_RDWR | os.O_CREAT | getattr(os, "O_NOFOLLOW", 0), 0o600)
        deadline = time.monotonic() + max(0.0, wait_seconds)
        while True:
            try:
                fcntl.flock(self.fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                return True
            except BlockingIOError:
                if time.monotonic() >= deadline:
                    return False
                time.sleep(0.05)

    def release(self) -> None:
        if self.fd is not None:
            os.close(self.fd)       # closing the descriptor releases the flock
            self.fd = None

    @contextlib.contextmanager
    def held(self, wait_seconds: float):
        """The lock for the block, or GpuprepError when another hook holds it past `wait_seconds`."""
        if not self.acquire(wait_seconds):
            self.release()
            raise GpuprepError("another gpuprep hook holds this node's lock (it judges and acts now)")
        try:
            yield self
        finally:
            self.release()


def since_job_start(hook: str, job: str, facts, directory: str = BASELINE_DIR) -> JobStart:
    """The node's facts for a hook: the prolog notes how many Xid lines the kernel log holds, the epilog keeps only
    the lines that came after (a rotated log: all of them). Returns the job's start as the prolog noted it (the
    epilog's; unknowns for the other hooks)."""
    if hook == "prolog" and job:
        record_baseline(job, len(facts.xids) if facts.xids is not None else None, directory)
    if hook != "epilog" or not job:
        return JobStart()
    start = read_baseline(job, directory)
    if start.xids is not None and facts.xids is not None and len(facts.xids) >= start.xids:
        facts.xids = facts.xids[start.xids:]
    return start


def allocated_gpus(environ) -> Optional[List[int]]:
    """The GPU indexes Slurm gave the job (SLURM_JOB_GPUS in the prolog's and epilog's environment); None when it
    does not say."""
    text = environ.get("SLURM_JOB_GPUS") or ""
    if not re.fullmatch(r"[0-9]{1,4}(,[0-9]{1,4}){0,1023}", text):
        return None
    return [int(i) for i in text.split(",")]


def write_job_report(job: str, start: JobStart, directory: str, environ) -> str:
    """The epilog's job report (jobreport.py) from NVML's accounting and the job's `gpuprep watch` document, if one
    was left in `directory` (job-JOB.watch.json), written there as job-JOB.report.json; returns its headline."""
    from . import jobreport
    from .probe.nvml import accounting
    folder = state_directory(directory)
    watch_path = baseline_path(job, folder)[:-len(".json")] + ".watch.json"
    try:
        watch = json.loads(read_regular(watch_path, REPORT_LIMIT))
    except (OSError, ValueError, RecursionError):
        watch = None
    report = jobreport.job_report(job, start.at, time.time(), accounting(), allocated_gpus(environ), watch)
    path = watch_path[:-len(".watch.json")] + ".report.json"
    write_state(path, json.dumps(report, indent=2) + "\n")
    return f"{jobreport.headline(report)} ({path})"


def process_age() -> float:
    """Seconds since this process started (the interpreter's start counts against a hook's budget): /proc's
    start time in clock ticks since boot against the uptime; 0 where /proc cannot tell."""
    try:
        with open("/proc/self/stat") as fh:
            started = int(fh.read().rsplit(")", 1)[1].split()[19]) / os.sysconf("SC_CLK_TCK")
        with open("/proc/uptime") as fh:
            return max(0.0, float(fh.read().split()[0]) - started)
    except (OSError, ValueError, IndexError):
        return 0.0


class _OverBudget(BaseException):     # not an Exception: no "except Exception" in the probe may swallow it
    pass


@contextlib.contextmanager
def time_limit(seconds: float):
    """Stop judging after `seconds` (SIGALRM): a GpuprepError that changes nothing on the node."""
    def expired(signum, frame):
        raise _OverBudget()
    previous = signal.signal(signal.SIGALRM, expired)
    signal.setitimer(signal.ITIMER_REAL, max(0.001, seconds))
    try:
        yield
    except _OverBudget:
        raise GpuprepError(f"judging took longer than the budget of {seconds:g} s: the node was left as it was") from None
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)


def allocation(environ) -> Optional[tuple]:
    """(nodes, this node's rank, the first node's name) inside a Slurm allocation of several nodes (srun or sbatch:
    SLURM_NNODES, SLURM_NODEID, SLURM_JOB_NODELIST expanded by `scontrol show hostnames`); None outside one or on
    a single node."""
    if not environ.get("SLURM_JOB_ID") or not environ.get("SLURM_NNODES"):
        return None
    try:
        nodes, rank = int(environ["SLURM_NNODES"]), int(environ.get("SLURM_NODEID", "0"))
    except ValueError:
        raise BadInput(f"SLURM_NNODES={environ['SLURM_NNODES'][:20]!r} / SLURM_NODEID: not numbers") from None
    if nodes < 2:
        return None
    done = subprocess.run(["scontrol", "show", "hostnames", environ.get("SLURM_JOB_NODELIST", "")],
                          capture_output=True, text=True, timeout=SCONTROL_TIMEOUT)
    hosts = done.stdout.split()
    if done.returncode != 0 or len(hosts) != nodes or not 0 <= rank < nodes:
        raise BadInput(f"SLURM_JOB_NODELIST={environ.get('SLURM_JOB_NODELIST', '')[:60]!r} does not name "
                       f"{nodes} nodes (scontrol show hostnames: {(done.stderr or done.stdout).strip()[:80]})")
    return nodes, rank, hosts[0]
