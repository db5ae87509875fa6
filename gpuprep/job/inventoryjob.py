"""`gpuprep watch -i INVENTORY --master ADDR:PORT`: a job across nodes without Slurm, with Ansible as the engine
(the inventory gpuprep's other commands use). One watcher a node (collection/playbooks/watch.yml) finds the ranks
that meet at ADDR:PORT there and samples them for the watch's duration (job/nodewatch.py); each node's lines come
back whole when it is done and are merged here (a node whose watcher never wrote its end line stopped answering).
I/O only: the verdict is the job rules'."""
from __future__ import annotations

import math
from typing import List, Optional, Tuple

from ..errors import BadInput, GpuprepError
from .facts import WatchFacts
from .stream import HOST, Merged

MAX_LINES_PER_NODE = 100_000        # a day at one line a second: far more than a watch keeps


def watch_inventory_nodes(inventory: str, master: str, seconds: float, interval: float,
                          limit: Optional[str] = None, connection=None) -> WatchFacts:
    """Run watch.yml on every host and merge what each host's watcher wrote."""
    from ..ansible.runner import ApplyRequest, run
    from .nodewatch import split_master
    from .slurmjob import stale_after
    split_master(master, "--master")
    variables = {"watch_master": master, "watch_seconds": int(math.ceil(seconds)), "watch_interval": interval}
    outcome = run(ApplyRequest(playbook="watch.yml", inventory=inventory, limit=limit, internal_vars=variables,
                               connection=connection))
    merged = Merged(replay=True)
    unheard: List[Tuple[str, str]] = []
    for name in outcome.hosts_in_inventory:
        host = outcome.state.hosts.get(name)
        if host is None or not host.watch_output:
            unheard.append((name, _why_unheard(host)))
            continue
        for line in host.watch_output.splitlines()[:MAX_LINES_PER_NODE]:
            if line.strip():
                # the inventory's name for the node, where it is one a report may carry; else the node's own
                merged.feed(line.strip(), name, host=name if HOST.fullmatch(name) else None)
    if not merged.heard:
        first = unheard[0] if unheard else (inventory, "the inventory lists no host")
        raise GpuprepError(f"no watcher answered from any host of {inventory} (first: {first[0]}: {first[1]})")
    if not merged.ranks and unheard:         # the job's ranks may be on the hosts that did not answer
        raise GpuprepError(f"no rank of {master} found on the hosts that answered, and {len(unheard)} did not "
                           f"(first: {unheard[0][0]}: {unheard[0][1]}): the job was not judged")
    if not merged.ranks:
        raise BadInput(f"--master {master}: no process on any node has MASTER_ADDR:MASTER_PORT {master} "
                       "(give the address and port the job's ranks meet at, as their environment holds them)")
    ended = all(r.ended for r in merged.ranks.values())
    facts = merged.facts(seconds, stale_after(interval), job_ended=ended)
    from ..report.sanitize import text_safe
    facts.notes += [text_safe(f"no watcher answered from {name}: its ranks are not judged ({why})")
                    for name, why in unheard]
    return facts


def _why_unheard(host) -> str:
    if host is None or not host.failures:
        return "the run ended before its watcher did" if host is None or host.interrupted_at is None \
            else f"interrupted ({host.interrupted_at})"
    failure = host.failures[0]
    lines = [line for line in failure.message.strip().splitlines() if line.strip()]
    if failure.unreachable:
        return "unreachable: " + (lines[0][:200] if lines else "")
    if "No such file or directory" in failure.message and "gpuprep" in failure.message:
        return "no gpuprep there: install it on the host (on its PATH, or name it with watch_gpuprep)"
    return (lines[-1][:200] if lines else "its watcher failed")
