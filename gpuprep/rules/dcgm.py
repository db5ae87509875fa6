"""dcgm.*: NVIDIA DCGM's own verdict where the host has DCGM (`check --deep` runs `dcgmi diag -r N` and
`dcgmi health -c`, or their `-j` captures are given). Each finding names DCGM's test and carries DCGM's message; a
host without DCGM is information, never a failure."""
from __future__ import annotations

from . import Finding, host, rule

_SEVERITY = {"Fail": "fail", "Warn": "warn"}
_REMEDY = ("Follow DCGM's message for this test; rerun `dcgmi diag -r 3` after a GPU reset, and drain the node while it "
           "fails")


def _test_finding(test, dcgm):
    """A failed or warned test as DCGM words it; a status DCGM does not write (damage, or a newer DCGM) is a warning,
    never a pass."""
    severity = _SEVERITY.get(test.status) or (None if test.status in ("Pass", "Skip", "") else "warn")
    if severity is None:
        return None
    where = f" (GPUs {test.gpus})" if test.gpus else ""
    words = (test.messages or [f"{test.status}" if test.status in _SEVERITY else
                               f"DCGM reported status {test.status!r}, which gpuprep does not know"])[0]
    return Finding("dcgm.diag", severity, f"DCGM {test.name}{where}", words[:300],
                   {"test": test.name, "category": test.category, "status": test.status,
                    "messages": test.messages, "dcgm_version": dcgm.version, "level": dcgm.level},
                   _REMEDY, "dcgmi diag")


@rule("dcgm.diag")
def diag(snap, ctx):
    dcgm = snap.dcgm
    if dcgm.missing:
        return [Finding("dcgm.diag", "info", host(snap), f"DCGM diagnostics not run: {dcgm.missing}",
                        {"reason": dcgm.missing})]
    findings = [f for f in (_test_finding(t, dcgm) for t in dcgm.tests or []) if f]
    incomplete = _incomplete(snap, dcgm)
    if incomplete:
        return findings + [incomplete]
    if dcgm.tests is None:
        return []
    ran = [t for t in dcgm.tests if t.status == "Pass"]
    evidence = {"dcgm_version": dcgm.version, "level": dcgm.level,
                "skipped": [t.name for t in dcgm.tests if t.status == "Skip"]}
    if findings:
        return findings
    if not ran:         # every test skipped, or none reported: DCGM proved nothing
        return [Finding("dcgm.diag", "info", host(snap), "DCGM diagnostics: no test passed or failed", evidence,
                        source="dcgmi diag")]
    return [Finding("dcgm.diag", "pass", host(snap), f"DCGM diagnostics: {len(ran)} tests passed", evidence,
                    source="dcgmi diag")]


def _incomplete(snap, dcgm):
    """DCGM that failed (a non-zero exit, a hang, no report) or a report cut short: a warning, and the tests it did
    not report are unknown, never passed."""
    why = dcgm.failed or ("the captured dcgmi diag table is cut short" if dcgm.truncated else None)
    if not why or any(t.status == "Fail" for t in dcgm.tests or []):
        return None         # a failed test explains dcgmi's exit (226), and the verdict is a failure already
    shown = [t.name for t in dcgm.tests or []]
    return Finding("dcgm.diag", "warn", host(snap), f"DCGM diagnostics did not complete: {why}",
                   {"reason": why, "tests_reported": shown, "level": dcgm.level},
                   "Run `dcgmi diag -r 1` by hand and read its error (is nv-hostengine running? `systemctl status "
                   "nvidia-dcgm`); the tests it did not report are unknown", "dcgmi diag")


_HEALTH = {"failure": "fail", "warning": "warn", "healthy": "pass"}


@rule("dcgm.health")
def health(snap, ctx):
    dcgm = snap.dcgm
    if not dcgm.health and dcgm.health_failed:
        unwatched = "watches not enabled" in dcgm.health_failed.lower()
        return [Finding("dcgm.health", "warn", host(snap), "DCGM health watches are not enabled: DCGM watches nothing"
                        if unwatched else "DCGM's health check gave no report", {"reason": dcgm.health_failed},
                        "Enable them once: `dcgmi health -s a` (they stay set in nv-hostengine until it restarts; the "
                        "first check needs 60 s of watching)" if unwatched else "Run `dcgmi health -c` by hand and "
                        "read its error (is nv-hostengine running? `systemctl status nvidia-dcgm`)", "dcgmi health")]
    if not dcgm.health:
        return []
    severity = _HEALTH.get(dcgm.health.lower(), "warn")
    return [Finding("dcgm.health", severity, host(snap), f"DCGM health watches: {dcgm.health}",
                    {"incidents": dcgm.incidents}, None if severity == "pass" else
                    "Read the incidents (`dcgmi health -c -v`) and act on the system DCGM names", "dcgmi health")]
