"""NVIDIA DCGM captures: `dcgmi diag -r N -j` (JSON), its text table (DCGM 3.x and 4.x layouts), and
`dcgmi health -c [-j]`. The live `check --deep` reads the same JSON through these functions."""
from __future__ import annotations

import json
import re
from typing import Any, List, Optional

from ..snapshot import Dcgm, DcgmTest, Snapshot

_STATUS = re.compile(r"^(Pass|Fail|Warn|Skip)\b", re.I)


_DIAG_KEYS = ("DCGM GPU Diagnostic", "DCGM Diagnostic")        # DCGM 2.x-3.x, 4.x


def looks_like_diag_json(text: str) -> bool:
    return text.lstrip().startswith("{") and any(f'"{key}"' in text[:200] for key in _DIAG_KEYS)


def looks_like_health_json(text: str) -> bool:
    return text.lstrip().startswith("{") and '"Health Monitor Report"' in text and '"body"' in text


def looks_like_diag_table(text: str) -> bool:
    return bool(re.search(r"^\|\s*Diagnostic\s*\|\s*Result\s*\|", text, re.M))


def _texts(value: Any) -> List[str]:
    """A message field: a string (3.x 'info'), or a list of strings or of {'message'|'warning': ...} (4.x)."""
    if isinstance(value, list):
        return [s for v in value for s in _texts(v)]
    if isinstance(value, dict):
        text = value.get("message", value.get("warning"))
        return [str(text)] if text else []
    return [str(value)] if value not in (None, "") else []


def _messages(result: dict) -> List[str]:
    return _texts(result.get("info")) + _texts(result.get("warnings"))


def _gpu(result: dict) -> Optional[str]:
    """3.x names the GPUs of a result ('gpu_ids'); 4.x names one entity (a GPU, or a CPU, NVSwitch...)."""
    if result.get("gpu_ids") not in (None, ""):
        return str(result["gpu_ids"])
    if result.get("entity_id") is not None:
        group = str(result.get("entity_group") or "GPU")
        return str(result["entity_id"]) if group == "GPU" else f"{group} {result['entity_id']}"
    return None


def _dicts(value: Any) -> List[dict]:
    """The objects of a JSON list; anything else (a damaged or foreign document) holds none."""
    return [v for v in value if isinstance(v, dict)] if isinstance(value, list) else []


_STATUSES = ("Fail", "Warn", "Pass", "Skip")        # DCGM's words, the worst first


def _status(value: Any) -> str:
    """DCGM's status words as DCGM writes them (Pass, Fail, Warn, Skip) whatever their case; any other word is kept,
    so that the rule can say it does not know it rather than pass it."""
    text = str(value if value is not None else "").strip()
    return next((s for s in _STATUSES if s.lower() == text.lower()), text)


def _test_from_json(test: dict, category: Optional[str]) -> DcgmTest:
    results = _dicts(test.get("results"))
    summary = test.get("test_summary") if isinstance(test.get("test_summary"), dict) else {}
    statuses = [_status(r.get("status")) for r in results] + [_status(summary.get("status"))]
    status = next((s for s in _STATUSES if s in statuses), next((s for s in statuses if s), ""))
    bad = [r for r in results if _status(r.get("status")) in ("Fail", "Warn")]
    gpus = ",".join(g for g in (_gpu(r) for r in (bad or results)) if g)
    messages = [m for r in bad for m in _messages(r)]
    if status in ("Fail", "Warn"):
        messages += _texts(summary.get("info")) + _texts(summary.get("warnings"))
    messages = list(dict.fromkeys(messages))          # 4.x repeats a result's warning in its test_summary
    return DcgmTest(name=str(test.get("name")), status=status, category=category, gpus=gpus or None,
                    messages=messages or None)


