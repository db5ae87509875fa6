"""The watch of one job across its nodes: each node's watcher writes its samples as JSON lines (one line a sample,
only what is new since the last), and the command that started the watchers merges them into one WatchFacts.
A line is untrusted text from a node: every field is checked against the closed table below, and a line that
does not fit is dropped with one note naming the node and the field, never the watch. Pure, except `Emitter`,
which writes."""
from __future__ import annotations

import json
import math
import re
import time
from typing import Dict, List, Optional, Tuple

from ..errors import BadInput
from .facts import WatchFacts, watch_rank
from .watch import RankProcess

VERSION = 1
MAX_LINE = 1 << 20                   # one sample of a node with many ranks is a few KiB
MAX_RANKS_PER_NODE = 1024
MAX_NOTES = 20
HOST = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,63}")


_INF = (math.inf, -math.inf)


def _number(v) -> bool:
    return type(v) in (int, float) and v == v and v not in _INF


def _text(v, longest: int = 200) -> bool:
    return type(v) is str and len(v) <= longest


def _cpus(v) -> bool:
    return type(v) is list and len(v) <= 4096 and all(type(c) is int and 0 <= c < 1 << 20 for c in v)


def _gpu_value(item) -> bool:
    if item is None or _number(item) or _text(item, 100):
        return True
    return type(item) is list and len(item) <= 64 and all(_text(x, 60) or _number(x) for x in item)


def _gpu_sample(v) -> bool:
    if type(v) is not dict or len(v) > 40:
        return False
    for k, item in v.items():
        if len(k) > 40 or not _gpu_value(item):
            return False
    return True


def _numbers(values: list) -> bool:
    for v in values:
        if type(v) not in (int, float) or v != v or v in _INF:
            return False
    return True


def _percent(v) -> bool:
    return type(v) in (int, float) and 0 <= v <= 100


def _each(test):
    """A series' test from one element's: every element passes."""
    def series(values: list) -> bool:
        for v in values:
            if not test(v):
                return False
        return True
    return series


# RankProcess's per-sample series: the test the new elements of each must pass (one call a series: a line of a
# node with 8 ranks is checked in well under a millisecond, so 1,000 nodes a second fit in one core)
SERIES = {"stacks": _each(lambda v: _text(v, 20)), "stack_sigs": _each(lambda v: v is None or _text(v, 40)),
          "sites": _each(lambda v: type(v) is list and len(v) == 2 and all(x is None or _text(x) for x in v)),
          "cpu_pct": _numbers, "worker_cpu_pct": _numbers, "worker_running_pct": _numbers,
          "worker_disk_wait_pct": _numbers, "cpu_seconds": _numbers, "cpu_pressure_pct": _each(_percent),
          "switches": _each(lambda v: type(v) is int and 0 <= v < 1 << 62), "stopped": _each(lambda v: type(v) is bool),
          "gpu_samples": _each(_gpu_sample), "ran_on": _each(_cpus)}
# RankProcess's single values: the test each must pass
SCALARS = {"rank": lambda v: v is None or type(v) is int and 0 <= v < 1 << 24,
           "local_rank": lambda v: v is None or type(v) is int and 0 <= v < 1 << 16,
           "visible": lambda v: v is None or _text(v, 200), "workers": lambda v: type(v) is int and 0 <= v < 1 << 16,
           "gpu_uuid": lambda v: v is None or _text(v, 100), "allowed_cpus": lambda v: v is None or _cpus(v),
           "ended": lambda v: type(v) is bool, "ended_at": lambda v: v is None or _number(v)}
MAX_RAS = 512 << 10      # an NCCL RAS report as a node's watcher relays it (a job of thousands of ranks fits)
HISTORY = 600            # samples kept a rank in the merger (ten minutes at one a second): what a live verdict reads


def delta(rank: RankProcess, sent: Dict[str, int]) -> dict:
    """What of `rank` the merger has not seen: its single values, and each series' elements past `sent` (which
    this updates)."""
    out = {key: getattr(rank, key) for key in SCALARS}
    out["pid"] = rank.pid
    for key in SERIES:
        series = getattr(rank, key)
        out[key] = series[sent.get(key, 0):]
        sent[key] = len(series)
    return out


