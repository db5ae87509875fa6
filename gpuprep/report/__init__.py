"""Documents and their renderers. Every command's result is one versioned envelope (`schema`,
`gpuprep_version`, `generated_at`, `verdict`, `summary`, then the command's own body); each output format
is one module here that renders such a document: terminal (text), JSON, JUnit XML, Prometheus text, HTML."""
from __future__ import annotations

import datetime as _dt
import json
from collections import Counter
from typing import TYPE_CHECKING, Dict, List, Optional

from .. import __version__
from ..formats import FORMATS  # noqa: F401 (render's formats, offered by the CLI)
from ..rules import SEVERITIES, Finding, check_verdict, not_judged, worst

if TYPE_CHECKING:       # the job's reports (diagnose, watch) start faster without the snapshot's dataclasses
    from ..snapshot import Snapshot

CHECK_SCHEMA = "gpuprep.check/1"
FLEET_SCHEMA = "gpuprep.fleet/1"
BURNIN_SCHEMA = "gpuprep.burnin/1"
ERROR_SCHEMA = "gpuprep.error/1"


PLAN_SCHEMA = "gpuprep.plan/1"
DIAGNOSE_SCHEMA = "gpuprep.diagnose/1"
WATCH_SCHEMA = "gpuprep.watch/1"


def summary(findings: List[Finding]) -> dict:
    counts = Counter(f.severity for f in findings)
    return {s: counts.get(s, 0) for s in SEVERITIES}


def envelope(schema: str, verdict: str, summary_: dict, **body) -> dict:
    return {"schema": schema, "gpuprep_version": __version__,
            "generated_at": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
            "verdict": verdict, "summary": summary_, **body}


def _waived(waived: List[Finding]) -> dict:
    return {"summary": summary(waived), "ids": sorted({f.id for f in waived if f.severity in ("fail", "warn")}),
            "checks": sorted({f.id for f in waived})}


def check_document(snapshot: Snapshot, findings: List[Finding], waived: Optional[List[Finding]] = None,
                   profile: Optional[str] = None) -> dict:
    """`waived`: what --skip/--only removed, counted and named so a filter never hides a failure silently;
    `profile`: the node profile judged against, named in every format. Nothing judged is 'info', never 'pass'."""
    waived = waived or []
    return envelope(CHECK_SCHEMA, check_verdict(findings, snapshot), summary(findings),
                    host=host_name(snapshot), profile=profile, not_judged=not_judged(snapshot),
                    findings=[f.to_dict() for f in findings],
                    waived=_waived(waived), snapshot=snapshot.to_dict())


def host_name(snapshot: Snapshot) -> str:
    for source in snapshot.sources:
        if source.startswith("ansible:"):
            return source.split(":", 1)[1]
    return snapshot.system.hostname or ", ".join(snapshot.sources) or "host"


def fleet_document(result) -> dict:
    """`result`: a fleet.FleetResult. Hosts that could not be checked count as failed hosts."""
    from ..snapshot import gpu_count
    hosts: Dict[str, dict] = {}
    for member in result.members:
        if member.snapshot is None:
            hosts[member.name] = {"status": member.status, "verdict": "fail", "problem": member.problem}
            continue
        findings, waived = result.findings[member.name], result.waived[member.name]
        doc = check_document(member.snapshot, findings, waived)
        hosts[member.name] = {"status": "checked", "verdict": doc["verdict"], "summary": doc["summary"],
                              "gpus": gpu_count(member.snapshot),      # None: not known, never 0
                              "driver": member.snapshot.software.driver_version,
                              "check": doc}
    for f in result.drift_findings:
        if f.subject in hosts:
            hosts[f.subject].setdefault("drift", []).append(f.id)
    fleet_findings = [f for fs in result.findings.values() for f in fs] + result.drift_findings
    verdicts = [h["verdict"] for h in hosts.values()] + [f.severity for f in result.drift_findings]
    verdict = min(verdicts, key=SEVERITIES.index) if verdicts else "pass"
    host_counts = Counter(h["verdict"] for h in hosts.values())
    return envelope(FLEET_SCHEMA, verdict,
                    {"hosts": len(hosts), "hosts_failed": host_counts.get("fail", 0),
                     "hosts_unchecked": sum(1 for h in hosts.values() if h["status"] != "checked"),
                     "hosts_warn": host_counts.get("warn", 0), **summary(fleet_findings)},
                    hosts=hosts, findings=grouped_findings(result), baseline=result.baseline,
                    drift={"facts": [d.to_dict() for d in result.drift],
                           "findings": [f.to_dict() for f in result.drift_findings]})


def grouped_findings(result) -> List[dict]:
    """The fleet's findings by id and severity, with the hosts each hit (worst first)."""
    from ..rules.drift import UNCHECKED
    groups: Dict[tuple, dict] = {}
    for member in result.members:
        if member.snapshot is None:
            check_id, severity, title = UNCHECKED
            groups.setdefault((check_id, severity), {"id": check_id, "severity": severity, "title": title,
                                                     "hosts": []})["hosts"].append(member.name)
            continue
        for f in result.findings[member.name]:
            if f.severity == "pass":
                continue
            entry = groups.setdefault((f.id, f.severity), {"id": f.id, "severity": f.severity, "title": f.title,
                                                           "hosts": []})
            if member.name not in entry["hosts"]:
                entry["hosts"].append(member.name)
    for f in result.drift_findings:
        groups.setdefault((f.id, f.severity), {"id": f.id, "severity": f.severity, "title": f.title,
                                               "hosts": []})["hosts"].append(f.subject)
    return sorted(groups.values(), key=lambda g: (SEVERITIES.index(g["severity"]), g["id"]))


