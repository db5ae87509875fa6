"""The burn-in results store: every burn-in report kept, one row per GPU per run, so a GPU is judged against the
same model's GPUs across the fleet and against its own earlier runs. One SQLite file (the standard library's
sqlite3): the schema below, version STORE_SCHEMA in the store's own `meta` table. I/O only; the judging is
rules in burnin/peers.py."""
from __future__ import annotations

import datetime as dt
import os
import sqlite3
import statistics
from dataclasses import dataclass
from typing import Dict, List, Optional

from .errors import BadInput

STORE_SCHEMA = 1
_TABLES = """
CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS gpu_runs (
    run_at TEXT NOT NULL,          -- the report's generated_at (ISO 8601, UTC)
    host TEXT NOT NULL,
    gpu TEXT NOT NULL,             -- the GPU's UUID, else host:bus id, else host:rank (CPU ranks)
    model TEXT NOT NULL,
    driver TEXT,
    compute_ms REAL,               -- the median compute step (lower is faster)
    busbw_gbs REAL,                -- the largest all-reduce bus bandwidth
    power_w REAL,                  -- the peak training power
    sm_clock_mhz REAL,             -- the lowest SM clock
    PRIMARY KEY (run_at, host, gpu)
);
CREATE INDEX IF NOT EXISTS gpu_runs_model ON gpu_runs (model, run_at);
CREATE INDEX IF NOT EXISTS gpu_runs_gpu ON gpu_runs (gpu, run_at);
-- kept up to date by record(): each GPU's last SERIES runs, so a report over a store of 100,000 runs reads one
-- row per GPU, not every run
CREATE TABLE IF NOT EXISTS gpu_series (
    gpu TEXT PRIMARY KEY,
    model TEXT NOT NULL,
    host TEXT NOT NULL,
    last_at TEXT NOT NULL,
    runs TEXT NOT NULL             -- JSON: [[run_at, compute_ms], ...], oldest first, at most SERIES
);
"""
SERIES = 32


@dataclass
class GpuRun:
    run_at: str
    host: str
    gpu: str
    model: str
    driver: Optional[str]
    compute_ms: Optional[float]
    busbw_gbs: Optional[float]
    power_w: Optional[float]
    sm_clock_mhz: Optional[float]


def open_store(path: str, create: bool = True) -> sqlite3.Connection:
    """The store at `path` (created with the schema when `create`), its schema version checked."""
    if not create and not os.path.isfile(path):
        raise BadInput(f"{path}: no results store there (gpuprep burnin --store {path} keeps one)")
    try:
        db = sqlite3.connect(path)
        db.executescript(_TABLES)
        db.execute("INSERT OR IGNORE INTO meta VALUES ('schema', ?)", (str(STORE_SCHEMA),))
        found = db.execute("SELECT value FROM meta WHERE key = 'schema'").fetchone()[0]
    except sqlite3.DatabaseError as exc:
        raise BadInput(f"{path}: not a gpuprep results store ({exc})") from None
    if found != str(STORE_SCHEMA):
        raise BadInput(f"{path}: results store schema {found[:10]!r}, this gpuprep reads {STORE_SCHEMA}")
    return db


def rows_of(report: dict) -> List[GpuRun]:
    """One row per rank that reported, from a burn-in report (gpuprep.burnin/1)."""
    from .burnin.report_schema import checked_ranks
    try:
        ranks = checked_ranks(report)
    except ValueError as exc:
        raise BadInput(f"the burn-in report: {exc}") from None
    run_at = str(report.get("generated_at") or dt.datetime.now(dt.timezone.utc).isoformat())[:40]
    out = []
    for rank in ranks:
        host = str(rank.get("host") or "?")[:128]
        gpu = str(rank.get("gpu_uuid") or (f"{host}:{rank['pci_bus_id']}" if rank.get("pci_bus_id") else
                                          f"{host}:rank{rank['rank']}"))[:128]
        compute = rank.get("compute_ms") or []
        sweep = [row.get("busbw_gbs") for row in rank.get("allreduce") or [] if isinstance(row, dict)]
        monitor = rank.get("gpu") if isinstance(rank.get("gpu"), dict) else {}
        out.append(GpuRun(run_at, host, gpu, str(rank.get("gpu_name") or "CPU")[:128],
                          (rank.get("env") or {}).get("driver") if isinstance(rank.get("env"), dict) else None,
                          statistics.median(compute) if compute else None, max(sweep) if sweep else None,
                          monitor.get("training_max_power_w"), monitor.get("min_sm_clock_mhz")))
    return out


def record(path: str, report: dict) -> int:
    """Keep a burn-in report's GPUs in the store; how many rows were written."""
    rows = rows_of(report)
    with open_store(path) as db:
        record_rows(db, rows)
    return len(rows)


def record_rows(db: sqlite3.Connection, rows: List[GpuRun]) -> None:
    """The runs, and each GPU's series brought up to date (its last SERIES runs, oldest first)."""
    import json
    db.executemany("INSERT OR REPLACE INTO gpu_runs VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)",
                   [(r.run_at, r.host, r.gpu, r.model, r.driver, r.compute_ms, r.busbw_gbs, r.power_w,
                     r.sm_clock_mhz) for r in rows])
    for r in rows:
        if r.compute_ms is None:
            continue
        found = db.execute("SELECT runs FROM gpu_series WHERE gpu = ?", (r.gpu,)).fetchone()
        runs = sorted({tuple(x) for x in json.loads(found[0])} | {(r.run_at, r.compute_ms)})[-SERIES:] if found \
            else [(r.run_at, r.compute_ms)]
        db.execute("INSERT OR REPLACE INTO gpu_series VALUES (?, ?, ?, ?, ?)",
                   (r.gpu, r.model, r.host, runs[-1][0], json.dumps(runs)))


@dataclass
class GpuSeries:
    """One GPU's compute steps in the store, oldest first, and where and when it last ran."""
    host: str
    compute_ms: List[float]
    last_at: str


def history(path: str, since_days: Optional[float] = None) -> Dict[str, Dict[str, GpuSeries]]:
    """model -> GPU -> its series: its last SERIES runs (of the last `since_days` days), oldest first. One row per
    GPU is read (gpu_series), whatever the number of runs kept."""
    import json
    cutoff = (dt.datetime.now(dt.timezone.utc) - dt.timedelta(days=since_days)).isoformat() if since_days else ""
    out: Dict[str, Dict[str, GpuSeries]] = {}
    with open_store(path, create=False) as db:
        for gpu, model, host, last_at, runs in db.execute("SELECT gpu, model, host, last_at, runs FROM gpu_series "
                                                          "WHERE last_at >= ?", (cutoff,)):
            steps = [ms for at, ms in json.loads(runs) if at >= cutoff]
            if steps:
                out.setdefault(model, {})[gpu] = GpuSeries(host, steps, last_at)
    return out