class Emitter:
    """The node side: one JSON line per sample on `out` (the srun step's standard output), flushed at once."""

    def __init__(self, host: str, out, clock=time.time):
        self.host, self.out, self.clock = host, out, clock
        self.sent: Dict[int, Dict[str, int]] = {}
        self.notes_sent = 0
        self.closed = False

    def line(self, document: dict) -> None:
        document = {"v": VERSION, "host": self.host, "t": round(self.clock(), 3), **document}
        try:
            self.out.write(json.dumps(document, separators=(",", ":"), allow_nan=False) + "\n")
            self.out.flush()
        except (BrokenPipeError, OSError, ValueError):
            self.closed = True          # the merger is gone: the watcher stops

    def sample(self, watcher, extra: Optional[dict] = None) -> None:
        ranks = [delta(r, self.sent.setdefault(r.pid, {})) for r in watcher.ranks]
        notes = watcher.notes[self.notes_sent:]
        self.notes_sent = len(watcher.notes)
        self.line({"ranks": ranks, "notes": notes, **(extra or {})})


class BadLine(ValueError):
    """A node's line that does not fit the table: the field named."""


def _checked_rank(item) -> dict:
    if not isinstance(item, dict) or not isinstance(item.get("pid"), int) or not 0 < item["pid"] < 1 << 23:
        raise BadLine("ranks[].pid")
    for key, test in SCALARS.items():
        if not test(item.get(key)):
            raise BadLine(f"ranks[].{key}")
    for key, test in SERIES.items():
        value = item.get(key)
        if value is None:
            continue
        if type(value) is not list or len(value) > HISTORY or not test(value):
            raise BadLine(f"ranks[].{key}")
    return item


def parse_line(text: str) -> dict:
    """One node line, checked; BadLine naming the field otherwise."""
    if len(text) > MAX_LINE:
        raise BadLine("line (longer than 1 MiB)")
    try:
        document = json.loads(text)
    except (ValueError, RecursionError):
        raise BadLine("line (not JSON)") from None
    if not isinstance(document, dict) or document.get("v") != VERSION:
        raise BadLine("v")
    if not isinstance(document.get("host"), str) or not HOST.fullmatch(document["host"]):
        raise BadLine("host")
    if not _number(document.get("t")):
        raise BadLine("t")
    ranks = document.get("ranks", [])
    if not isinstance(ranks, list) or len(ranks) > MAX_RANKS_PER_NODE:
        raise BadLine("ranks")
    document["ranks"] = [_checked_rank(r) for r in ranks]
    notes = document["notes"] = document.get("notes", [])
    if not isinstance(notes, list) or not all(_text(n, 400) for n in notes):
        raise BadLine("notes")
    for key, test in (("end", lambda v: v is None or _text(v, 200)), ("node", _node_facts),
                      ("ras", lambda v: v is None or _text(v, MAX_RAS)),
                      ("dumps", lambda v: v is None or isinstance(v, list) and len(v) <= 64)):
        if not test(document.get(key)):
            raise BadLine(key)
    return document


def _node_facts(value) -> bool:
    """The node's own check, as its watcher ran it: judged or not, and its problems (id, severity, words)."""
    if value is None:
        return True
    problems = value.get("problems") if isinstance(value, dict) else None
    unjudged = value.get("not_judged", []) if isinstance(value, dict) else None
    return isinstance(value, dict) and isinstance(value.get("judged"), bool) and isinstance(problems, list) and \
        len(problems) <= 200 and all(isinstance(p, dict) and _text(p.get("id"), 60) and _text(p.get("subject"), 80)
                                     and p.get("severity") in ("info", "warn", "fail") and _text(p.get("message"), 400)
                                     for p in problems) and \
        isinstance(unjudged, list) and len(unjudged) <= 10 and all(_text(w, 200) for w in unjudged)


