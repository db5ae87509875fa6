"""One verdict, many consumers: the findings of a check turned into what a scheduler or a monitor reads. Pure:
no I/O. Slurm gets a drain reason, node-problem-detector an exit code and a short message, Nagios/Icinga (and
the monitors that share their convention) a status line. Which findings count is the profile's `act_on`
(default: the failing ones; warnings do not drain a node)."""
from __future__ import annotations

import re
from typing import Dict, List, Sequence, Tuple

from .rules import Finding

DEFAULT_ACT_ON = ("fail",)
REASON_PREFIX = "gpuprep: "      # Slurm drain reasons gpuprep set start with this, and only those are its own
REASON_LIMIT = 200               # Slurm keeps longer reasons, but sinfo -R shows 20 characters, scontrol one line
NPD_MESSAGE_LIMIT = 80           # node-problem-detector's default max_output_length


def problems(findings: Sequence[Finding], profile: Dict) -> List[Finding]:
    """The findings the profile says to act on, worst first (the findings come sorted so)."""
    act_on = profile.get("act_on") or DEFAULT_ACT_ON
    return [f for f in findings if f.severity in act_on]


def _printable(text: str) -> str:
    """Node-supplied words, on one line of printable ASCII: a reason or a message is shown by other tools."""
    return re.sub(r"[^\x20-\x7e]", "?", text)


def headline(found: Sequence[Finding]) -> str:
    """'<check id> <subject>' of the worst problem, and how many more: the words a short field must show first."""
    first = found[0]
    more = f" (+{len(found) - 1} more)" if len(found) > 1 else ""
    return _printable(f"{first.id} {first.subject}{more}")


def slurm_reason(found: Sequence[Finding]) -> str:
    """Reason="gpuprep: gpu.xid GPU3 (+1 more)": the key words within the 20 characters sinfo -R shows."""
    return (REASON_PREFIX + headline(found))[:REASON_LIMIT]


def is_own_reason(reason: str) -> bool:
    return reason.startswith(REASON_PREFIX)


def log_lines(found: Sequence[Finding]) -> List[str]:
    """Every problem on a line of its own (for the journal): id, severity, subject, title."""
    return [_printable(f"{f.id} {f.severity} {f.subject}: {f.title}") for f in found]


def npd(found: Sequence[Finding]) -> Tuple[int, str]:
    """node-problem-detector's custom-plugin contract: exit 0 healthy, 1 a problem (anything else is unknown),
    and a message NPD cuts at 80 characters, so it starts with the check id and subject."""
    if not found:
        return 0, "gpuprep: healthy"
    return 1, (headline(found) + ": " + _printable(found[0].title))[:NPD_MESSAGE_LIMIT]


NAGIOS = {"ok": 0, "warning": 1, "critical": 2, "unknown": 3}


def nagios(findings: Sequence[Finding], found: Sequence[Finding]) -> Tuple[int, str]:
    """The Nagios/Icinga plugin convention (0 OK, 1 WARNING, 2 CRITICAL, 3 UNKNOWN): CRITICAL when a failing
    finding is acted on, WARNING when only warnings are, with the counts as performance data."""
    counts = {s: sum(1 for f in findings if f.severity == s) for s in ("fail", "warn", "info", "pass")}
    perf = " ".join(f"{s}={n}" for s, n in counts.items())
    if not found:
        return NAGIOS["ok"], f"GPUPREP OK - {counts['pass']} checks passed | {perf}"
    state = "critical" if any(f.severity == "fail" for f in found) else "warning"
    return NAGIOS[state], f"GPUPREP {state.upper()} - {headline(found)}: {_printable(found[0].title)} | {perf}"


def nagios_unknown(message: str) -> Tuple[int, str]:
    """What could not be judged (bad input, a probe that failed) is UNKNOWN, never OK and never CRITICAL."""
    return NAGIOS["unknown"], "GPUPREP UNKNOWN - " + _printable(message)
