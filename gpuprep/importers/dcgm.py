"""NVIDIA DCGM captures: `dcgmi diag -r N -j` (JSON), its text table (DCGM 3.x and 4.x layouts), and
`dcgmi health -c [-j]`. The live `check --deep` reads the same JSON through these functions."""
from __future__ import annotations

import json
import re
from typing import Any, List, Optional

from ..snapshot import Dcgm, DcgmTest, Snapshot

_STATUS = re.compile(r"^(Pass|Fail|Warn|Skip)\b", re.I)


def looks_like_diag_json(text: str) -> bool:
    return text.lstrip().startswith("{") and '"DCGM GPU Diagnostic"' in text[:200]


def looks_like_health_json(text: str) -> bool:
    return text.lstrip().startswith("{") and '"Health Monitor Report"' in text and '"body"' in text


def looks_like_diag_table(text: str) -> bool:
    return bool(re.search(r"^\|\s*Diagnostic\s*\|\s*Result\s*\|", text, re.M))


def _messages(result: dict) -> List[str]:
    out = [str(result["info"])] if result.get("info") else []
    for warning in result.get("warnings") or []:
        out.append(str(warning.get("message") if isinstance(warning, dict) else warning))
    return out


def _test_from_json(test: dict, category: Optional[str]) -> DcgmTest:
    results = [r for r in test.get("results") or [] if isinstance(r, dict)]
    statuses = [str(r.get("status", "")) for r in results]
    status = next((s for s in ("Fail", "Warn", "Pass", "Skip") if s in statuses), statuses[0] if statuses else "")
    gpus = ",".join(str(r["gpu_ids"]) for r in results if r.get("gpu_ids") not in (None, ""))
    messages = [m for r in results if r.get("status") in ("Fail", "Warn") for m in _messages(r)]
    return DcgmTest(name=str(test.get("name")), status=status, category=category, gpus=gpus or None,
                    messages=messages or None)


def diag_from_json(data: Any) -> Dcgm:
    """DCGM 3.x's `-j` document: test_categories -> tests -> results (status, gpu_ids, info, warnings)."""
    body = data.get("DCGM GPU Diagnostic") if isinstance(data, dict) else None
    if not isinstance(body, dict) or not isinstance(body.get("test_categories"), list):
        raise ValueError("no 'DCGM GPU Diagnostic' test_categories")
    tests = [_test_from_json(test, category.get("category")) for category in body["test_categories"]
             if isinstance(category, dict) for test in category.get("tests") or [] if isinstance(test, dict)]
    metadata = data.get("Metadata") if isinstance(data.get("Metadata"), dict) else {}
    return Dcgm(version=metadata.get("DCGM Version"), tests=tests)


def import_diag_json(text: str, origin: str) -> Snapshot:
    return Snapshot(sources=[origin], dcgm=diag_from_json(json.loads(text)))


def _cells(line: str) -> Optional[tuple]:
    """(name, value, the value's chunk): dcgmi cuts a long message into chunks as wide as the column less its
    padding (one space before, two after), mid-word or not, so the chunks joined as printed give the message."""
    parts = line.split("|")
    if len(parts) != 4 or parts[0] or parts[3].strip():
        return None
    return parts[1].strip(), parts[2].strip(), parts[2][1:-2]


def _test_row(name: str, value: str, category: Optional[str]) -> DcgmTest:
    status = _STATUS.match(value).group(1).title()
    return DcgmTest(name=name, status=status, category=category,
                    gpus=value.split("-", 1)[1].strip() if "-" in value else None)


