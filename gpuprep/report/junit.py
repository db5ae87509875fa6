"""JUnit XML of a check, fleet or burn-in document, as CI tools read it (Jenkins' junit-10.xsd): one
testsuite per host, one testcase per check id per host. fail -> <failure>; warn and info -> a passing
testcase whose <system-out> tells; waived by --skip/--only -> <skipped>; a host that could not be
checked -> an <error> testcase; fleet drift -> a "fleet drift" testsuite."""
from __future__ import annotations

import xml.etree.ElementTree as ET
from typing import Dict, List

from ..rules import SEVERITIES


def _lines(findings: List[dict]) -> str:
    out = []
    for f in findings:
        out.append(f"{f['severity'].upper()} {f['subject']}: {f['title']}")
        evidence = ", ".join(f"{k}={v}" for k, v in (f.get("evidence") or {}).items() if v is not None)
        if evidence:
            out.append(f"  evidence: {evidence}")
        if f.get("remedy"):
            out.append(f"  remedy: {f['remedy']}")
    return "\n".join(out)


class _Suite:
    def __init__(self, parent: ET.Element, name: str, timestamp: str, hostname: str = ""):
        self.element = ET.SubElement(parent, "testsuite", name=name, timestamp=timestamp)
        if hostname:
            self.element.set("hostname", hostname)
        self.counts = {"tests": 0, "failures": 0, "errors": 0, "skipped": 0}

    def case(self, classname: str, name: str, findings: List[dict]) -> None:
        case = ET.SubElement(self.element, "testcase", classname=classname, name=name, time="0")
        self.counts["tests"] += 1
        worst = min((f["severity"] for f in findings), key=SEVERITIES.index, default="pass")
        failing = [f for f in findings if f["severity"] == "fail"]
        if failing:
            self.counts["failures"] += 1
            ET.SubElement(case, "failure", type="fail", message=failing[0]["title"]).text = _lines(failing)
        if worst != "pass" and len(failing) != len(findings):
            ET.SubElement(case, "system-out").text = _lines([f for f in findings if f["severity"] != "fail"])

    def skipped(self, classname: str, name: str, message: str) -> None:
        case = ET.SubElement(self.element, "testcase", classname=classname, name=name, time="0")
        ET.SubElement(case, "skipped", message=message)
        self.counts["tests"] += 1
        self.counts["skipped"] += 1

    def error(self, classname: str, name: str, message: str) -> None:
        case = ET.SubElement(self.element, "testcase", classname=classname, name=name, time="0")
        ET.SubElement(case, "error", type="unchecked", message=message).text = message
        self.counts["tests"] += 1
        self.counts["errors"] += 1

    def close(self) -> Dict[str, int]:
        for key, value in self.counts.items():
            self.element.set(key, str(value))
        return self.counts


def _by_id(findings: List[dict]) -> Dict[str, List[dict]]:
    out: Dict[str, List[dict]] = {}
    for f in findings:
        out.setdefault(f["id"], []).append(f)
    return dict(sorted(out.items()))


def _host_suite(root: ET.Element, host: str, entry: dict, timestamp: str) -> Dict[str, int]:
    suite = _Suite(root, host, timestamp, hostname=host)
    classname = f"gpuprep.check.{host}"
    if entry.get("status", "checked") != "checked":
        suite.error(classname, "host.checked", f"{entry['status']}: {entry.get('problem')}")
        return suite.close()
    check = entry["check"]
    for check_id, findings in _by_id(check["findings"]).items():
        suite.case(classname, check_id, findings)
    for check_id in check["waived"]["checks"]:
        if check_id not in {f["id"] for f in check["findings"]}:
            suite.skipped(classname, check_id, "waived by --skip/--only")
    return suite.close()


def render(document: dict) -> str:
    timestamp = document.get("generated_at", "")
    schema = document["schema"]
    root = ET.Element("testsuites", name=f"gpuprep {schema.split('/')[0].split('.')[-1]}")
    totals = []
    if schema.startswith(("gpuprep.burnin/", "gpuprep.diagnose/", "gpuprep.watch/")):
        kind = schema.split("/")[0].split(".")[-1]
        suite = _Suite(root, kind, timestamp)
        for check_id, findings in _by_id(document["findings"]).items():
            suite.case(f"gpuprep.{kind}", check_id, findings)
        totals.append(suite.close())
    elif schema.startswith("gpuprep.fleet/"):
        for host, entry in sorted(document["hosts"].items()):
            totals.append(_host_suite(root, host, entry, timestamp))
        suite = _Suite(root, "fleet drift", timestamp)
        drift_findings = document["drift"]["findings"]
        for fact in document["drift"]["facts"]:
            suite.case("gpuprep.drift", fact["id"], [f for f in drift_findings if f["id"] == fact["id"]])
        totals.append(suite.close())
    else:
        totals.append(_host_suite(root, document["host"], {"check": document}, timestamp))
    for key in ("tests", "failures", "errors"):
        root.set(key, str(sum(t[key] for t in totals)))
    if hasattr(ET, "indent"):     # Python >= 3.9; the node probe's zipapp may run on 3.8
        ET.indent(root)  # novermin (guarded by hasattr)
    return '<?xml version="1.0" encoding="UTF-8"?>\n' + ET.tostring(root, encoding="unicode") + "\n"
