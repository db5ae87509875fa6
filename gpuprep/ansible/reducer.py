"""Pure reduction of ansible-runner events into per-host progress and results. No I/O: the
runner's event handler only enqueues, and this turns the queue into state the view renders."""
from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Dict, List, Optional


@dataclass
class FailedTask:
    task: str
    message: str
    unreachable: bool = False
    stdout: str = ""       # what the failed command printed (a gpuprep command's JSON error document), bounded


@dataclass
class HostState:
    name: str
    ok: int = 0
    changed: int = 0
    failed: int = 0
    unreachable: int = 0
    skipped: int = 0
    current_task: Optional[str] = None
    current_role: Optional[str] = None
    started_at: Optional[float] = None
    finished_at: Optional[float] = None
    failures: List[FailedTask] = field(default_factory=list)
    changed_tasks: List[str] = field(default_factory=list)
    skipped_tasks: List[str] = field(default_factory=list)  # "role : task", as Ansible names a role's task
    diffs: List[tuple] = field(default_factory=list)        # (task, before_header, before, after)
    unmoved_roles: List[str] = field(default_factory=list)  # ended by the fast re-run: nothing moved
    drift: Dict[str, List[str]] = field(default_factory=dict)  # role -> what moved since its last full run
    final: bool = False            # counts replaced by playbook_on_stats
    interrupted_at: Optional[str] = None   # the task it was in when the run was cancelled
    probe_output: Optional[str] = None   # the stdout of a task that printed a gpuprep snapshot (check.yml's probe)
    watch_output: Optional[str] = None   # the stdout of a job's watcher on this node (watch.yml): its JSON lines

    @property
    def succeeded(self) -> bool:
        return self.failed == 0 and self.unreachable == 0

    @property
    def seconds(self) -> Optional[float]:
        if self.started_at is None or self.finished_at is None:
            return None
        return self.finished_at - self.started_at

    def to_dict(self) -> dict:
        return {"ok": self.ok, "changed": self.changed, "failed": self.failed, "unreachable": self.unreachable,
                "skipped": self.skipped, "seconds": None if self.seconds is None else round(self.seconds, 1),
                "changed_tasks": list(self.changed_tasks), "skipped_tasks": list(self.skipped_tasks),
                "unmoved_roles": list(self.unmoved_roles),
                "drift": {role: list(moved) for role, moved in self.drift.items()},
                "interrupted": self.interrupted_at is not None, "interrupted_at": self.interrupted_at,
                "failed_tasks": [{"task": f.task, "message": f.message, "unreachable": f.unreachable}
                                 for f in self.failures]}


@dataclass
class RunState:
    hosts: Dict[str, HostState] = field(default_factory=dict)
    play: Optional[str] = None
    finished: bool = False
    errors: List[str] = field(default_factory=list)   # playbook-level messages (syntax, bad tags, ...)
    interrupted: Optional[str] = None                  # SIGINT/SIGTERM when the run was cancelled

    def host(self, name: str) -> HostState:
        if name not in self.hosts:
            self.hosts[name] = HostState(name=name)
        return self.hosts[name]

    def _own(self, name: str) -> HostState:
        """A copy of the host's state, put in place of the original in this (already copied) run state: the
        reducer changes the copy, never a state it was given."""
        old = self.hosts.get(name) or HostState(name=name)
        new = replace(old, failures=list(old.failures), changed_tasks=list(old.changed_tasks),
                      skipped_tasks=list(old.skipped_tasks), diffs=list(old.diffs),
                      unmoved_roles=list(old.unmoved_roles), drift=dict(old.drift))
        self.hosts[name] = new
        return new


MESSAGE_LIMIT = 4000       # characters of one failure reason kept (a module can dump megabytes of stderr)
GENERIC = ("One or more items failed", "non-zero return code", "MODULE FAILURE\nSee stdout/stderr for the exact error")


def _item_label(item: dict) -> str:
    label = item.get("_ansible_item_label", item.get("item"))
    return f"item {label}" if label is not None else "item"


def _own_words(result: dict) -> List[str]:
    """The result's message, reason and stderr, each once; a generic message gives way to the words behind it;
    with none, the exit code and what was printed."""
    parts: List[str] = []
    for key in ("msg", "reason", "stderr", "module_stderr"):
        value = str(result.get(key) or "").strip()
        if value and not any(value in part for part in parts):
            parts.append(value)
    if len(parts) > 1 and parts[0] in GENERIC:
        parts.pop(0)
    if not parts and result.get("rc"):
        stdout = str(result.get("stdout") or "").strip()
        parts.append(f"exit code {result['rc']}" + (f": {stdout}" if stdout else ""))
    return parts


def _message(result: dict) -> str:
    """The whole reason a task failed: its message, the stderr behind a generic one, and every failed
    loop item's own message, each on its own line."""
    parts = _own_words(result)
    failed_items = [item for item in result.get("results") or [] if isinstance(item, dict) and item.get("failed")]
    if failed_items:
        parts = [p for p in parts if p not in GENERIC]
        parts += [f"{_item_label(item)}: {_message(item)}" for item in failed_items]
    text = "\n".join(parts) or "failed"
    return text if len(text) <= MESSAGE_LIMIT else text[:MESSAGE_LIMIT] + " [...]"


def _play_start(state: RunState, data: dict, event: dict, now: float) -> None:
    state.play = data.get("play") or data.get("name")
    for name in data.get("hosts") or []:
        state._own(name)


