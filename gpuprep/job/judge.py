"""Pure verdict over a training job's facts (job/facts.py), optionally joined with the node's snapshot: why the
GPUs are under-used, each cause a registered `job.*` id with its evidence and the fix, thresholds from
data/job-thresholds.csv. No I/O: the same rules judge traces (diagnose) and samples of a running job (watch)."""
from __future__ import annotations

import functools
import statistics
from dataclasses import dataclass
from typing import TYPE_CHECKING, Callable, Dict, List, Optional

from ..rules import Finding, declared, registrar
from .facts import JobFacts, RankFacts, WatchFacts, WatchRank

if TYPE_CHECKING:
    from ..snapshot import Snapshot


@functools.lru_cache(maxsize=None)
def thresholds() -> Dict[str, tuple]:
    """name -> (value, source), from data/job-thresholds.csv."""
    from ..knowledge import _rows
    return {row["name"]: (float(row["value"]), row["source"]) for row in _rows("job-thresholds.csv")}


def limit(name: str) -> float:
    return thresholds()[name][0]


def source(name: str) -> str:
    return thresholds()[name][1]


@dataclass
class Job:
    """What every job rule reads: the ranks of its traces (diagnose) or of a watch (watch), and the node's facts
    when the user gave them. A rule for one kind of facts finds no ranks of the other."""
    facts: JobFacts
    node: Optional[Snapshot] = None
    watch: Optional[WatchFacts] = None


JOB_RULES: List[Callable[[Job], List[Finding]]] = []

# the fixes, worded once for a cause whether a trace or a running job showed it
REMEDY = {
    "straggler": "Look at what differs on this rank: its GPU's clocks and throttle reasons (`gpuprep check`), its "
                 "data shard, its CPU binding (`gpuprep plan`)",
    "memory": "Activation checkpointing (torch.utils.checkpoint), mixed precision, a smaller micro-batch with "
              "gradient accumulation",
}
job_rule = registrar(JOB_RULES)


def judge(job: Job) -> List[Finding]:
    """Every job rule's findings, each cause with the gain removing it would buy, the largest first."""
    found = [f for fn in JOB_RULES for f in declared(fn, fn(job))]
    ranks = {_who(r): r for r in job.facts.ranks}
    for f in found:
        _gain(f, ranks.get(f.subject))
    from ..rules import SEVERITY_RANK
    return sorted(found, key=lambda f: (SEVERITY_RANK[f.severity], -(f.evidence.get("gain_ms_per_step") or 0)))


# the part of a step each cause holds (metrics.exposed): what removing it would save at most
_GAIN_OF = {"job.dataloader": "dataloader", "job.host-sync": "host_sync", "job.comm-exposed": "comm",
            "job.h2d-pageable": "h2d_pageable", "job.launch-bound": "host_other"}


def _gain(finding: Finding, rank: Optional[RankFacts]) -> None:
    if rank is None or not rank.step_ms or finding.severity not in ("warn", "fail"):
        return
    if finding.id == "job.gpu-idle" and rank.step_idle_pct is not None:
        ms = rank.step_ms * rank.step_idle_pct / 100
    elif finding.id in _GAIN_OF and rank.exposed_ms:
        ms = rank.exposed_ms.get(_GAIN_OF[finding.id])
    else:
        return
    if ms is not None:
        finding.evidence["gain_ms_per_step"] = round(ms, 2)
        finding.evidence["gain_pct_of_step"] = round(100 * ms / rank.step_ms, 1)
        finding.title += f"; removing it saves up to {ms:.1f} ms of the {rank.step_ms:.1f} ms step ({100 * ms / rank.step_ms:.0f}%)"


def _who(rank: RankFacts) -> str:
    return f"rank {rank.rank}" if rank.rank is not None else rank.source.rsplit("/", 1)[-1]


def _median(values) -> Optional[float]:
    known = [v for v in values if v is not None]
    return statistics.median(known) if known else None


def _watched(job: Job) -> List[WatchRank]:
    return job.watch.ranks if job.watch else []


def _transport_note(job: Job) -> Optional[str]:
    node = job.node
    if not node:
        return None
    env = node.env or {}
    ib = [d.name for d in node.rdma_devices or [] if (d.link_layer or "").lower() == "infiniband"]
    if ib and (env.get("NCCL_IB_DISABLE") == "1" or env.get("NCCL_NET", "").lower() == "socket"):
        return (f"the node has InfiniBand ({', '.join(ib[:4])}) but NCCL is set to sockets "
                f"(NCCL_IB_DISABLE={env.get('NCCL_IB_DISABLE')}, NCCL_NET={env.get('NCCL_NET')})")
    return None


from .rules import across, live, trace  # noqa: E402,F401 (registers the job rules, by the source they read)
from .compare import COMPARE_IDS  # noqa: E402 (the comparison's ids are job ids too)

JOB_IDS = frozenset(i for fn in JOB_RULES for i in fn.ids) | COMPARE_IDS | across.ACTION_IDS