class _Table:
    """The text table read row by row: '-----  Category  ---' rows, 'Test | Pass/Fail ...' rows, 'Warning'/'Info'
    rows and their continuation rows; DCGM 4.x adds 'GPUn: Pass' rows per GPU."""

    def __init__(self):
        self.dcgm, self.tests = Dcgm(), []
        self.category = self.current = self.field = None

    def row(self, line: str) -> None:
        heading = re.match(r"^[|+]-+\s+(\w[\w ]*?)\s+-+\+", line)
        if heading:
            self.category, self.current = heading.group(1), None
            return
        cells = _cells(line)
        if cells is None:
            return
        name, value, chunk = cells
        if self.category == "Metadata":
            self.dcgm.version = value if name == "DCGM Version" else self.dcgm.version
        elif name in ("Warning", "Info"):
            self.field = name
            self._message(chunk, new=True)
        elif not name and not re.match(r"GPU\d+:", value):
            self._message(chunk, new=False)
        elif name and name != "Diagnostic" and _STATUS.match(value):
            self.current, self.field = _test_row(name, value, self.category), None
            self.tests.append(self.current)

    def _message(self, chunk: str, new: bool) -> None:
        if self.field != "Warning" or self.current is None or (not new and not self.current.messages):
            return
        messages = self.current.messages or []
        self.current.messages = messages + [chunk] if new else messages[:-1] + [messages[-1] + chunk]


def diag_from_table(text: str) -> Dcgm:
    table = _Table()
    for line in text.splitlines():
        table.row(line)
    for test in table.tests:
        test.messages = [" ".join(m.split()) for m in test.messages] if test.messages else None
    table.dcgm.tests = table.tests
    return table.dcgm


def import_diag_table(text: str, origin: str) -> Snapshot:
    return Snapshot(sources=[origin], dcgm=diag_from_table(text))


def _strings(value: Any) -> List[str]:
    """Every message-like string below a JSON value (incidents sit at varying depths across DCGM versions)."""
    if isinstance(value, dict):
        return [s for k, v in value.items() for s in ([str(v)] if k in ("message", "error") and isinstance(v, str)
                                                      else _strings(v))]
    if isinstance(value, list):
        return [s for v in value for s in _strings(v)]
    return []


def health_from_json(data: Any) -> Dcgm:
    body = data.get("body") if isinstance(data, dict) else None
    if not isinstance(body, dict):
        raise ValueError("no health report body")
    overall = (body.get("Overall Health") or {}).get("value")
    return Dcgm(health=str(overall) if overall else None, incidents=_strings(body) or None)


def import_health_json(text: str, origin: str) -> Snapshot:
    return Snapshot(sources=[origin], dcgm=health_from_json(json.loads(text)))


_HEALTH_WORDS = ("Healthy", "Warning", "Failure", "")
_OVERALL = re.compile(r"Overall Health\s*(?::|\|)\s*(\w+)")


def looks_like_health_table(text: str) -> bool:
    return "Health Monitor Report" in text[:2000] and bool(_OVERALL.search(text))


def health_from_table(text: str) -> Dcgm:
    """`dcgmi health -c` as a table, in either layout: 'GPU ID: 0 | Warning' rows followed by 'PCIe system: Warning -
    ...' message rows (DCGM's user guide), or '-> Power system | Warning' rows followed by the message (later
    versions). A message wrapped over rows is joined; a status word alone is not a message."""
    incidents: List[str] = []
    current: List[str] = []
    label = ""

    def flush():
        if current:
            message = " ".join(current)
            incidents.append(f"{label}: {message}" if label.endswith("system") else message)
            current.clear()

    for line in text.splitlines():
        parts = line.split("|")
        if len(parts) != 4:
            flush()                                 # a border row ends a message
            continue
        left, right = parts[1].strip(), parts[2].strip()
        if "Overall Health" in left + right or "Health Monitor Report" in left:
            continue
        if right in _HEALTH_WORDS:
            flush()
            label = left.lstrip("-> ").strip() if left else label
            continue
        if left:
            flush()
            label = left.lstrip("-> ").strip()
        current.append(right)
    flush()
    return Dcgm(health=_OVERALL.search(text).group(1), incidents=incidents or None)


def import_health_table(text: str, origin: str) -> Snapshot:
    return Snapshot(sources=[origin], dcgm=health_from_table(text))
