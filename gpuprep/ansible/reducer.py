"""Pure reduction of ansible-runner events into per-host progress and results. No I/O: the
runner's event handler only enqueues, and this turns the queue into state the view renders."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Dict, List, Optional


@dataclass
class FailedTask:
    task: str
    message: str
    unreachable: bool = False


@dataclass
class HostState:
    name: str
    ok: int = 0
    changed: int = 0
    failed: int = 0
    unreachable: int = 0
    skipped: int = 0
    current_task: Optional[str] = None
    started_at: Optional[float] = None
    finished_at: Optional[float] = None
    failures: List[FailedTask] = field(default_factory=list)
    changed_tasks: List[str] = field(default_factory=list)
    diffs: List[tuple] = field(default_factory=list)        # (task, before_header, before, after)
    unmoved_roles: List[str] = field(default_factory=list)  # ended by the fast re-run: nothing moved
    drift: Dict[str, List[str]] = field(default_factory=dict)  # role -> what moved since its last full run
    final: bool = False            # counts replaced by playbook_on_stats
    interrupted_at: Optional[str] = None   # the task it was in when the run was cancelled
    collected: Dict[str, str] = field(default_factory=dict)  # "Collect ..." task -> its stdout (a probe's snapshot)

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
                "changed_tasks": list(self.changed_tasks), "unmoved_roles": list(self.unmoved_roles),
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


MESSAGE_LIMIT = 4000       # characters of one failure reason kept (a module can dump megabytes of stderr)
GENERIC = ("One or more items failed", "non-zero return code", "MODULE FAILURE\nSee stdout/stderr for the exact error")


def _item_label(item: dict) -> str:
    label = item.get("_ansible_item_label", item.get("item"))
    return f"item {label}" if label is not None else "item"


def _message(result: dict) -> str:
    """The whole reason a task failed: its message, the stderr behind a generic one, and every failed
    loop item's own message, each on its own line."""
    parts = []
    for key in ("msg", "reason", "stderr", "module_stderr"):
        value = str(result.get(key) or "").strip()
        if value and not any(value in part for part in parts):
            parts.append(value)
    if len(parts) > 1 and parts[0] in GENERIC:
        parts.pop(0)
    if not parts and result.get("rc"):
        stdout = str(result.get("stdout") or "").strip()
        parts.append(f"exit code {result['rc']}" + (f": {stdout}" if stdout else ""))
    failed_items = [item for item in result.get("results") or [] if isinstance(item, dict) and item.get("failed")]
    if failed_items:
        parts = [p for p in parts if p not in GENERIC]
        parts += [f"{_item_label(item)}: {_message(item)}" for item in failed_items]
    text = "\n".join(parts) or "failed"
    return text if len(text) <= MESSAGE_LIMIT else text[:MESSAGE_LIMIT] + " [...]"


def reduce(state: RunState, event: dict, now: float) -> RunState:
    kind = event.get("event")
    data = event.get("event_data") or {}
    host_name = data.get("host")
    if kind == "playbook_on_play_start":
        state.play = data.get("play") or data.get("name")
        for name in data.get("hosts") or []:
            state.host(name)
    elif kind in ("runner_on_start", "playbook_on_task_start") and host_name:
        host = state.host(host_name)
        host.current_task = data.get("task")
        if host.started_at is None:
            host.started_at = now
    elif kind == "runner_on_ok" and host_name:
        host = state.host(host_name)
        host.ok += 1
        result = data.get("res") or {}
        if result.get("changed"):
            host.changed += 1
            host.changed_tasks.append(data.get("task") or "?")
        if (data.get("task") or "").lower().startswith("collect "):
            host.collected[data["task"]] = str(result.get("stdout") or "")
        if (data.get("task_action") or "").endswith("gpuprep_converged"):
            if result.get("converged") is True:
                host.unmoved_roles.append(data.get("role") or "?")
            elif result.get("moved"):
                host.drift[data.get("role") or "?"] = list(result["moved"])
        diffs = result.get("diff") or []
        for diff in diffs if isinstance(diffs, list) else [diffs]:
            if isinstance(diff, dict) and ("before" in diff or "after" in diff):
                args = (result.get("invocation") or {}).get("module_args") or {}
                where = (args.get("dest") or args.get("path") or result.get("dest") or result.get("path")
                         or diff.get("before_header") or diff.get("after_header") or "")
                host.diffs.append((data.get("task") or "?", where,
                                   str(diff.get("before", "")), str(diff.get("after", ""))))
        host.finished_at = now
    elif kind == "runner_on_skipped" and host_name:
        host = state.host(host_name)
        host.skipped += 1
        host.finished_at = now
    elif kind == "runner_on_failed" and host_name:
        host = state.host(host_name)
        host.finished_at = now
        if data.get("ignore_errors"):
            host.ok += 1
        else:
            host.failed += 1
            host.failures.append(FailedTask(task=data.get("task") or "?", message=_message(data.get("res") or {})))
    elif kind == "runner_on_unreachable" and host_name:
        host = state.host(host_name)
        host.unreachable += 1
        host.finished_at = now
        host.failures.append(FailedTask(task=data.get("task") or "?", message=_message(data.get("res") or {}),
                                        unreachable=True))
    elif kind == "playbook_on_stats":
        counts = {key: data.get(key) or {} for key in ("ok", "changed", "failures", "dark", "skipped", "rescued")}
        for name in set().union(*[set(c) for c in counts.values()]):
            host = state.host(name)
            host.ok = counts["ok"].get(name, 0)
            host.changed = counts["changed"].get(name, 0)
            host.failed = counts["failures"].get(name, 0)
            host.unreachable = counts["dark"].get(name, 0)
            host.skipped = counts["skipped"].get(name, 0)
            host.current_task = None
            host.final = True
        state.finished = True
    elif kind == "error" or (kind == "verbose" and "ERROR!" in (event.get("stdout") or "")):
        state.errors.append((event.get("stdout") or "").strip())
    return state


def interrupt(state: RunState, signal_name: str) -> RunState:
    """The run was cancelled: every host that had not finished is marked with the task it was in."""
    state.interrupted = signal_name
    for host in state.hosts.values():
        if not host.final:
            host.interrupted_at = host.current_task or "(not started)"
    return state
