"""Progress and summary views of an apply run: a live table on a TTY (rich), plain lines otherwise."""
from __future__ import annotations

import sys
from typing import Callable, Dict, Set

from .reducer import RunState


def _status(host) -> str:
    if host.unreachable:
        return "UNREACHABLE"
    if host.failed:
        return "FAILED"
    if host.interrupted_at is not None:
        return "INTERRUPTED"
    if host.final:
        return "ok"
    return "running" if host.started_at else "waiting"


def live_view(console_file=None):
    """A context manager yielding an on_update callback that redraws a per-host table."""
    from rich.console import Console
    from rich.live import Live
    from rich.table import Table

    console = Console(file=console_file or sys.stderr)

    def table(state: RunState) -> Table:
        grid = Table(title=state.play or "gpuprep apply", expand=False)
        for column in ("host", "status", "ok", "changed", "failed", "skipped", "current task"):
            grid.add_column(column)
        for name in sorted(state.hosts):
            h = state.hosts[name]
            grid.add_row(name, _status(h), str(h.ok), str(h.changed), str(h.failed + h.unreachable), str(h.skipped),
                         (h.current_task or "")[:60])
        return grid

    class _Ctx:
        def __enter__(self):
            self.live = Live(table(RunState()), console=console, refresh_per_second=4, transient=True)
            self.live.__enter__()
            return lambda state: self.live.update(table(state))

        def __exit__(self, *exc):
            return self.live.__exit__(*exc)

    return _Ctx()


def line_view(write: Callable[[str], None]):
    """Plain progress for logs and CI: a line per host when it starts a role (so a piped run is never silent for
    long), and a line per failure as it happens."""
    seen: Set[tuple] = set()
    roles: Dict[str, str] = {}

    def on_update(state: RunState) -> None:
        for host in state.hosts.values():
            role = host.current_role
            if role and roles.get(host.name) != role:
                roles[host.name] = role
                write(f"{host.name}: {role}")
            for failure in host.failures:
                key = (host.name, failure.task, failure.message)
                if key not in seen:
                    seen.add(key)
                    kind = "UNREACHABLE" if failure.unreachable else "FAILED"
                    write(f"{kind} {host.name}: {failure.task}: {_indented(failure.message)}")
    return on_update


def _indented(message: str) -> str:
    """A multi-line reason kept whole, its continuation lines indented under the first."""
    return message.replace("\n", "\n      ")


def diff_text(state: RunState) -> str:
    import difflib
    out = []
    for name in sorted(state.hosts):
        for task, header, before, after in state.hosts[name].diffs:
            if before == after:
                continue
            lines = difflib.unified_diff(before.splitlines(keepends=True), after.splitlines(keepends=True),
                                         fromfile=f"{name}: {header or task} (before)",
                                         tofile=f"{name}: {header or task} (after)")
            out.append("".join(lines).rstrip("\n") + "\n")
    return "".join(out)


def _unmoved_lines(state: RunState) -> list:
    """Roles the fast re-run ended because nothing they own moved, grouped by the hosts they share."""
    groups: dict = {}
    for name in sorted(state.hosts):
        if state.hosts[name].unmoved_roles:
            groups.setdefault(tuple(state.hosts[name].unmoved_roles), []).append(name)
    lines = []
    for roles, hosts in groups.items():
        where = ", ".join(hosts) if len(hosts) <= 3 else f"{len(hosts)} hosts"
        lines.append(f"  nothing moved since the last full run of {', '.join(roles)} on {where} "
                     "(checked in one read each; --full runs every task)")
    return lines


CHANGED_SHOWN = 12      # per host; the rest are counted (the JSON document lists them all)


def _task_lines(state: RunState) -> list:
    """What changed on each host (or would, in a dry run), and what was skipped there (a condition was false: not
    this distribution, no GPU, nothing to do), by task: the counts alone said nothing of which files, units and
    settings moved or stayed as they were."""
    lines = []
    for name in sorted(state.hosts):
        for what, tasks in (("changed", state.hosts[name].changed_tasks), ("skipped", state.hosts[name].skipped_tasks)):
            tasks = list(dict.fromkeys(tasks))
            shown = "; ".join(tasks[:CHANGED_SHOWN]) + (f"; and {len(tasks) - CHANGED_SHOWN} more (--json lists "
                                                        "them)" if len(tasks) > CHANGED_SHOWN else "")
            if tasks:
                lines.append(f"  {name}: {what}: {shown}")
    return lines


def summary_table(state: RunState, artifacts: str) -> str:
    rows = [("host", "result", "ok", "changed", "failed", "unreachable", "time")]
    for name in sorted(state.hosts):
        h = state.hosts[name]
        rows.append((name, "ok" if h.succeeded and h.final else _status(h), str(h.ok), str(h.changed), str(h.failed),
                     str(h.unreachable), "-" if h.seconds is None else f"{h.seconds:.1f}s"))
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    lines = ["  ".join(c.ljust(w) for c, w in zip(row, widths)).rstrip() for row in rows]
    for name in sorted(state.hosts):
        for failure in state.hosts[name].failures:
            lines.append(f"  {name}: {'unreachable' if failure.unreachable else 'failed'} at "
                         f"'{failure.task}': {_indented(failure.message)}")
        if state.hosts[name].interrupted_at is not None:
            lines.append(f"  {name}: interrupted at '{state.hosts[name].interrupted_at}'")
    lines += _unmoved_lines(state)
    lines += _task_lines(state)
    for name in sorted(state.hosts):
        for role, moved in state.hosts[name].drift.items():
            lines.append(f"  {name}: {role} ran in full, moved since its last full run: {', '.join(moved)}")
    failed = [n for n, h in state.hosts.items() if not (h.succeeded and h.final)]
    if state.interrupted:
        lines.append(f"interrupted by {state.interrupted}: the run was cancelled; hosts marked INTERRUPTED may be "
                     "part-way through a role (every file write is atomic): run apply again to finish, or revert")
    lines.append(f"{len(state.hosts) - len(failed)} of {len(state.hosts)} host(s) succeeded"
                 + (f"; failed: {', '.join(sorted(failed))}" if failed else ""))
    lines.append(f"artifacts: {artifacts}")
    return "\n".join(lines) + "\n"
