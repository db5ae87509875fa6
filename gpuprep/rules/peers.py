"""Fleet counts judged by peers: each host's Xid events and its GPUs' corrected ECC errors against the hosts of the
same GPU model, and of the same inventory group where the inventory gives groups (a rack, a row). A count far
above its peers' is named; a count its peers share (a rack whose hosts all log Xid 45 under one job mix) is not,
since what is normal for one rack is not an alarm there. Absolute limits stay with the host's own rules (gpu.xid,
gpu.ecc-*). Pure: snapshots and groups in, findings out."""
from __future__ import annotations

import statistics
from dataclasses import dataclass
from typing import Callable, Dict, List, Optional, Sequence, Tuple

from ..snapshot import Snapshot
from . import Finding

MIN_PEERS = 3           # hosts beside the one judged: fewer cannot say what is usual
SPREADS = 3.0           # robust spreads (1.4826 x MAD) above the peers' median ...
MIN_EXCESS = 10         # ... and at least this many more than it ...
MIN_RATIO = 3.0         # ... and at least this many times it (or than 1 where the median is 0)


def _xids(snap: Snapshot) -> Optional[int]:
    return None if snap.xids is None else sum(1 for x in snap.xids if x.kind == "xid")


def _corrected_ecc(snap: Snapshot) -> Optional[int]:
    known = [g.ecc_volatile_corrected for g in snap.gpus or [] if g.ecc_volatile_corrected is not None]
    return sum(known) if known else None


@dataclass(frozen=True)
class Count:
    id: str
    label: str
    value: Callable[[Snapshot], Optional[int]]
    remedy: str


COUNTS = (
    Count("drift.xid-count", "Xid events in its kernel log", _xids,
          "Read them on the host (`gpuprep check` names each Xid and its fix); a count the host's peers share points "
          "at their common job mix or power, one host's alone at its GPUs"),
    Count("drift.ecc-count", "corrected ECC errors (volatile, all GPUs)", _corrected_ecc,
          "Watch the host's retired or remapped rows (`gpuprep check`: gpu.row-remap); a GPU correcting far more "
          "than its peers is failing memory: schedule it for the field diagnostic (dcgmi diag -r 3)"),
)
PEER_IDS = frozenset(c.id for c in COUNTS)


@dataclass
class Peer:
    """One host as the peer rules see it: its snapshot, its GPU model, its inventory groups."""
    snapshot: Snapshot
    groups: Sequence[str] = ()

    @property
    def model(self) -> Optional[str]:
        names = sorted({g.name for g in self.snapshot.gpus or [] if g.name})
        return ", ".join(names) or None


def _peers_of(host: str, fleet: Dict[str, Peer]) -> Tuple[List[str], str]:
    """(the hosts `host` is judged against, said in words): the same GPU model in a group it shares, else the same
    GPU model fleet-wide when its groups hold too few."""
    me = fleet[host]
    same = [h for h, p in fleet.items() if h != host and p.model == me.model]
    grouped = [h for h in same if set(fleet[h].groups) & set(me.groups)]
    if len(grouped) >= MIN_PEERS:
        shared = sorted(set(me.groups) & {g for h in grouped for g in fleet[h].groups})
        return grouped, f"{me.model} hosts of group {', '.join(shared)}"
    return same, f"{me.model} hosts of the fleet"


def _far_above(value: int, peers: List[int]) -> Optional[float]:
    """The peers' median when `value` is far above it (see the constants), else None."""
    median = statistics.median(peers)
    spread = 1.4826 * statistics.median(abs(p - median) for p in peers)
    excess = value - median
    if excess >= max(MIN_EXCESS, SPREADS * spread) and value >= MIN_RATIO * max(median, 1):
        return median
    return None


def peer_counts(fleet: Dict[str, Peer]) -> List[Finding]:
    """Each host whose count is far above its peers' (same GPU model, same group where there are groups)."""
    out = []
    for count in COUNTS:
        values = {h: count.value(p.snapshot) for h, p in fleet.items()}
        for host in sorted(fleet):
            if values[host] is None or fleet[host].model is None:
                continue
            peers, words = _peers_of(host, fleet)
            known = [values[h] for h in peers if values[h] is not None]
            median = _far_above(values[host], known) if len(known) >= MIN_PEERS else None
            if median is None:
                continue
            out.append(Finding(count.id, "warn", host, f"{values[host]} {count.label}, where its {len(known)} peers "
                               f"({words}) have a median of {median:g}",
                               {"value": values[host], "peers_median": median, "peers": len(known), "compared": words},
                               count.remedy, "fleet peers (same GPU model, same inventory group); median and MAD"))
    return out
