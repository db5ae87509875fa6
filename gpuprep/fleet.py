"""A fleet: one snapshot per host (gathered through Ansible, or saved earlier), each judged by the same
rules as a single host, plus the drift between them. Gathering is I/O; judging is pure."""
from __future__ import annotations

import json
import os
import re
from dataclasses import dataclass, field
from typing import Callable, Dict, List, Optional, Sequence

from .errors import BadInput, bad_argument
from .rules import Context, Finding, judge_all, select
from .snapshot import PROBE_ERROR_SCHEMA, Snapshot



@dataclass
class Member:
    name: str
    snapshot: Optional[Snapshot] = None
    status: str = "checked"              # checked | unreachable | probe-failed
    problem: Optional[str] = None        # why there is no snapshot
    groups: List[str] = field(default_factory=list)     # the inventory groups that list it (a rack, a row)


@dataclass
class FleetResult:
    members: List[Member]
    findings: Dict[str, List[Finding]] = field(default_factory=dict)
    waived: Dict[str, List[Finding]] = field(default_factory=dict)
    drift: list = field(default_factory=list)
    drift_findings: List[Finding] = field(default_factory=list)
    baseline: Optional[str] = None


def judge_fleet(members: List[Member], context: Context, skip: Sequence[str] = (), only: Sequence[str] = (),
                baseline: Optional[str] = None) -> FleetResult:
    """`baseline`: a member's name or a snapshot file to measure drift against instead of the majority."""
    from .rules.drift import drift_findings, fleet_drift
    from .rules.peers import Peer, peer_counts
    result = FleetResult(members=sorted(members, key=lambda m: m.name), baseline=baseline)
    snapshots = {m.name: m.snapshot for m in result.members if m.snapshot is not None}
    for name, snap in snapshots.items():
        result.findings[name], result.waived[name] = select(judge_all(snap, context), skip, only)
    reference = _baseline(baseline, snapshots) if baseline else None
    result.drift = fleet_drift(snapshots, reference)
    peers = {m.name: Peer(m.snapshot, m.groups) for m in result.members if m.snapshot is not None}
    result.drift_findings = select(drift_findings(result.drift) + peer_counts(peers), skip, only)[0]
    return result


def _baseline(baseline: str, snapshots: Dict[str, Snapshot]) -> Snapshot:
    if baseline in snapshots:
        return snapshots[baseline]
    if os.path.isfile(baseline):
        from .parsers import import_files
        return import_files([baseline])
    raise bad_argument("baseline", f"{baseline}: neither a checked host of this fleet ({', '.join(sorted(snapshots)) or 'none'})"
                   f" nor a snapshot file")


# --- saved fleets ----------------------------------------------------------------------------------------

def file_name(host: str) -> str:
    """A host's file in a saved fleet directory (inventory names may hold '/', ':' or spaces). A name that is not
    already safe gets a short digest of itself, so 'node@1', 'node_1' and 'node 1' never share one file."""
    safe = re.sub(r"[^A-Za-z0-9._-]", "_", host).lstrip(".") or "_"
    if safe == host:
        return safe
    import hashlib
    return f"{safe[:80]}.{hashlib.sha256(host.encode('utf-8', 'surrogatepass')).hexdigest()[:8]}"


def save(members: List[Member], directory: str) -> List[str]:
    """One file per host: its snapshot, or a probe-error document saying why there is none."""
    from .output import write_atomic
    if not os.path.isdir(directory):
        raise bad_argument("output", f"{directory}: not a directory (with -i, -o names the directory to write one snapshot per host)")
    written = []
    for member in members:
        path = os.path.join(directory, file_name(member.name) + ".json")
        if member.snapshot is not None:
            text = member.snapshot.to_json()
        else:
            text = json.dumps({"schema": PROBE_ERROR_SCHEMA, "host": member.name, "status": member.status,
                               "problem": member.problem}, indent=2)
        write_atomic(path, text + "\n")
        written.append(path)
    return written


def load_saved(paths: Sequence[str]) -> List[Member]:
    """Members from snapshot files and directories of them (as `snapshot -i -o DIR` writes)."""
    from .parsers import read_capture
    files: List[str] = []
    for path in paths:
        if os.path.isdir(path):
            found = sorted(os.path.join(path, n) for n in os.listdir(path) if n.endswith(".json"))
            if not found:
                raise BadInput(f"{path}: no snapshot files (*.json) in this directory")
            files += found
        else:
            files.append(path)
    members: Dict[str, Member] = {}
    for path in files:
        member = _member(read_capture(path), path)
        if member.name in members:
            raise BadInput(f"{path}: host {member.name} is already in this fleet (two snapshots of one host)")
        members[member.name] = member
    return list(members.values())


