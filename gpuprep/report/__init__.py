"""Rendering of check results: a terminal report and a versioned JSON document."""
from __future__ import annotations

import json
from collections import Counter
from typing import List, Optional

from .. import __version__
from ..rules import SEVERITIES, Finding, worst
from ..snapshot import Snapshot

CHECK_SCHEMA = "gpuprep.check/1"


def summary(findings: List[Finding]) -> dict:
    counts = Counter(f.severity for f in findings)
    return {s: counts.get(s, 0) for s in SEVERITIES}


def check_document(snapshot: Snapshot, findings: List[Finding], waived: Optional[List[Finding]] = None) -> dict:
    """`waived`: what --skip/--only removed, counted and named so a filter never hides a failure silently."""
    waived = waived or []
    return {"schema": CHECK_SCHEMA, "gpuprep_version": __version__, "verdict": worst(findings),
            "summary": summary(findings), "findings": [f.to_dict() for f in findings],
            "waived": {"summary": summary(waived), "ids": sorted({f.id for f in waived if f.severity in ("fail", "warn")})},
            "snapshot": snapshot.to_dict()}


def to_json(document: dict) -> str:
    return json.dumps(document, indent=2)
