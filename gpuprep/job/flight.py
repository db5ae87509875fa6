"""PyTorch's flight recorder dumps (torch.distributed, NCCL and gloo): I/O and parsing only. Each dump is one rank's
ring buffer of collectives: per process group, the sequence number of each collective it entered and whether it
completed (`retired`). Only the JSON form is read (`_dump_fr_trace_json()`, the worker server's `fr_trace_json`
handler): the pickle form is code when loaded, and a dump is untrusted input. The rank is the file name's last
number (`<prefix><rank>`, as TORCH_FR_DUMP_TEMP_FILE names them, or `...rank3.json`)."""
from __future__ import annotations

import json
import os
import re
from dataclasses import dataclass, field
from typing import Dict, List, Optional

from ..errors import BadInput

MAX_DUMP = 64 << 20
_RANK = re.compile(r"(\d+)(?:\.json)?$")


@dataclass
class Pending:
    """A collective a rank entered and had not completed when the dump was taken."""
    seq: int
    op: str
    sizes: Optional[list] = None


@dataclass
class GroupState:
    """One process group as one rank saw it."""
    last_seq: int = 0                       # the last collective it entered
    pending: List[Pending] = field(default_factory=list)
    ops: Dict[int, str] = field(default_factory=dict)     # sequence number -> the collective's name and sizes


@dataclass
class RankCollectives:
    rank: int
    source: str
    groups: Dict[str, GroupState] = field(default_factory=dict)

    def to_dict(self) -> dict:
        import dataclasses
        return dataclasses.asdict(self)


def looks_like_dump(head: bytes) -> bool:
    """A flight recorder dump (JSON), not a profiler trace: its entries and process-group status."""
    return head.lstrip().startswith(b"{") and b'"entries"' in head and b"traceEvents" not in head


def read_dump(path: str) -> RankCollectives:
    """One rank's dump; BadInput naming the file and the field for anything else."""
    if open(path, "rb").read(2) == b"\x80\x04" or path.endswith((".pkl", ".pickle")):
        raise BadInput(f"{path}: a pickled flight recorder dump: gpuprep reads only the JSON form "
                       "(_dump_fr_trace_json(), or the worker server's fr_trace_json), never pickle (it is code)")
    match = _RANK.search(os.path.basename(path))
    if not match:
        raise BadInput(f"{path}: a flight recorder dump's file name ends with its rank (<prefix><rank>[.json])")
    with open(path, "rb") as fh:
        data = fh.read(MAX_DUMP + 1)
    if len(data) > MAX_DUMP:
        raise BadInput(f"{path}: larger than {MAX_DUMP >> 20} MiB: not a flight recorder dump")
    try:
        document = json.loads(data)
    except (ValueError, RecursionError) as exc:
        raise BadInput(f"{path}: not JSON ({str(exc)[:80]})") from None
    entries = document.get("entries") if isinstance(document, dict) else None
    if not isinstance(entries, list):
        raise BadInput(f"{path}: entries: expected the list of collectives of a flight recorder dump")
    return RankCollectives(int(match.group(1)), path, _groups(entries, path))


def _groups(entries: list, path: str) -> Dict[str, GroupState]:
    groups: Dict[str, GroupState] = {}
    for i, entry in enumerate(entries):
        if not isinstance(entry, dict) or entry.get("is_p2p"):
            continue
        seq, name = entry.get("collective_seq_id"), entry.get("profiling_name")
        if type(seq) is not int or not isinstance(name, str) or seq < 0:
            raise BadInput(f"{path}: entries[{i}]: collective_seq_id and profiling_name are no collective's")
        # gloo records every group's config under one key: a group is known by its entry's own process_group
        group = entry.get("process_group")
        uid = str(group[0]) if isinstance(group, list) and group else str(entry.get("pg_id", "?"))
        state = groups.setdefault(uid[:64], GroupState())
        sizes = entry.get("input_sizes") if isinstance(entry.get("input_sizes"), list) else None
        state.last_seq = max(state.last_seq, seq)
        state.ops[seq] = f"{name[:60]} {json.dumps(sizes)[:80]}" if sizes is not None else name[:60]
        if entry.get("retired") is False:
            state.pending.append(Pending(seq, name[:60], sizes))
    return groups


def from_dict(value, where: str) -> RankCollectives:
    """A RankCollectives as to_dict() wrote it (a node's watcher sends its ranks' dumps so), checked field by field:
    ValueError naming the field otherwise."""
    if not isinstance(value, dict) or type(value.get("rank")) is not int or not 0 <= value["rank"] < 1 << 24:
        raise ValueError(f"{where}: rank")
    groups = value.get("groups")
    if not isinstance(groups, dict) or len(groups) > 1024:
        raise ValueError(f"{where}: groups")
    out = RankCollectives(value["rank"], str(value.get("source", ""))[:200])
    for uid, group in groups.items():
        out.groups[str(uid)[:64]] = _group_from_dict(group, f"{where}: groups.{str(uid)[:64]}")
    return out


def _group_from_dict(group, where: str) -> GroupState:
    if not isinstance(group, dict) or type(group.get("last_seq")) is not int:
        raise ValueError(f"{where}.last_seq")
    ops = group.get("ops")
    if not isinstance(ops, dict) or len(ops) > 100000 or not all(
            str(k).isdigit() and isinstance(v, str) and len(v) <= 200 for k, v in ops.items()):
        raise ValueError(f"{where}.ops")
    pending = group.get("pending")
    if not isinstance(pending, list) or not all(isinstance(p, dict) and type(p.get("seq")) is int and
                                                isinstance(p.get("op"), str) for p in pending):
        raise ValueError(f"{where}.pending")
    return GroupState(group["last_seq"], [Pending(p["seq"], p["op"][:60]) for p in pending],
                      {int(k): v for k, v in ops.items()})
