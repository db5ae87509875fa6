"""One verdict, many consumers: the findings of a check turned into what a scheduler or a monitor reads. Pure:
no I/O. Slurm gets a drain reason, node-problem-detector an exit code and a short message, Nagios/Icinga (and
the monitors that share their convention) a status line. Which findings count is the profile's `act_on`
(default: the failing ones; warnings do not drain a node)."""
from __future__ import annotations

import re
from typing import Dict, List, Sequence, Tuple

from .rules import Finding

DEFAULT_ACT_ON = ("fail",)
# A Slurm drain reason gpuprep set: the check id first (sinfo -R shows 20 characters: "gpu.row-remap GPU1 (g"),
# then the subject, then this mark, by which gpuprep knows its own drains (and only those) run after run
REASON_MARK = " (gpuprep)"
LEGACY_PREFIX = "gpuprep: "      # the mark of gpuprep <= 0.1 (drains it set before an upgrade are still its own)
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
    """Reason="gpu.xid GPU3 (+1 more) (gpuprep)": the check id in the first 20 characters sinfo -R shows, the same
    words every run (so a node drained for the same problem is not drained again). No double quote: scontrol
    strips one at the end of a reason, and the next run would see a reason of its own changed."""
    head = headline(found).replace('"', "'")
    return head[:REASON_LIMIT - len(REASON_MARK)] + REASON_MARK


def is_own_reason(reason: str) -> bool:
    return reason.endswith(REASON_MARK) or reason.startswith(LEGACY_PREFIX)


def log_lines(found: Sequence[Finding]) -> List[str]:
    """Every problem on a line of its own (for the journal): id, severity, subject, title."""
    return [_printable(f"{f.id} {f.severity} {f.subject}: {f.title} [action: {f.action}]") for f in found]


def npd(found: Sequence[Finding], unjudged: Sequence[str] = (), require_gpu: bool = False) -> Tuple[int, str]:
    """node-problem-detector's custom-plugin contract: exit 0 healthy, 1 a problem (anything else is unknown),
    and a message NPD cuts at 80 characters, so it starts with the check id and subject."""
    if not found:
        if unjudged:        # nothing wrong seen, but a whole side unseen: never "healthy"; a GPU node's problem
            return int(require_gpu), ("gpuprep: not judged: " + _printable("; ".join(unjudged)))[:NPD_MESSAGE_LIMIT]
        return 0, "gpuprep: healthy"
    return 1, (headline(found) + f" [{found[0].action}]: " + _printable(found[0].title))[:NPD_MESSAGE_LIMIT]


def npd_unknown(message: str) -> Tuple[int, str]:
    """What could not be judged: NPD's "unknown" (any exit but 0 and 1), one printable line of at most 80."""
    return 2, ("gpuprep unknown: " + _printable(message))[:NPD_MESSAGE_LIMIT]


NAGIOS = {"ok": 0, "warning": 1, "critical": 2, "unknown": 3}


def _plugin_text(text: str) -> str:
    """Words on a Nagios status line: printable, and no '|' (it starts the performance data)."""
    return _printable(text).replace("|", "/")


def nagios(findings: Sequence[Finding], found: Sequence[Finding], unjudged: Sequence[str] = (),
           require_gpu: bool = False) -> Tuple[int, str]:
    """The Nagios/Icinga plugin convention (0 OK, 1 WARNING, 2 CRITICAL, 3 UNKNOWN): CRITICAL when a failing
    finding is acted on, WARNING when a warning is found (a Nagios user expects to hear of it even where the
    profile drains on failures only), UNKNOWN when nothing was judged; the counts as performance data."""
    counts = {s: sum(1 for f in findings if f.severity == s) for s in ("fail", "warn", "info", "pass")}
    perf = " ".join(f"{s}={n}" for s, n in counts.items())
    if any(f.severity == "fail" for f in found):
        return NAGIOS["critical"], f"GPUPREP CRITICAL - {_plugin_text(headline(found))}: " \
                                   f"{_plugin_text(found[0].title)} | {perf}"
    if require_gpu and unjudged:
        return NAGIOS["critical"], f"GPUPREP CRITICAL - not judged: {_plugin_text('; '.join(unjudged))} | {perf}"
    warned = [f for f in findings if f.severity == "warn"]
    if warned:
        return NAGIOS["warning"], f"GPUPREP WARNING - {_plugin_text(headline(warned))}: " \
                                  f"{_plugin_text(warned[0].title)} | {perf}"
    if not counts["pass"] and not counts["fail"]:
        return nagios_unknown(f"nothing was judged ({counts['info']} informational findings) | {perf}")
    unseen = f"; not judged: {_plugin_text('; '.join(unjudged))}" if unjudged else ""
    return NAGIOS["ok"], f"GPUPREP OK - {counts['pass']} checks passed{unseen} | {perf}"


def nagios_unknown(message: str) -> Tuple[int, str]:
    """What could not be judged (bad input, a probe that failed) is UNKNOWN, never OK and never CRITICAL."""
    text, bar, perf = message.partition(" | ")
    return NAGIOS["unknown"], "GPUPREP UNKNOWN - " + _plugin_text(text) + (bar + perf if bar else "")
