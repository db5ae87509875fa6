"""The burn-in results store: every burn-in report kept, one row per GPU per run, so a GPU is judged against the
same model's GPUs across the fleet and against its own earlier runs. One SQLite file (the standard library's
sqlite3) by default, or a PostgreSQL database named by a URL (postgresql://USER@HOST:PORT/DB, pg8000): the same
schema below in both, version STORE_SCHEMA in the store's own `meta` table. I/O only; the judging is rules in
burnin/peers.py."""
from __future__ import annotations

import datetime as dt
import os
import sqlite3
import statistics
from dataclasses import dataclass
from typing import Dict, List, Optional
from urllib.parse import unquote, urlsplit

from .errors import BadInput, GpuprepError

STORE_SCHEMA = 1
# SQL both databases speak (upserts as ON CONFLICT, SQLite 3.24+); DOUBLE PRECISION is SQLite's REAL
_TABLES = """
CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS gpu_runs (
    run_at TEXT NOT NULL,          -- the report's generated_at (ISO 8601, UTC)
    host TEXT NOT NULL,
    gpu TEXT NOT NULL,             -- the GPU's UUID, else host:bus id, else host:rank (CPU ranks)
    model TEXT NOT NULL,
    driver TEXT,
    compute_ms DOUBLE PRECISION,   -- the median compute step (lower is faster)
    busbw_gbs DOUBLE PRECISION,    -- the largest all-reduce bus bandwidth
    power_w DOUBLE PRECISION,      -- the peak training power
    sm_clock_mhz DOUBLE PRECISION, -- the lowest SM clock
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
POSTGRES_SCHEMES = ("postgresql://", "postgres://")


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


def is_url(where: str) -> bool:
    return where.startswith(POSTGRES_SCHEMES)


def shown(where: str) -> str:
    """The store as it may be printed: a URL's password replaced by ***."""
    if not is_url(where):
        return where
    parts = urlsplit(where)
    if parts.password is None:
        return where
    netloc = parts.netloc.rsplit("@", 1)
    return where.replace(parts.netloc, f"{parts.username or ''}:***@{netloc[-1]}", 1)


class _Store:
    """One connection to the store, SQLite's or PostgreSQL's, spoken to in SQL with '?' placeholders; a context
    manager that commits what succeeded (rolls back what failed) and closes."""

    def __init__(self, connection, placeholder: str, errors: tuple):
        self.connection, self.placeholder, self.errors = connection, placeholder, errors

    def execute(self, sql: str, params=()):
        cursor = self.connection.cursor()
        cursor.execute(sql.replace("?", self.placeholder), tuple(params))
        return cursor

    def executemany(self, sql: str, rows) -> None:
        self.connection.cursor().executemany(sql.replace("?", self.placeholder), rows)

    def __enter__(self) -> "_Store":
        return self

    def __exit__(self, kind, value, trace) -> None:
        try:
            (self.connection.commit if kind is None else self.connection.rollback)()
        finally:
            self.connection.close()


def _sqlite(path: str, create: bool) -> _Store:
    if not create and not os.path.isfile(path):
        raise BadInput(f"{path}: no results store there (gpuprep burnin --store {path} keeps one)")
    try:
        return _Store(sqlite3.connect(path), "?", (sqlite3.DatabaseError,))
    except sqlite3.DatabaseError as exc:
        raise BadInput(f"{path}: not a gpuprep results store ({exc})") from None


def _postgres(url: str) -> _Store:
    """A PostgreSQL store: postgresql://USER[:PASSWORD]@HOST[:PORT]/DATABASE; the password from PGPASSWORD when
    the URL has none (a password on a command line is seen by every user of the host)."""
    import pg8000.dbapi
    parts = urlsplit(url)
    try:
        port = parts.port or 5432
    except ValueError:
        raise BadInput(f"{shown(url)}: the port is not a number") from None
    database = unquote(parts.path.lstrip("/"))
    if not parts.hostname or not parts.username or not database or parts.query or parts.fragment:
        raise BadInput(f"{shown(url)}: a PostgreSQL store is postgresql://USER@HOST[:PORT]/DATABASE "
                       "(the password in PGPASSWORD)")
    password = unquote(parts.password) if parts.password is not None else os.environ.get("PGPASSWORD")
    try:
        connection = pg8000.dbapi.connect(user=unquote(parts.username), password=password, host=parts.hostname,
                                          port=port, database=database, timeout=30)
    except (pg8000.dbapi.Error, OSError) as exc:
        said = str(exc).replace(password, "***") if password else str(exc)
        raise GpuprepError(f"{shown(url)}: the results store cannot be reached ({said[:300]})") from None
    return _Store(connection, "%s", (pg8000.dbapi.Error,))