def burnin_document(run, findings: List[Finding], backend: str, seconds: float) -> dict:
    """The versioned burn-in report: verdict, findings, and every rank's numbers."""
    import statistics

    def median(values):
        return round(statistics.median(values), 3) if values else None
    ranks = []
    for _, rank in sorted(run.ranks.items()):
        entry = dict(rank)
        entry["median_step_ms"] = median(rank.get("step_ms"))
        entry["median_compute_ms"] = median(rank.get("compute_ms"))
        ranks.append(entry)
    return envelope(BURNIN_SCHEMA, worst(findings), summary(findings), backend=backend,
                    world_size=run.world_size, nodes=run.nodes, requested_seconds=seconds,
                    wall_seconds=round(run.wall_seconds, 2),
                    # what the run took beyond the ranks' working time: start-up (interpreter, torch's import,
                    # rendezvous, the model's build) and teardown
                    startup_seconds=round(max(0.0, run.wall_seconds - seconds), 2),
                    findings=[f.to_dict() for f in findings], ranks=ranks)


def diagnose_document(facts, findings: List[Finding], node: Optional[Snapshot] = None) -> dict:
    """`facts`: job.facts.JobFacts. Each rank's numbers under `ranks`, the findings, and the node's name when the
    judgement joined its snapshot."""
    unjudged = _unjudged(findings)
    if facts.ranks and not any(r.gpu_kernels for r in facts.ranks):
        unjudged.append("the GPUs (no GPU activity in any trace)")
    verdict = worst(findings)
    return envelope(DIAGNOSE_SCHEMA, "info" if unjudged and verdict == "pass" else verdict, summary(findings),
                    not_judged=unjudged, findings=[f.to_dict() for f in findings],
                    ranks=facts.to_dict()["ranks"], node=host_name(node) if node is not None else None)


def compare_document(before: dict, after: dict, findings: List[Finding]) -> dict:
    """diagnose --compare: the two diagnoses whole, and the changes between them."""
    return envelope("gpuprep.compare/1", worst(findings), summary(findings), findings=[f.to_dict() for f in findings],
                    before=before, after=after)


def watch_document(facts, findings: List[Finding], node: Optional[Snapshot] = None) -> dict:
    """`facts`: job.facts.WatchFacts: each rank's samples, the notes on signals not read, the job's exit code."""
    unjudged = _unjudged(findings)
    verdict = worst(findings)
    return envelope(WATCH_SCHEMA, "info" if unjudged and verdict == "pass" else verdict, summary(findings),
                    not_judged=unjudged, findings=[f.to_dict() for f in findings],
                    node=host_name(node) if node is not None else None, **facts.to_dict())


def _unjudged(findings: List[Finding]) -> List[str]:
    """The job's sides no rule could judge (job.not-judged about the whole job), for the headline."""
    return [f.title.split(":")[0] for f in findings if f.id == "job.not-judged" and f.subject == "job"]


def compat_document(findings: List[Finding]) -> dict:
    return envelope("gpuprep.compat/1", worst(findings), summary(findings), findings=[f.to_dict() for f in findings])


def apply_document(playbook: str, check: bool, succeeded: bool, outcome) -> dict:
    """`outcome`: an ansible.runner.ApplyOutcome. verdict: pass when every host succeeded, else fail."""
    state = outcome.state
    hosts = {n: h.to_dict() for n, h in sorted(state.hosts.items())}
    return envelope("gpuprep.apply/1", "pass" if succeeded else "fail",
                    {"hosts": len(hosts), "hosts_failed": sum(1 for h in hosts.values() if h["failed"] or h["unreachable"]),
                     "hosts_changed": sum(1 for h in hosts.values() if h["changed"])},
                    playbook=playbook, check=check, ok=succeeded, artifacts=outcome.artifacts,
                    interrupted=state.interrupted, hosts=hosts)


def plan_document(plan) -> dict:
    """`plan`: a plan.LaunchPlan. `gpuprep launch --plan FILE` reads this document back."""
    findings = plan.findings
    return envelope(PLAN_SCHEMA, worst(findings) if findings else "pass", summary(findings), **plan.to_dict())


def error_document(message: str, exit_code: int) -> dict:
    return envelope(ERROR_SCHEMA, "error", {}, error=message, exit_code=exit_code)


def to_json(document: dict) -> str:
    return json.dumps(document, indent=2)


def render(document: dict, fmt: str, colour: bool = False, verbose: bool = False, drift_groups: bool = False) -> str:
    """The document in one of FORMATS. For text: ANSI colour, passing checks (`verbose`), and every group of
    hosts behind each drifting fact (`drift_groups`) instead of the odd hosts only. Every string in the document
    is first made safe for the format (report/sanitize.py): node-supplied text never reaches a renderer raw."""
    from .sanitize import CLEANERS, cleaned
    if fmt in CLEANERS:
        document = cleaned(document, CLEANERS[fmt])
    if fmt == "json":
        return to_json(document) + "\n"
    if fmt == "text":
        from .terminal import render_document
        return render_document(document, colour=colour, verbose=verbose, drift_groups=drift_groups)
    if fmt == "junit":
        from .junit import render as render_junit
        return render_junit(document)
    if fmt == "prometheus":
        from .prometheus import render as render_prometheus
        return render_prometheus(document)
    if fmt == "html":
        from .html import render as render_html
        return render_html(document)
    raise ValueError(f"unknown format {fmt!r}")