class Merged:
    """Every node's lines, merged: the ranks by (node, pid), the time each node was last heard from, and what each
    node's own check said. Time is the merger's own clock as the lines arrive (the nodes' may differ), except
    `ended_at`. Lines replayed after the watch (`replay`: each node's lines came back whole, at its end) have no
    arrival time: a node stopped answering when its watcher never wrote its end line (the nodes' own clocks are
    not compared: one running ahead, or a line that forges its time, would make every other node look lost)."""

    def __init__(self, clock=time.monotonic, replay: bool = False):
        self.clock, self.replay = clock, replay
        self.ranks: Dict[Tuple[str, int], RankProcess] = {}
        self.heard: Dict[str, float] = {}
        self.ended: Dict[str, str] = {}              # node -> why its watcher ended
        self.node_facts: Dict[str, dict] = {}
        self.dumps: List = []
        self.notes: List[str] = []
        self.samples = 0
        self.ras = None                 # the latest NCCL RAS report a node relayed (any node's RAS sees the whole job)

    def note(self, line: str) -> None:
        if line not in self.notes and len(self.notes) < 200:
            self.notes.append(line)

    def feed(self, text: str, label: str = "a node", host: Optional[str] = None) -> None:
        """One node's line. `host`: the name the line is known to come from (its inventory name), which then
        stands for the one the node wrote: two nodes that call themselves alike stay two."""
        try:
            document = parse_line(text)
        except BadLine as exc:
            from ..report.sanitize import text_safe
            self.note(f"{text_safe(label)[:70]}: a watcher's line dropped: {exc} is not what a watcher writes")
            return
        _escaped(document)
        host = document["host"] = host or document["host"]
        self.heard[host] = self.clock()
        for item in document["ranks"]:
            self._rank(host, item)
            self.samples = max(self.samples, self.ranks[(host, item["pid"])].seen)
        for note in document["notes"][:MAX_NOTES]:
            self.note(f"{host}: {note}")
        if document.get("node") is not None:
            self.node_facts[host] = document["node"]
        if document.get("end") is not None:
            self.ended[host] = document["end"]
        self._dumps(host, document.get("dumps") or [])
        if document.get("ras"):
            self._ras(host, document["ras"])

    def _rank(self, host: str, item: dict) -> None:
        rank = self.ranks.get((host, item["pid"]))
        if rank is None:
            rank = self.ranks[(host, item["pid"])] = RankProcess(item["pid"], None, None)
            rank.host = host
        for key in SCALARS:
            setattr(rank, key, item.get(key))
        rank.seen += len(item.get("cpu_seconds") or ())
        for key in SERIES:
            series = getattr(rank, key)
            series.extend(item.get(key) or ())
            if len(series) > 2 * HISTORY:      # trimmed now and then, not at every line
                del series[:-HISTORY]

    def _dumps(self, host: str, dumps: list) -> None:
        from .flight import from_dict
        for dump in dumps:
            try:
                parsed = from_dict(dump, f"{host}: flight recorder dump")
            except ValueError as exc:
                self.note(f"a flight recorder dump dropped ({str(exc)[:120]})")
                continue
            self.dumps = [d for d in self.dumps if d.rank != parsed.rank] + [parsed]

    def _ras(self, host: str, text: str) -> None:
        """A node's NCCL RAS report, parsed as a saved one is (strictly); its host names escaped for reports."""
        from ..report.sanitize import text_safe
        from .ras import parse
        try:
            report = parse(text)
        except (BadInput, ValueError, RecursionError) as exc:
            self.note(f"{host}: a RAS report dropped ({str(exc)[:120]})")
            return
        for rank in report.missing + report.behind:
            rank.host = text_safe(rank.host) if rank.host is not None else None
        self.ras = report

    def silent(self, stale: float) -> List[str]:
        """The nodes not heard from for `stale` seconds whose watcher did not say it ended (replayed: whose watcher
        never wrote its end)."""
        now = self.clock()
        return sorted(h for h, at in self.heard.items() if (self.replay or now - at > stale) and h not in self.ended)

    def facts(self, seconds: float, stale: float, job_ended: bool = False, job_id: Optional[str] = None) -> WatchFacts:
        lost = set(self.silent(stale))
        ranks = []
        for (host, _), process in sorted(self.ranks.items(), key=lambda kv: _order(kv[1], kv[0][0])):
            rank = watch_rank(process)
            rank.host = host
            rank.node_lost = host in lost
            ranks.append(rank)
        return WatchFacts(ranks, seconds, self.samples, list(self.notes), job_ended=job_ended, ras=self.ras,
                          nodes={h: self.node_facts.get(h) for h in sorted(self.heard)}, lost_nodes=sorted(lost),
                          job_id=job_id, collectives=list(self.dumps), at=time.time())


def _escaped(document: dict) -> None:
    """Every text a node sent that a report may show (notes, where a rank is, its check's words), with control
    characters escaped: a node's text never moves a terminal's cursor or forges a report line."""
    from ..report.sanitize import text_safe
    document["notes"] = [text_safe(n) for n in document["notes"]]
    for item in document["ranks"]:
        if item.get("sites"):
            item["sites"] = [[text_safe(x) if x is not None else None for x in site] for site in item["sites"]]
    for problem in (document.get("node") or {}).get("problems", []):
        for key in ("id", "subject", "message"):
            problem[key] = text_safe(problem[key])


def _order(rank: RankProcess, host: str):
    return (rank.rank if rank.rank is not None else 1 << 30, host, rank.pid)
