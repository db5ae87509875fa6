"""Pure verdict over the per-rank results of a burn-in run."""
from __future__ import annotations

import statistics
from typing import List

from ..rules import Finding, worst
from . import RunResult

STRAGGLER_MARGIN = 0.25     # a rank whose compute step is 25% slower than the others' median


def _label(rank: dict) -> str:
    where = rank.get("device", "?")
    bus = f" {rank['pci_bus_id']}" if rank.get("pci_bus_id") else ""
    return f"rank {rank['rank']} ({rank.get('host', '?')} {where}{bus})"


def judge(run: RunResult) -> List[Finding]:
    findings: List[Finding] = []
    missing = [r for r in range(run.world_size) if r not in run.ranks]
    if run.timed_out:
        findings.append(Finding("burnin.hang", "fail", "run",
                                f"Burn-in did not finish within {run.wall_seconds:.0f} s and was killed",
                                {"missing_ranks": missing, "log": run.log_tail[-5:]},
                                "A rank hung in a collective: check NCCL_SOCKET_IFNAME, P2P/ACS settings and the kernel log"))
    culprit = run.root_cause_rank if run.root_cause_rank in missing else None
    for rank in missing:
        if culprit is not None and rank != culprit:
            findings.append(Finding("burnin.rank-aborted", "info", f"rank {rank}",
                                    f"rank {rank} was stopped after rank {culprit} failed"))
            continue
        findings.append(Finding("burnin.rank-failed", "fail", f"rank {rank}",
                                f"rank {rank} died" + (f" with exit code {run.root_cause_exit}"
                                                       if culprit is not None else " or did not complete the burn-in"),
                                {"exit_code": run.root_cause_exit if culprit is not None else run.exit_code,
                                 "log": run.log_tail[-5:]},
                                "Check the GPU and host behind this rank (`gpuprep check`, kernel log Xids)"))
    complete = [run.ranks[r] for r in sorted(run.ranks)]
    if len(complete) >= 2:
        medians = {r["rank"]: statistics.median(r["compute_ms"]) for r in complete if r.get("compute_ms")}
        for rank in complete:
            others = [m for k, m in medians.items() if k != rank["rank"]]
            if rank["rank"] not in medians or not others:
                continue
            baseline = statistics.median(others)
            mine = medians[rank["rank"]]
            if mine > baseline * (1 + STRAGGLER_MARGIN):
                findings.append(Finding("burnin.straggler", "fail", _label(rank),
                                        f"{_label(rank)} is the straggler: compute step {mine:.1f} ms vs {baseline:.1f} ms",
                                        {"median_compute_ms": round(mine, 2), "others_median_ms": round(baseline, 2)},
                                        "Check this GPU's clocks, temperature and throttle reasons (`gpuprep check`)"))
    for rank in complete:
        if not rank.get("memory", {}).get("ok", False):
            findings.append(Finding("burnin.memory", "fail", _label(rank), "Memory pattern mismatch",
                                    rank.get("memory", {}), "Drain the GPU and run `dcgmi diag -r 3`"))
    if complete and not any(f.severity == "fail" for f in findings):
        rows = complete[0].get("allreduce", [])
        peak = max((r["busbw_gbs"] for r in rows), default=0.0)
        steps = [statistics.median(r["step_ms"]) for r in complete if r.get("step_ms")]
        findings.append(Finding("burnin.pass", "pass", "run",
                                f"{len(complete)} ranks completed; peak all-reduce busbw {peak:.2f} GB/s",
                                {"peak_busbw_gbs": round(peak, 3),
                                 "median_step_ms": round(statistics.median(steps), 2) if steps else None}))
    return findings


def verdict(findings: List[Finding]) -> str:
    return worst(findings)