def open_store(where: str, create: bool = True) -> _Store:
    """The store at `where` (a SQLite file, or a PostgreSQL URL), created with the schema when `create`, its schema
    version checked."""
    db = _postgres(where) if is_url(where) else _sqlite(where, create)
    try:
        if create:
            for statement in _TABLES.split(";"):
                if statement.strip():
                    db.execute(statement)
            db.execute("INSERT INTO meta VALUES ('schema', ?) ON CONFLICT (key) DO NOTHING", (str(STORE_SCHEMA),))
        found = db.execute("SELECT value FROM meta WHERE key = 'schema'").fetchone()
    except db.errors as exc:
        db.connection.close()
        raise BadInput(f"{shown(where)}: not a gpuprep results store ({str(exc)[:300]})") from None
    if found is None or found[0] != str(STORE_SCHEMA):
        db.connection.close()
        raise BadInput(f"{shown(where)}: results store schema {str(found and found[0])[:10]!r}, this gpuprep "
                       f"reads {STORE_SCHEMA}")
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


_COLUMNS = ("model", "driver", "compute_ms", "busbw_gbs", "power_w", "sm_clock_mhz")
_UPSERT_RUN = ("INSERT INTO gpu_runs VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?) ON CONFLICT (run_at, host, gpu) DO UPDATE SET "
               + ", ".join(f"{c} = excluded.{c}" for c in _COLUMNS))
_UPSERT_SERIES = ("INSERT INTO gpu_series VALUES (?, ?, ?, ?, ?) ON CONFLICT (gpu) DO UPDATE SET model = "
                  "excluded.model, host = excluded.host, last_at = excluded.last_at, runs = excluded.runs")


def record_rows(db: _Store, rows: List[GpuRun]) -> None:
    """The runs, and each GPU's series brought up to date (its last SERIES runs, oldest first)."""
    import json
    db.executemany(_UPSERT_RUN,
                   [(r.run_at, r.host, r.gpu, r.model, r.driver, r.compute_ms, r.busbw_gbs, r.power_w,
                     r.sm_clock_mhz) for r in rows])
    for r in rows:
        if r.compute_ms is None:
            continue
        found = db.execute("SELECT runs FROM gpu_series WHERE gpu = ?", (r.gpu,)).fetchone()
        runs = sorted({tuple(x) for x in json.loads(found[0])} | {(r.run_at, r.compute_ms)})[-SERIES:] if found \
            else [(r.run_at, r.compute_ms)]
        db.execute(_UPSERT_SERIES, (r.gpu, r.model, r.host, runs[-1][0], json.dumps(runs)))


@dataclass
class GpuSeries:
    """One GPU's compute steps in the store, oldest first, and where and when it last ran."""
    host: str
    compute_ms: List[float]
    last_at: str


def history(path: str, since_days: Optional[float] = None, create: bool = False) -> Dict[str, Dict[str, GpuSeries]]:
    """model -> GPU -> its series: its last SERIES runs (of the last `since_days` days), oldest first. One row per
    GPU is read (gpu_series), whatever the number of runs kept. `create`: a store not there yet is made, empty."""
    import json
    cutoff = (dt.datetime.now(dt.timezone.utc) - dt.timedelta(days=since_days)).isoformat() if since_days else ""
    out: Dict[str, Dict[str, GpuSeries]] = {}
    with open_store(path, create=create) as db:
        for gpu, model, host, last_at, runs in db.execute("SELECT gpu, model, host, last_at, runs FROM gpu_series "
                                                          "WHERE last_at >= ?", (cutoff,)):
            steps = [ms for at, ms in json.loads(runs) if at >= cutoff]
            if steps:
                out.setdefault(model, {})[gpu] = GpuSeries(host, steps, last_at)
    return out
