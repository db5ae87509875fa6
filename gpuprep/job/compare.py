"""Proof that a fix helped: two diagnoses of the same job, before and after a change, compared. Pure: facts and
findings in, findings out (job.compare-* ids). A change within the steps' own spread is noise, never a win."""
from __future__ import annotations

import statistics
from typing import List, Optional

from ..rules import Finding
from .facts import JobFacts

CAUSES = ("job.dataloader", "job.host-sync", "job.h2d-pageable", "job.comm-exposed", "job.launch-bound",
          "job.gpu-idle", "job.no-tensor-cores", "job.straggler", "job.memory-full")


def _step(facts: JobFacts) -> Optional[float]:
    steps = [r.step_ms for r in facts.ranks if r.step_ms]
    return statistics.median(steps) if steps else None


def _spread(facts: JobFacts) -> Optional[tuple]:
    spreads = [r.step_ms_spread for r in facts.ranks if r.step_ms_spread]
    return (min(s[0] for s in spreads), max(s[1] for s in spreads)) if spreads else None


def step_change(before: JobFacts, after: JobFacts) -> Finding:
    """The median step time before and after: better or worse beyond the before run's own spread, else noise."""
    b, a = _step(before), _step(after)
    if b is None or a is None:
        return Finding("job.compare-step", "info", "job", "Step time not compared: a run has no ProfilerStep",
                       {"before_ms": b, "after_ms": a}, "Record both runs with a profiler schedule and prof.step()")
    low, high = _spread(before) or (b, b)
    change = 100 * (a - b) / b
    evidence = {"before_ms": b, "after_ms": a, "change_pct": round(change, 1), "before_spread_ms": [low, high]}
    words = f"Step time {b:.1f} ms -> {a:.1f} ms ({change:+.0f}%)"
    if low <= a <= high:
        return Finding("job.compare-step", "info", "job", words + ": within the before run's own spread "
                       f"({low:.1f}-{high:.1f} ms), noise", evidence, "Profile more steps to tell a change from noise")
    if a < low:
        return Finding("job.compare-step", "pass", "job", words + ": faster", evidence)
    return Finding("job.compare-step", "warn", "job", words + ": slower", evidence,
                   "Undo the change, or look at the after run's own findings")


def cause_changes(before: List[Finding], after: List[Finding]) -> List[Finding]:
    """Each cause named before: gone (pass), or still there with its share then and now (warn)."""
    out = []
    now = {(f.id, f.subject): f for f in after if f.severity in ("warn", "fail")}
    for f in before:
        if f.id not in CAUSES or f.severity not in ("warn", "fail"):
            continue
        still = now.get((f.id, f.subject)) or next((g for (i, _), g in now.items() if i == f.id), None)
        gain_before = f.evidence.get("gain_pct_of_step")
        if still is None:
            out.append(Finding("job.compare-cause", "pass", f.subject, f"{f.id} is gone"
                               + (f" (it held {gain_before}% of the step)" if gain_before is not None else ""),
                               {"cause": f.id, "before_gain_pct": gain_before}))
        else:
            gain_after = still.evidence.get("gain_pct_of_step")
            out.append(Finding("job.compare-cause", "warn", f.subject, f"{f.id} is still there"
                               + (f" ({gain_before}% of the step before, {gain_after}% after)"
                                  if gain_before is not None and gain_after is not None else ""),
                               {"cause": f.id, "before_gain_pct": gain_before, "after_gain_pct": gain_after},
                               still.remedy))
    return out


def compare(before: JobFacts, after: JobFacts, before_findings: List[Finding],
            after_findings: List[Finding]) -> List[Finding]:
    return [step_change(before, after)] + cause_changes(before_findings, after_findings)


COMPARE_IDS = frozenset({"job.compare-step", "job.compare-cause"})
