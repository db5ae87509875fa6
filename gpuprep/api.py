"""gpuprep as a library: what the commands do, called with plain arguments, returning typed results and raising
gpuprep's own exceptions (errors.BadInput for input that cannot be used, errors.GpuprepError for the rest), worded
without command-line flags. The CLI and the node probe call these; so can a Python user or a test:

    from gpuprep import api
    result = api.check(sources=["nvidia-smi-q.txt"])          # or api.check() for this host
    if result.verdict == "fail":
        for finding in result.failed:
            print(finding.id, finding.subject, finding.remedy)
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Dict, List, Optional, Sequence, Set

from .errors import BadInput
from .rules import Finding, worst
from .snapshot import Snapshot


@dataclass
class CheckResult:
    """One host judged: its facts, the findings kept, and the ones a skip/only filter removed."""
    snapshot: Snapshot
    findings: List[Finding]
    waived: List[Finding] = field(default_factory=list)

    @property
    def verdict(self) -> str:
        """fail, warn, info or pass: the worst finding kept."""
        return worst(self.findings)

    @property
    def failed(self) -> List[Finding]:
        return [f for f in self.findings if f.severity == "fail"]

    def document(self) -> dict:
        """The versioned JSON document `gpuprep check --json` prints."""
        from .report import check_document
        return check_document(self.snapshot, self.findings, self.waived)


def snapshot(sources: Sequence[str] = (), *, root: str = "/", docker: bool = True, deep: bool = False,
             allow_mixed: bool = False) -> Snapshot:
    """This host's facts, or the facts in captures of one host (`sources`: nvidia-smi, topo -m, numactl, lscpu,
    kernel logs, snapshots; sniffed by content). `deep` also starts containers (the GPU smoke test)."""
    if deep and (sources or not docker):
        raise BadInput("the deep checks start containers on this host: not with captures, nor without Docker")
    if sources:
        from .importers import import_files
        return import_files(list(sources), allow_mixed)
    from .probe import collect
    return collect(root=root, docker=docker, deep=deep)


def profile(name_or_path: Optional[str]) -> Dict[str, Any]:
    """A node profile (dev, training, inference, or a TOML file); {} for none."""
    if not name_or_path:
        return {}
    from .profiles import load
    return load(name_or_path)


def check(sources: Sequence[str] = (), *, facts: Optional[Snapshot] = None, profile_name: Optional[str] = None,
          require_gpu: bool = False, skip: Sequence[str] = (), only: Sequence[str] = (), root: str = "/",
          docker: bool = True, deep: bool = False, allow_mixed: bool = False) -> CheckResult:
    """Judge one host: `facts` if given, else `sources` (captures), else this host. `skip`/`only` take check ids
    or areas (gpu, driver, ...); what they remove is returned as `waived`, never dropped silently."""
    from .rules import Context, check_filters, judge_all, select
    try:
        check_filters(skip, only)
    except ValueError as exc:
        raise BadInput(str(exc).replace("--skip ", "skip ").replace("--only ", "only ")) from None
    context = Context(profile=profile(profile_name), require_gpu=require_gpu)
    snap = facts if facts is not None else snapshot(sources, root=root, docker=docker, deep=deep,
                                                   allow_mixed=allow_mixed)
    kept, waived = select(judge_all(snap, context), skip, only)
    return CheckResult(snap, kept, waived)


def plan(facts: Optional[Snapshot] = None, *, sources: Sequence[str] = (), ranks: Optional[int] = None,
         mode: str = "exclusive", visible: Optional[str] = None, allowed: Optional[Set[int]] = None):
    """A per-rank launch plan (plan.LaunchPlan) for `facts`, captures, or this host. `visible` is
    CUDA_VISIBLE_DEVICES as written (indexes or UUIDs); `allowed` the CPUs the job may use."""
    from .plan import make_plan, visible_gpus
    if facts is None and sources:
        from .importers import import_files
        facts = import_files(list(sources), allow_mixed=True)
    if facts is None:
        from .probe import topology_facts
        facts = topology_facts(uuids=bool(visible) and not visible.replace(",", "").strip().isdigit())
    return make_plan(facts, nproc=ranks, mode=mode, visible=visible_gpus(visible, facts), allowed=allowed)


def compat(driver: str, *, cuda: Optional[str] = None, cudnn: Optional[str] = None, torch: Optional[str] = None,
           gpu: Optional[str] = None, cc: Optional[str] = None) -> List[Finding]:
    """Will this driver run this CUDA / cuDNN / PyTorch wheel on this GPU? No host needed."""
    from .rules.compat import judge_combination
    return judge_combination(driver, cuda, cudnn, torch, gpu, cc)
