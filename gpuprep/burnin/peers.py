"""GPUs judged against their peers: the same model in one run (judge.burnin.slow-gpu) or across the fleet's history
(the results store). Pure: numbers in, findings out. Robust statistics, median and MAD, so one bad GPU does not
move the yardstick it is held to."""
from __future__ import annotations

import statistics
from typing import Dict, List, Optional

from ..rules import Finding

# a figure is an outlier this many robust spreads (1.4826 x the median absolute deviation: one standard deviation of
# a normal sample) past its peers' median, and at least MIN_GAP worse: a tiny spread never names a GPU 1% off
SPREADS = 3.5
MIN_GAP = 0.10
# CPU ranks of one run share the host's cores, caches and memory bandwidth, and rank 0 also serves the rendezvous
# store: alike ranks differ by up to ~15% in their compute step (measured on 2 cores, 4 ranks). Half slower is slow.
MIN_GAP_CPU = 0.50
MIN_PEERS = 3
_REMEDY = ("Compare this GPU with its peers: clocks and throttle reasons, power limit, PCIe link, temperature "
           "(`gpuprep check` on its host); swap it with a peer to tell the GPU from its slot")


def outlier(value: float, peers: List[float], higher_is_better: bool, min_gap: float = MIN_GAP) -> Optional[float]:
    """How many robust spreads `value` lies on the bad side of its peers' median, when it is an outlier (and at
    least `min_gap` of the median worse); else None."""
    median = statistics.median(peers)
    spread = 1.4826 * statistics.median(abs(p - median) for p in peers)
    worse = (median - value) if higher_is_better else (value - median)
    if median <= 0 or worse < min_gap * median:
        return None
    spreads = worse / spread if spread > 0 else float("inf")
    return spreads if spreads >= SPREADS else None


def fleet_report(history: Dict[str, dict]) -> List[Finding]:
    """Per model: the GPUs persistently slowest (their median compute step over their runs against the model's
    GPUs), and those whose last run fell behind their own earlier runs. `history`: store.history()."""
    findings: List[Finding] = []
    for model, series in sorted(history.items()):
        medians = {gpu: statistics.median(s.compute_ms) for gpu, s in series.items()}
        if len(medians) < MIN_PEERS:
            findings.append(Finding("fleet.slow-gpu", "info", model, f"{len(medians)} {model} GPU(s) in the store: "
                                    f"too few to compare ({MIN_PEERS} or more are)", {"model": model}))
        else:
            findings += _slowest(model, series, medians)
        findings += _dropped(model, series)
    return findings


def _slowest(model: str, series: dict, medians: Dict[str, float]) -> List[Finding]:
    out = []
    values = sorted(medians.values())
    # every GPU held to the whole model's median and spread first (computed once), then, for the few that stand out,
    # to its peers without it: the same verdict, without sorting thousands of medians once per GPU
    middle = statistics.median(values)
    spread = 1.4826 * statistics.median(abs(v - middle) for v in values)
    for gpu, value in sorted(medians.items()):
        if len(values) > 50 and value - middle < max(MIN_GAP * middle, SPREADS * spread) * 0.9:
            continue
        peers = list(values)
        peers.remove(value)
        spreads = outlier(value, peers, higher_is_better=False)
        if spreads is None:
            continue
        host = series[gpu].host
        out.append(Finding("fleet.slow-gpu", "warn", f"{host} {gpu}", f"GPU {gpu} on {host} is persistently slow "
                           f"for a {model}: median compute step {value:.1f} ms over {len(series[gpu].compute_ms)} "
                           f"run(s), the model's {statistics.median(peers):.1f} ms",
                           {"model": model, "host": host, "gpu": gpu, "median_compute_ms": round(value, 3),
                            "peers_median_ms": round(statistics.median(peers), 3), "peers": len(peers),
                            "runs": len(series[gpu].compute_ms),
                            "spreads": round(spreads, 1) if spreads != float("inf") else None},
                           _REMEDY, "SuperBench (peer comparison); median and MAD"))
    return out


def _dropped(model: str, series: dict) -> List[Finding]:
    out = []
    for gpu, s in sorted(series.items()):
        if len(s.compute_ms) < MIN_PEERS:
            continue
        before, last = statistics.median(s.compute_ms[:-1]), s.compute_ms[-1]
        if last > before * (1 + MIN_GAP):
            out.append(Finding("fleet.gpu-dropped", "warn", f"{s.host} {gpu}", f"GPU {gpu} on {s.host} ran its last "
                               f"burn-in {100 * (last / before - 1):.0f}% slower than its own earlier runs ({last:.1f} "
                               f"against {before:.1f} ms)", {"model": model, "host": s.host, "gpu": gpu,
                               "last_ms": round(last, 3), "earlier_median_ms": round(before, 3),
                               "earlier_runs": len(s.compute_ms) - 1, "last_run": s.last_at}, _REMEDY))
    return out


def against_fleet(rows: list, history: Dict[str, dict]) -> List[Finding]:
    """This run's GPUs (store.rows_of) against the same model's GPUs in the store (their medians, this run's GPUs
    left out)."""
    findings = []
    mine = {r.gpu for r in rows}
    for row in rows:
        if row.compute_ms is None:
            continue
        medians = [statistics.median(s.compute_ms) for gpu, s in history.get(row.model, {}).items()
                   if gpu not in mine]
        if len(medians) < MIN_PEERS:
            findings.append(Finding("burnin.slow-gpu", "info", f"{row.host} {row.gpu}", f"{len(medians)} other "
                                    f"{row.model} GPU(s) in the store: too few to compare this one with the fleet",
                                    {"model": row.model}))
            continue
        spreads = outlier(row.compute_ms, medians, higher_is_better=False)
        if spreads is not None:
            findings.append(Finding("burnin.slow-gpu", "warn", f"{row.host} {row.gpu}", f"GPU {row.gpu} on {row.host}"
                                    f" is slow for a {row.model} across the fleet: compute step {row.compute_ms:.1f} "
                                    f"ms, the fleet's {statistics.median(medians):.1f} ms",
                                    {"model": row.model, "host": row.host, "gpu": row.gpu,
                                     "compute_ms": round(row.compute_ms, 3),
                                     "fleet_median_ms": round(statistics.median(medians), 3), "fleet_gpus": len(medians)},
                                    _REMEDY, "SuperBench (peer comparison); median and MAD"))
    return findings


FLEET_IDS = frozenset({"fleet.slow-gpu", "fleet.gpu-dropped"})