def diag_from_json(data: Any) -> Dcgm:
    """`dcgmi diag -j`: test_categories -> tests -> results (status; GPUs; info, warnings), as DCGM 2.x-3.x write it
    ('DCGM GPU Diagnostic', 'Metadata') and as 4.x does ('DCGM Diagnostic', one result per entity, a test_summary,
    warnings as objects, 'metadata')."""
    body = next((data[k] for k in _DIAG_KEYS if k in data), None) if isinstance(data, dict) else None
    if not isinstance(body, dict) or not isinstance(body.get("test_categories"), list):
        raise ValueError("no 'DCGM Diagnostic' test_categories")
    tests = [_test_from_json(test, category.get("category")) for category in _dicts(body["test_categories"])
             for test in _dicts(category.get("tests"))]
    old, new = data.get("Metadata"), data.get("metadata")
    version = (old or {}).get("DCGM Version") if isinstance(old, dict) else None
    version = version or ((new or {}).get("version") if isinstance(new, dict) else None)
    return Dcgm(version=str(version) if version else None, tests=tests)


def import_diag_json(text: str, origin: str) -> Snapshot:
    return Snapshot(sources=[origin], dcgm=diag_from_text(text))


def diag_from_text(text: str) -> Dcgm:
    """`dcgmi diag -j` output, whole or cut short: a cut document is read up to its last complete object (a test
    shown failing there is a failure seen) and marked truncated (the tests after the cut are unknown)."""
    try:
        return diag_from_json(json.loads(text))
    except ValueError:
        whole = closed_prefix(text)
        if whole is None:
            raise
    dcgm = diag_from_json(json.loads(whole))
    dcgm.truncated = True
    return dcgm


_CLOSERS = {"{": "}", "[": "]"}


def closed_prefix(text: str, limit: int = 1 << 24) -> Optional[str]:
    """A JSON document cut short, made whole: its text up to the last complete object or array, with the
    brackets still open there closed. None when nothing complete opens it."""
    stack: List[str] = []
    best: Optional[str] = None
    in_string = escaped = False
    for at, ch in enumerate(text[:limit]):
        if in_string:
            escaped, in_string = (False, True) if escaped else (ch == "\\", ch != '"')
            continue
        if ch == '"':
            in_string = True
        elif ch in _CLOSERS:
            stack.append(ch)
        elif ch in "}]" and stack:
            stack.pop()
            if stack:
                best = text[:at + 1] + "".join(_CLOSERS[c] for c in reversed(stack))
    return best if stack else None


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
    """dcgmi diag's table ends with a '+----+' border line: a table without it was cut, and its missing blocks may
    hold failures: what it shows is judged, and the rest is unknown (never 'the tests shown passed')."""
    lines = [line for line in text.splitlines() if line.strip()]
    dcgm = diag_from_table(text)
    dcgm.truncated = not lines or not re.fullmatch(r"\+[-+]+\+", lines[-1].strip()) or None
    return Snapshot(sources=[origin], dcgm=dcgm)


def _strings(value: Any) -> List[str]:
    """Every incident below a JSON value (they sit at varying depths across DCGM versions): a 'message' or 'error'
    string, or a system's 'overflow' list, the message DCGM wrapped at 54 characters ('PCIe system': {'value':
    'Warning', 'overflow': [...]}), joined back and named by its system."""
    if isinstance(value, list):
        return [s for v in value for s in _strings(v)]
    if not isinstance(value, dict):
        return []
    found = []
    for key, item in value.items():
        if key in ("message", "error") and isinstance(item, str):
            found.append(item)
        elif isinstance(item, dict) and isinstance(item.get("overflow"), list):
            found.append(f"{key}: " + " ".join(str(line).strip() for line in item["overflow"]))
        else:
            found += _strings(item)
    return found


def health_from_json(data: Any) -> Dcgm:
    body = data.get("body") if isinstance(data, dict) else None
    if not isinstance(body, dict):
        raise ValueError("no health report body")
    overall = body.get("Overall Health")
    overall = overall.get("value") if isinstance(overall, dict) else None
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
