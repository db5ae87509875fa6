"""Pure judgement: snapshot -> findings. No I/O anywhere below this package (the knowledge base
is data shipped in the package). The same rules judge a live host, a snapshot file and captures."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Callable, Dict, Iterable, Iterator, List, Optional, Sequence

if TYPE_CHECKING:       # the snapshot's 24 dataclasses cost a start-up (diagnose's) that judges no snapshot
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
    repair: Optional[str] = None       # the action, where the check's own table gives one per case (ACTIONS)

    @property
    def area(self) -> str:
        return self.id.split(".", 1)[0]

    @property
    def action(self) -> str:
        """What a machine should do about it, from a small documented set (ACTIONS), beside the free-text remedy:
        the rule's own choice, else the check's row in ACTION_BY_ID. Never read from a remedy, which can hold a
        node's words (an HCA named "reboot")."""
        if self.severity in ("pass", "info"):
            return "none"
        return self.repair or action_for(self.id)

    def to_dict(self) -> dict:
        return {"id": self.id, "severity": self.severity, "subject": self.subject, "title": self.title,
                "evidence": self.evidence, "remedy": self.remedy, "source": self.source, "action": self.action}


# A failing or warning finding's repair action: a closed, public set (docs/checks.md), gpud-style.
ACTIONS = ("none", "replace-hardware", "reboot", "reset-gpu", "upgrade-driver", "reapply", "drain", "fix-config")
# each check's action; an id not named takes its area's. Rules whose action depends on the case (an Xid's
# resolution, why NVML is down) set Finding.repair from their own tables.
AREA_ACTION = {"burnin": "drain", "dcgm": "drain", "driver": "reboot", "sys": "reapply", "container": "reapply"}
ACTION_BY_ID = {
    "compat.driver-gpu": "upgrade-driver", "compat.torch-driver": "upgrade-driver",
    "compat.toolkit-driver": "upgrade-driver", "compat.cudnn-cuda": "upgrade-driver",
    "container.docker-missing": "fix-config", "container.gpu-smoke": "fix-config",
    "container.nvidia-runtime-missing": "reapply", "container.nccl-limits": "fix-config",
    "dcgm.health": "fix-config",
    "driver.mixed": "reboot", "driver.not-probed": "reboot",
    "fabric.manager-version": "reapply",
    "gpu.clock-throttle": "drain", "gpu.ecc-disabled": "reboot", "gpu.ecc-uncorrectable": "reset-gpu",
    "gpu.fabric": "reboot", "gpu.init-failed": "replace-hardware", "gpu.pcie-width": "replace-hardware",
    "gpu.pcie-degraded": "replace-hardware", "gpu.persistence-off": "reapply", "gpu.reset-required": "reboot",
    "gpu.row-remap": "reset-gpu", "gpu.sensor-unreadable": "reset-gpu", "gpu.retired-pages": "replace-hardware",
    "gpu.unreachable": "replace-hardware", "gpu.temperature": "drain", "gpu.app-clocks-below-max": "reapply",
    "gpu.xid": "drain", "gpu.sxid": "drain",
    "net.ib-port-down": "fix-config", "net.ib-rate": "replace-hardware",
    "sys.pcie-aer": "replace-hardware", "sys.ssh-password-auth": "reapply", "sys.ssh-root-login": "reapply",
    "topo.nvlink-inactive": "replace-hardware",
    "burnin.rendezvous": "fix-config", "burnin.setup": "fix-config", "burnin.slow-run": "fix-config",
    "burnin.memory": "drain", "burnin.throttle": "drain", "burnin.gpu-lost": "drain",
}


def action_for(check_id: str) -> str:
    area = check_id.split(".", 1)[0]
    return ACTION_BY_ID.get(check_id) or AREA_ACTION.get(area, "fix-config")


# Which action a remedy of a rule's own table asks for (never a remedy built from a node's words): the most
# drastic first.
_ACTION_PATTERNS = (
    ("replace-hardware", r"\bRMA\b|reseat|replace the (gpu|card|cable|transceiver)"),
    ("reboot", r"\breboot\b"),
    ("reset-gpu", r"nvidia-smi -r\b|reset (it|the gpu)"),
    ("upgrade-driver", r"install nvidia driver|driver >=|upgrade the driver"),
    ("reapply", r"gpuprep apply"),
    ("drain", r"\bdrain\b"),
)


def action_of(template: str) -> str:
    """The action a rule's own remedy template asks for (case-insensitive: "RMA" is written in capitals)."""
    import re
    return next((action for action, pattern in _ACTION_PATTERNS if re.search(pattern, template, re.I)), "fix-config")


@dataclass
class Context:
    """What a rule may know besides the snapshot: the chosen profile and the user's intent."""
    profile: Dict[str, Any] = field(default_factory=dict)
    require_gpu: bool = False


Rule = Callable[["Snapshot", Context], Iterable[Finding]]
RULES: List[Rule] = []


def registrar(target: List[Callable]) -> Callable[..., Callable[[Callable], Callable]]:
    """A decorator factory registering rules in `target`, each with the ids of every finding it may report: the
    registry of ids is these (rules/ids.py), and a rule reporting an id it did not register is a bug (declared())."""
    def register_with(*ids: str) -> Callable[[Callable], Callable]:
        def register(fn: Callable) -> Callable:
            fn.ids = frozenset(ids)     # type: ignore[attr-defined]
            target.append(fn)
            return fn
        return register
    return register_with


