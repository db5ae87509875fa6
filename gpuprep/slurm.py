"""gpuprep as Slurm's HealthCheckProgram, Prolog and Epilog: judge this node, drain it with gpuprep's reason when
it fails, resume it when it is healthy again (optionally only after a passing burn-in). Standard library only:
the node probe's zipapp runs it on nodes where nothing is installed.

It never touches a drain that is not its own: an admin's, NHC's, a failed prolog's reason stays. The decision is
pure (decide); the I/O is scontrol, the journal (syslog), and a small per-job file for the epilog's baseline."""
from __future__ import annotations

import json
import os
import re
import socket
import subprocess
import time
from dataclasses import dataclass, field
from typing import Callable, List, Optional, Sequence

from . import adapters
from .errors import BadInput, GpuprepError
from .rules import Finding

SCONTROL_TIMEOUT = 20       # seconds: slurmctld answers in milliseconds; a hung one must not hang the hook
BASELINE_DIR = "/run/gpuprep/slurm"     # the prolog's record of each job's start, read by its epilog


@dataclass
class NodeState:
    """What `scontrol show node` says of the node: its state flags (IDLE, ALLOCATED, DRAIN, DOWN, ...) and the
    reason an earlier drain or down gave, without the '[user@time]' Slurm appends."""
    name: str
    flags: List[str] = field(default_factory=list)
    reason: str = ""

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
    reason = re.search(r"^\s*Reason=(.*?)(?:\s+\[[^\]]*@[^\]]*\])?\s*$", text, re.M)
    return NodeState(name, [f.rstrip("*~#!%$@^-") for f in state.group(1).split("+")],
                     reason.group(1) if reason else "")


@dataclass
class Action:
    kind: str           # drain | resume | keep | none
    why: str
    reason: str = ""    # the drain reason, for a drain


def decide(node: NodeState, found: Sequence[Finding], resume_blocked: Optional[str] = None) -> Action:
    """What to do with the node. `found`: the problems to act on; `resume_blocked`: why a node gpuprep drained may
    not return yet although it is healthy (no passing burn-in recorded), or None."""
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
        if resume_blocked:
            return Action("keep", f"healthy again, but {resume_blocked}")
        return Action("resume", "healthy again")
    if node.drained:
        return Action("keep", f"healthy; drained by someone else ({node.reason or 'no reason'}), left as it is")
    return Action("none", "healthy")


def burnin_gate(path: Optional[str], within_seconds: Optional[float], now: float) -> Optional[str]:
    """None when a drained node may return: no burn-in asked for, or the report at `path` passed within the
    window; otherwise why not."""
    if not path:
        return None
    try:
        with open(path, "rb") as fh:
            document = json.loads(fh.read(1 << 22))
    except (OSError, ValueError) as exc:
        return f"no readable burn-in report at {path} ({getattr(exc, 'strerror', None) or exc})"
    if not isinstance(document, dict) or not str(document.get("schema", "")).startswith("gpuprep.burnin/"):
        return f"{path} is not a gpuprep burn-in report"
    if document.get("verdict") != "pass":
        return f"the burn-in in {path} did not pass (verdict {str(document.get('verdict'))[:20]})"
    age = now - _timestamp(document.get("generated_at"))
    if within_seconds is not None and not 0 <= age <= within_seconds:
        return f"the passing burn-in in {path} is {age / 3600:.1f} h old (at most {within_seconds / 3600:.1f} h)"
    return None


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


class Scontrol:
    """The two things gpuprep asks of slurmctld: a node's state, and an update of it. Argument lists only."""

    def __init__(self, program: str = "scontrol"):
        self.program = program

    def _run(self, *args: str) -> str:
        try:
            done = subprocess.run([self.program, *args], capture_output=True, text=True, timeout=SCONTROL_TIMEOUT)
        except FileNotFoundError:
            raise GpuprepError(f"{self.program} not found: this is not a Slurm node (or give --scontrol)") from None
        except subprocess.TimeoutExpired:
            raise GpuprepError(f"{self.program} {args[0]} did not answer in {SCONTROL_TIMEOUT} s") from None
        if done.returncode != 0:
            said = (done.stderr or done.stdout).strip().splitlines()
            raise GpuprepError(f"{self.program} {' '.join(args[:3])}: {said[-1] if said else done.returncode}")
        return done.stdout

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
    syslog.openlog("gpuprep", 0, syslog.LOG_DAEMON)
    for line in lines:
        syslog.syslog(syslog.LOG_WARNING, line)


@dataclass
class HookResult:
    node: str
    action: Action
    problems: List[Finding]


def act(name: str, found: List[Finding], scontrol: Scontrol, resume_blocked: Optional[str] = None,
        log: Callable[[Sequence[str]], None] = journal) -> HookResult:
    """Read the node's state, decide, and carry it out; every problem and the action go to the journal."""
    action = decide(scontrol.node(name), found, resume_blocked)
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


def record_baseline(job_id: str, xid_count: Optional[int], directory: str = BASELINE_DIR) -> None:
    """The prolog's note of how many Xid/SXid lines the kernel log held when the job started."""
    from .output import write_atomic
    os.makedirs(directory, mode=0o700, exist_ok=True)
    write_atomic(baseline_path(job_id, directory), json.dumps({"xids": xid_count, "at": time.time()}) + "\n")


def read_baseline(job_id: str, directory: str = BASELINE_DIR) -> Optional[int]:
    """The number of Xid lines at the job's start (then the file is removed); None when the prolog left none."""
    path = baseline_path(job_id, directory)
    try:
        with open(path) as fh:
            data = json.load(fh)
        os.remove(path)
    except (OSError, ValueError):
        return None
    count = data.get("xids") if isinstance(data, dict) else None
    return count if isinstance(count, int) and not isinstance(count, bool) and count >= 0 else None


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
