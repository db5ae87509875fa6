"""The shape of one rank's burn-in result, typed: the judge reads these classes, never raw JSON. Built field by field
(the snapshot loader's typed builder names the JSON path of a bad value). A burn-in across an inventory reads each
host's report back from that host, and a local run each rank's file: untrusted input, which must give a clear
problem for that host or rank, never a crash of the judge. Fields not listed here stay in the report untouched."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Dict, List, Optional

from ..snapshot import build


@dataclass
class EccSample:
    ecc_volatile_uncorrected: Optional[int] = None


@dataclass
class RankGpu:
    failure: Optional[str] = None
    reasons_seen: Optional[List[str]] = None
    reason_counts: Optional[Dict[str, int]] = None
    training_reasons: Optional[List[str]] = None
    max_temperature_c: Optional[float] = None
    min_sm_clock_mhz: Optional[float] = None
    training_max_power_w: Optional[float] = None
    power_limit_w: Optional[float] = None
    training_samples: Optional[int] = None
    before: Optional[EccSample] = None
    after: Optional[EccSample] = None


@dataclass
class MemoryCheck:
    ok: Optional[bool] = None
    bytes: Optional[int] = None
    skipped: Optional[str] = None
    bad_words: Optional[int] = None
    first_bad_offset: Optional[int] = None


@dataclass
class SweepRow:
    bytes: int
    busbw_gbs: float


@dataclass
class Rank:
    rank: int
    world_size: int
    host: Optional[str] = None
    device: Optional[str] = None
    backend: Optional[str] = None
    gpu_name: Optional[str] = None
    gpu_uuid: Optional[str] = None
    pci_bus_id: Optional[str] = None
    steps: Optional[int] = None
    setup_ms: Optional[float] = None
    env: Optional[Dict[str, str]] = None
    compute_ms: Optional[List[float]] = None
    step_ms: Optional[List[float]] = None
    allreduce: Optional[List[SweepRow]] = None
    memory: Optional[MemoryCheck] = None
    gpu: Optional[RankGpu] = None
    load: Optional[Dict[str, Any]] = None


MAX_RANKS = 4096 * 16


def typed(rank: Any, where: str = "rank") -> Rank:
    """One rank's result as the judge reads it; ValueError names the first bad field."""
    try:
        built = build(Rank, rank, where)
    except TypeError as exc:
        raise ValueError(str(exc)) from None
    if built.rank < 0:
        raise ValueError(f"{where}.rank: {built.rank} is negative")
    return built


def checked_ranks(report: Any) -> List[dict]:
    """The ranks of one host's burn-in report, each checked against Rank; ValueError names the first bad
    field (`ranks[1].compute_ms[3]: expected float, got 'fast'`)."""
    if not isinstance(report, dict) or not str(report.get("schema", "")).startswith("gpuprep.burnin/"):
        raise ValueError("not a gpuprep burn-in report")
    ranks = report.get("ranks")
    if not isinstance(ranks, list) or len(ranks) > MAX_RANKS:
        raise ValueError("ranks: expected a list of ranks")
    for i, rank in enumerate(ranks):
        typed(rank, f"ranks[{i}]")
    return ranks


@dataclass
class Baseline:
    """A known-good burn-in of this node (`burnin --json -o`), the all-reduce sweep later runs are held to."""
    source: str
    gpu_name: Optional[str]
    world_size: int
    backend: Optional[str]
    sweep: List[SweepRow]
    generated_at: Optional[str] = None


BASELINE_SCHEMA = "gpuprep.burnin/1"
# no link moves more than this (NVLink 5 is 900 GB/s per GPU): a higher busbw is a forged or broken figure
MAX_BUSBW_GBS = 10_000.0


def baseline_from(report: Any, source: str, host: Optional[str] = None, now: Optional[float] = None) -> Baseline:
    """The baseline a passing burn-in report of this node gives; ValueError names the first bad field, or says why
    the report cannot be one: another schema, another node (`host`), a date ahead of `now`, a run that did not pass,
    no all-reduce sweep, a busbw no link moves."""
    ranks = [typed(rank, f"ranks[{i}]") for i, rank in enumerate(checked_ranks(report))]
    if report.get("schema") != BASELINE_SCHEMA:
        raise ValueError(f"schema: {str(report.get('schema'))[:40]!r} is not {BASELINE_SCHEMA}, the burn-in report "
                         "this gpuprep reads")
    if report.get("verdict") != "pass":
        raise ValueError(f"verdict: the baseline burn-in did not pass ({str(report.get('verdict'))[:20]!r})")
    others = sorted({r.host for r in ranks if r.host and host and r.host != host})
    if others:
        raise ValueError(f"ranks[].host: the baseline is another node's run ({', '.join(o[:64] for o in others[:3])}),"
                         f" not this node's ({host[:64]})")
    stamp = report.get("generated_at")
    _check_date(stamp, now)
    swept = sorted((r for r in ranks if r.allreduce), key=lambda r: r.rank)
    if not swept:
        raise ValueError("ranks[].allreduce: the baseline has no all-reduce sweep (a one-rank run?)")
    first = swept[0]
    for i, row in enumerate(first.allreduce):
        if not (0 < row.busbw_gbs <= MAX_BUSBW_GBS) or not 0 < row.bytes <= 1 << 40:
            raise ValueError(f"ranks[{first.rank}].allreduce[{i}]: busbw {row.busbw_gbs!r} GB/s at {row.bytes!r} "
                             f"bytes is no measurement (0 < busbw <= {MAX_BUSBW_GBS:g})")
    return Baseline(source, first.gpu_name, first.world_size, first.backend, list(first.allreduce),
                    stamp if isinstance(stamp, str) else None)


def _check_date(stamp: Any, now: Optional[float]) -> None:
    """generated_at, where given, is an ISO date, and not ahead of `now` (a clock or a forgery)."""
    if stamp is None or now is None:
        return
    import datetime as dt
    try:
        when = dt.datetime.fromisoformat(str(stamp))
    except ValueError:
        raise ValueError(f"generated_at: {str(stamp)[:40]!r} is not an ISO date") from None
    if when.tzinfo is None:
        when = when.replace(tzinfo=dt.timezone.utc)
    ahead = when.timestamp() - now
    if ahead > 300:
        raise ValueError(f"generated_at: {stamp[:40]} is {ahead / 86400:.1f} day(s) ahead of this host's clock")

