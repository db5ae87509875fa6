"""Pure judgement: snapshot -> findings. No I/O anywhere below this package (the knowledge base
is data shipped in the package). The same rules judge a live host, a snapshot file and captures."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable, Dict, Iterable, Iterator, List, Optional, Sequence

from ..snapshot import Gpu, Snapshot

SEVERITIES = ("fail", "warn", "info", "pass")
SEVERITY_RANK = {s: i for i, s in enumerate(SEVERITIES)}


@dataclass
class Finding:
    id: str
    severity: str
    subject: str
    title: str
    evidence: Dict[str, Any] = field(default_factory=dict)
    remedy: Optional[str] = None
    source: Optional[str] = None

    @property
    def area(self) -> str:
        return self.id.split(".", 1)[0]

    def to_dict(self) -> dict:
        return {"id": self.id, "severity": self.severity, "subject": self.subject, "title": self.title,
                "evidence": self.evidence, "remedy": self.remedy, "source": self.source}


@dataclass
class Context:
    """What a rule may know besides the snapshot: the chosen profile and the user's intent."""
    profile: Dict[str, Any] = field(default_factory=dict)
    require_gpu: bool = False


Rule = Callable[[Snapshot, Context], Iterable[Finding]]
RULES: List[Rule] = []


def rule(fn: Rule) -> Rule:
    RULES.append(fn)
    return fn


def host(snapshot: Snapshot) -> str:
    return snapshot.system.hostname or "host"


def gpu_subject(gpu: Gpu) -> str:
    return f"GPU{gpu.index}" + (f" ({gpu.pci_bus_id})" if gpu.pci_bus_id else "")


def _load_areas() -> None:
    from . import compat, container, driver, env, gpu, numa, system, topology  # noqa: F401  (registration)


def evaluate(snapshot: Snapshot, context: Optional[Context] = None, skip: Sequence[str] = (),
             only: Sequence[str] = ()) -> List[Finding]:
    """Every finding for the snapshot, worst first; `skip` waives ids (or whole areas), `only`
    keeps the named areas (or ids)."""
    _load_areas()
    context = context or Context()
    findings: List[Finding] = []
    for fn in RULES:
        findings.extend(fn(snapshot, context))
    findings = [f for f in findings if not _matches(f, skip)]
    if only:
        findings = [f for f in findings if _matches(f, only)]
    return sorted(findings, key=lambda f: (SEVERITY_RANK[f.severity], f.id, f.subject))


def _matches(finding: Finding, names: Sequence[str]) -> bool:
    return any(finding.id == n or finding.area == n for n in names)


def worst(findings: Iterable[Finding]) -> str:
    ranks = [SEVERITY_RANK[f.severity] for f in findings]
    return SEVERITIES[min(ranks)] if ranks else "pass"


def all_gpus(snapshot: Snapshot) -> Iterator[Gpu]:
    yield from snapshot.gpus or []
