"""dcgm.*: NVIDIA DCGM's own verdict where the host has DCGM (`check --deep` runs `dcgmi diag -r N` and
`dcgmi health -c`, or their `-j` captures are given). Each finding names DCGM's test and carries DCGM's message; a
host without DCGM is information, never a failure."""
from __future__ import annotations

from . import Finding, host, rule

_SEVERITY = {"Fail": "fail", "Warn": "warn"}
_REMEDY = ("Follow DCGM's message for this test; rerun `dcgmi diag -r 3` after a GPU reset, and drain the node while it "
           "fails")


@rule("dcgm.diag")
def diag(snap, ctx):
    dcgm = snap.dcgm
    if dcgm.missing:
        return [Finding("dcgm.diag", "info", host(snap), f"DCGM diagnostics not run: {dcgm.missing}",
                        {"reason": dcgm.missing})]
    if not dcgm.tests:
        return []
    findings = []
    for test in dcgm.tests:
        severity = _SEVERITY.get(test.status)
        if severity:
            where = f" (GPUs {test.gpus})" if test.gpus else ""
            words = (test.messages or [f"{test.status}"])[0]
            findings.append(Finding("dcgm.diag", severity, f"DCGM {test.name}{where}", words[:300],
                                    {"test": test.name, "category": test.category, "status": test.status,
                                     "messages": test.messages, "dcgm_version": dcgm.version, "level": dcgm.level},
                                    _REMEDY, "dcgmi diag"))
    if not findings:
        ran = [t for t in dcgm.tests if t.status == "Pass"]
        findings.append(Finding("dcgm.diag", "pass", host(snap), f"DCGM diagnostics: {len(ran)} tests passed",
                                {"dcgm_version": dcgm.version, "level": dcgm.level,
                                 "skipped": [t.name for t in dcgm.tests if t.status == "Skip"]}, source="dcgmi diag"))
    return findings


_HEALTH = {"failure": "fail", "warning": "warn", "healthy": "pass"}


@rule("dcgm.health")
def health(snap, ctx):
    dcgm = snap.dcgm
    if not dcgm.health:
        return []
    severity = _HEALTH.get(dcgm.health.lower(), "warn")
    return [Finding("dcgm.health", severity, host(snap), f"DCGM health watches: {dcgm.health}",
                    {"incidents": dcgm.incidents}, None if severity == "pass" else
                    "Read the incidents (`dcgmi health -c -v`) and act on the system DCGM names", "dcgmi health")]