rule = registrar(RULES)     # @rule("gpu.xid", "gpu.sxid"): a host rule and the ids it reports


class UndeclaredId(AssertionError):
    """A rule reported a finding id it did not register: a bug in gpuprep, never a verdict."""


def declared(fn, findings: Iterable[Finding]) -> List[Finding]:
    """The findings of `fn`, each checked against the ids it registered."""
    findings = list(findings)
    for f in findings:
        if f.id not in fn.ids:
            raise UndeclaredId(f"{fn.__module__}.{fn.__name__} reported {f.id!r}, which it did not register")
    return findings


def host(snapshot: Snapshot) -> str:
    return snapshot.system.hostname or "host"


def gpu_subject(gpu: Gpu) -> str:
    if gpu.index is None:
        return f"GPU {gpu.pci_bus_id}" if gpu.pci_bus_id else "GPU (not named in the capture)"
    return f"GPU{gpu.index}" + (f" ({gpu.pci_bus_id})" if gpu.pci_bus_id else "")


def gpu_ref(gpu: Gpu) -> str:
    """What `nvidia-smi -i` takes for this GPU, ready for a command line: its index, else its bus id (the node's
    words, shell-quoted: copying a remedy must never run what a node chose to call its GPU)."""
    if gpu.index is not None:
        return str(gpu.index)
    return shell_word(gpu.pci_bus_id) if gpu.pci_bus_id else "<gpu>"


def shell_word(text: str) -> str:
    """`text` as one shell word (shlex.quote): node-supplied names placed in a remedy's command."""
    import shlex
    return shlex.quote(text)


# modules of this package that hold no host rules: the registry of ids and the fleet's drift (its facts are a table)
_NOT_AREAS = frozenset({"ids", "drift"})


def _load_areas() -> None:
    """Import every rule module of this package (each registers its rules as it loads): found by the package,
    so a new rules/foo.py runs without being added to any list."""
    import importlib
    import pkgutil
    for module in pkgutil.iter_modules(__path__):
        if module.name not in _NOT_AREAS:
            importlib.import_module(f"{__name__}.{module.name}")


def evaluate(snapshot: Snapshot, context: Optional[Context] = None, skip: Sequence[str] = (),
             only: Sequence[str] = ()) -> List[Finding]:
    """Every finding for the snapshot, worst first; `skip` waives ids (or whole areas), `only`
    keeps the named areas (or ids)."""
    return select(judge_all(snapshot, context), skip, only)[0]


def judge_all(snapshot: Snapshot, context: Optional[Context] = None) -> List[Finding]:
    _load_areas()
    context = context or Context()
    findings: List[Finding] = []
    for fn in RULES:
        findings.extend(declared(fn, fn(snapshot, context)))
    return sorted(findings, key=lambda f: (SEVERITY_RANK[f.severity], f.id, f.subject))


def check_filters(skip: Sequence[str], only: Sequence[str]) -> None:
    """BadInput naming the first skip/only value that is no check id or area, or a pair of filters that leaves
    nothing to judge."""
    from ..errors import bad_argument
    from .ids import areas, check_ids
    known, named_areas = check_ids(), areas()
    for argument, names in (("skip", skip), ("only", only)):
        for name in names:
            if name not in known and name not in named_areas:
                import difflib
                close = difflib.get_close_matches(name, sorted(known | named_areas), n=3, cutoff=0.75)
                hint = f"did you mean {' or '.join(close)}? " if close else ""
                raise bad_argument(argument, f"{name!r} is no check id or area ({hint}areas: "
                                             f"{', '.join(sorted(named_areas))}; ids: docs/checks.md)")
    if only:
        kept = {i for i in known if any(i == n or i.split('.', 1)[0] == n for n in only)}
        if all(any(i == n or i.split('.', 1)[0] == n for n in skip) for i in kept):
            raise bad_argument("only", f"{','.join(only)} with skip {','.join(skip)} leaves no check to run")


def select(findings: List[Finding], skip: Sequence[str], only: Sequence[str]):
    """(kept, waived): the findings the filters keep, and the ones they remove."""
    kept, waived = [], []
    for f in findings:
        chosen = not _matches(f, skip) and (not only or _matches(f, only))
        (kept if chosen else waived).append(f)
    return kept, waived


def _matches(finding: Finding, names: Sequence[str]) -> bool:
    return any(finding.id == n or finding.area == n for n in names)


def worst(findings: Iterable[Finding]) -> str:
    ranks = [SEVERITY_RANK[f.severity] for f in findings]
    return SEVERITIES[min(ranks)] if ranks else "pass"


def not_judged(snapshot: Snapshot) -> List[str]:
    """The whole sides of a host that no rule could judge, each with why: a headline says them, never "OK"."""
    if snapshot.gpus:
        return []
    from .driver import nvml_problem
    nvml = snapshot.nvml
    why = nvml_problem(nvml.reason) if nvml and nvml.available is False else "no GPU facts in the input"
    return [f"the GPUs ({why})"]


def check_verdict(findings: List[Finding], snapshot: Snapshot) -> str:
    """The worst finding; info (never pass) when nothing was judged or a whole side was not."""
    verdict = worst(findings) if findings else "info"
    return "info" if verdict == "pass" and not_judged(snapshot) else verdict


def all_gpus(snapshot: Snapshot) -> Iterator[Gpu]:
    yield from snapshot.gpus or []