def _task_start(state: RunState, data: dict, event: dict, now: float) -> None:
    host = state._own(data["host"])
    host.current_task = data.get("task")
    host.current_role = data.get("role") or host.current_role
    if host.started_at is None:
        host.started_at = now


def _ok(state: RunState, data: dict, event: dict, now: float) -> None:
    host = state._own(data["host"])
    host.ok += 1
    result = data.get("res") or {}
    if result.get("changed"):
        host.changed += 1
        host.changed_tasks.append(data.get("task") or "?")
    stdout = str(result.get("stdout") or "")
    if SNAPSHOT_MARK in stdout[:SNAPSHOT_MARK_WITHIN]:     # the probe's return: this host's snapshot document
        host.probe_output = stdout
    elif stdout.startswith(WATCH_MARK):
        host.watch_output = stdout
    if (data.get("task_action") or "").endswith("gpuprep_converged"):
        _converged(host, data.get("role") or "?", result)
    host.diffs.extend(_diffs(data.get("task") or "?", result))
    host.finished_at = now


def _converged(host: HostState, role: str, result: dict) -> None:
    if result.get("converged") is True:
        host.unmoved_roles.append(role)
    elif result.get("moved"):
        host.drift[role] = list(result["moved"])


def _diffs(task: str, result: dict) -> List[tuple]:
    """(task, where, before, after) for each file diff a module returned."""
    diffs = result.get("diff") or []
    out = []
    for diff in diffs if isinstance(diffs, list) else [diffs]:
        if isinstance(diff, dict) and ("before" in diff or "after" in diff):
            args = (result.get("invocation") or {}).get("module_args") or {}
            where = (args.get("dest") or args.get("path") or result.get("dest") or result.get("path")
                     or diff.get("before_header") or diff.get("after_header") or "")
            out.append((task, where, str(diff.get("before", "")), str(diff.get("after", ""))))
    return out


def _skipped(state: RunState, data: dict, event: dict, now: float) -> None:
    host = state._own(data["host"])
    host.skipped += 1
    task, role = data.get("task") or "?", data.get("role")
    host.skipped_tasks.append(f"{role} : {task}" if role else task)
    host.finished_at = now


def _failed(state: RunState, data: dict, event: dict, now: float) -> None:
    host = state._own(data["host"])
    host.finished_at = now
    if data.get("ignore_errors"):
        host.ok += 1
    else:
        host.failed += 1
        result = data.get("res") or {}
        host.failures.append(FailedTask(task=data.get("task") or "?", message=_message(result),
                                        stdout=str(result.get("stdout") or "")[:MESSAGE_LIMIT]))


def _unreachable(state: RunState, data: dict, event: dict, now: float) -> None:
    host = state._own(data["host"])
    host.unreachable += 1
    host.finished_at = now
    host.failures.append(FailedTask(task=data.get("task") or "?", message=_message(data.get("res") or {}),
                                    unreachable=True))


_STATS = (("ok", "ok"), ("changed", "changed"), ("failed", "failures"), ("unreachable", "dark"),
          ("skipped", "skipped"))     # HostState field <- playbook_on_stats key


def _stats(state: RunState, data: dict, event: dict, now: float) -> None:
    """Ansible's final counts replace the ones counted from events (loops and handlers count differently)."""
    counts = {key: data.get(key) or {} for key in ("ok", "changed", "failures", "dark", "skipped", "rescued")}
    for name in set().union(*[set(c) for c in counts.values()]):
        host = state._own(name)
        for attribute, key in _STATS:
            setattr(host, attribute, counts[key].get(name, 0))
        host.current_task = None
        host.final = True
    state.finished = True


def _error(state: RunState, data: dict, event: dict, now: float) -> None:
    state.errors = state.errors + [(event.get("stdout") or "").strip()]


SNAPSHOT_MARK = '"schema": "gpuprep.snapshot/'     # how a gpuprep snapshot document starts (Snapshot.to_json)
WATCH_MARK = '{"v":1,"host":'        # how a job watcher's line starts (job/stream.py, Emitter.line)
SNAPSHOT_MARK_WITHIN = 4096                         # characters: a line the interpreter printed first is allowed

# event -> (handler, needs a host): what each ansible-runner event does to the state; others change nothing
HANDLERS = {
    "playbook_on_play_start": (_play_start, False),
    "runner_on_start": (_task_start, True),
    "playbook_on_task_start": (_task_start, True),
    "runner_on_ok": (_ok, True),
    "runner_on_skipped": (_skipped, True),
    "runner_on_failed": (_failed, True),
    "runner_on_unreachable": (_unreachable, True),
    "playbook_on_stats": (_stats, False),
    "error": (_error, False),
}


def reduce(state: RunState, event: dict, now: float) -> RunState:
    """The state after `event`: a new RunState (the one given is left as it was). Pure: no I/O, no clock but `now`."""
    kind = event.get("event")
    data = event.get("event_data") or {}
    if kind == "verbose" and "ERROR!" in (event.get("stdout") or ""):
        kind = "error"
    handler, needs_host = HANDLERS.get(kind, (None, False))
    if handler is None or (needs_host and not data.get("host")):
        return state
    new = replace(state, hosts=dict(state.hosts))
    handler(new, data, event, now)
    return new


def interrupt(state: RunState, signal_name: str) -> RunState:
    """The state after the run was cancelled: every host that had not finished is marked with the task it was in."""
    new = replace(state, hosts=dict(state.hosts), interrupted=signal_name)
    for name, host in state.hosts.items():
        if not host.final:
            new._own(name).interrupted_at = host.current_task or "(not started)"
    return new