def _member(text: str, path: str) -> Member:
    stem = os.path.splitext(os.path.basename(path))[0]
    try:
        data = json.loads(text)
    except ValueError as exc:
        raise BadInput(f"{path}: not valid JSON ({exc})") from None
    if isinstance(data, dict) and data.get("schema") == PROBE_ERROR_SCHEMA:
        for key in ("host", "status", "problem"):
            if data.get(key) is not None and not isinstance(data[key], str):
                raise BadInput(f"{path}: {key}: expected a string in a probe-error document, got "
                               f"{type(data[key]).__name__}")
        return Member(data.get("host") or stem, None, data.get("status") or "probe-failed",
                      (data.get("problem") or "no snapshot")[:2000])
    snap = Snapshot.from_json(text, os.path.basename(path))
    from .report import host_name
    return Member(host_name(snap) if snap.sources or snap.system.hostname else stem, snap)


def saved_fleet(paths: Sequence[str]) -> Optional[List[Member]]:
    """The members when --from names a fleet (a directory, or snapshot files of several hosts), else None:
    the files are one host's captures. Each file is read once."""
    if any(os.path.isdir(p) for p in paths):
        return load_saved(paths)
    if len(paths) < 2 or not all(_is_saved_document(p) for p in paths):
        return None
    try:
        members = load_saved(paths)
    except BadInput:
        return None          # e.g. two snapshots of one host: combined as that host's captures
    return members if len({m.name for m in members}) > 1 else None


def _is_saved_document(path: str) -> bool:
    try:
        with open(path, encoding="utf-8", errors="replace") as fh:
            head = fh.read(4096)
    except OSError:
        return False
    return head.lstrip().startswith("{") and ("gpuprep.snapshot/" in head or PROBE_ERROR_SCHEMA in head)


# --- gathering through Ansible ---------------------------------------------------------------------------

def gather(inventory: str, limit: Optional[str], forks: Optional[int],
           on_update: Optional[Callable] = None, extravars: Optional[dict] = None, connection=None):
    """Run check.yml: the probe zipapp runs on every host (Python 3 there, nothing installed) and prints
    its snapshot. Returns (members, outcome)."""
    from .ansible.runner import ApplyRequest, run
    from .zipapp import probe_zipapp
    variables = {"gpuprep_probe_pyz": probe_zipapp()}
    if connection is not None and connection.no_become:
        variables["gpuprep_check_become"] = False
    # Ansible's own strategy: the probe runs through `script`, which needs no Python on the host to start,
    # so a host without python3 is reported as such instead of failing Mitogen's bootstrap.
    outcome = run(ApplyRequest(playbook="check.yml", inventory=inventory, limit=limit, forks=forks,
                               internal_vars=variables, extravars=extravars, mitogen=False, connection=connection),
               on_update)
    members = [_gathered(name, outcome.state.hosts.get(name)) for name in outcome.hosts_in_inventory]
    for member in members:
        member.groups = outcome.groups.get(member.name, [])
    return members, outcome


def _gathered(name: str, host) -> Member:
    if host is None or (host.probe_output is None and not host.failures):
        reason = "the run ended before this host was probed" if host is None or host.interrupted_at is None \
            else f"interrupted ({host.interrupted_at})"
        return Member(name, None, "probe-failed", reason)
    failure = next(iter(host.failures), None)
    reported = _probe_error(failure.stdout) if failure is not None else None
    if reported is not None:
        return Member(name, None, "probe-failed", reported)
    if failure is not None:
        first = failure.message.strip().splitlines()
        status = "unreachable" if failure.unreachable else "probe-failed"
        return Member(name, None, status, _probe_problem(failure.message) if not failure.unreachable
                      else (first[0] if first else "unreachable"))
    text = host.probe_output or ""
    start = text.find("{")
    try:
        snap = Snapshot.from_json(text[start:] if start >= 0 else text, f"{name} probe output")
    except BadInput as exc:
        return Member(name, None, "probe-failed", str(exc))
    snap.sources = [f"ansible:{name}"] + [s for s in snap.sources if not s.startswith("ansible:")]
    return Member(name, snap)


_PROBE_FAILURES = (
    # ansible-core 2.19+ says "Timed out after N second(s)", earlier ones "... in the expected time frame (N) ..."
    (re.compile(r"[Tt]imed out after (\d+) second|failed to execute in the expected time frame \((\d+)\)"),
     "probe timed out after {} s "
     "(a hung GPU or NVML call?); if the host is only slow, set gpuprep_probe_timeout=SECONDS for it in the "
     "inventory"),
    (re.compile(r"python3?: (?:command )?not found|No such file or directory.*python", re.I),
     "no Python 3 on the host (the probe needs python3 >= 3.8 and nothing else)"),
)


def _probe_error(stdout: str) -> Optional[str]:
    """The problem the probe itself reported (its probe-error document on standard output), else None."""
    start = stdout.find("{")
    try:
        document = json.loads(stdout[start:]) if start >= 0 and PROBE_ERROR_SCHEMA in stdout else None
    except ValueError:
        return None
    if isinstance(document, dict) and document.get("schema") == PROBE_ERROR_SCHEMA:
        return str(document.get("problem") or "the probe failed without saying why")[:2000]
    return None


def _probe_problem(message: str) -> str:
    for pattern, meaning in _PROBE_FAILURES:
        match = pattern.search(message)
        if match:
            found = [g for g in match.groups() if g is not None]
            return meaning.format(*found)
    lines = [l for l in message.strip().splitlines() if l.strip()]
    return "probe failed: " + (lines[-1] if lines else "no output")
