"""`gpuprep burnin -i INVENTORY`: run the burn-in on every host through the Ansible layer and
judge the ranks of all nodes together (a straggler is named across the whole job)."""
from __future__ import annotations

import json
import os
import shutil
import tempfile
import time

from . import RunResult, parse_master
from .report_schema import checked_ranks


def run_fleet(inventory: str, seconds: float, nproc: str, backend: str, master, rdzv_timeout: float,
              connection=None) -> RunResult:
    extravars = {"burnin_duration": f"{int(seconds)}s", "burnin_seconds": int(seconds), "burnin_nproc": nproc,
                 "burnin_backend": backend, "burnin_rdzv_timeout": int(rdzv_timeout)}
    # each host runs its own gpuprep (on its PATH, or where the inventory's burnin_gpuprep says), never the
    # controller's interpreter path, which means nothing on another machine
    if master:
        host, port = parse_master(master)
        extravars.update(burnin_master_addr=host, burnin_port=port)
    collect = tempfile.mkdtemp(prefix="gpuprep-burnin-reports-")
    extravars["burnin_collect_dir"] = collect
    start = time.monotonic()
    try:
        return _run_and_collect(inventory, extravars, collect, connection, start)
    finally:
        shutil.rmtree(collect, ignore_errors=True)       # also when the run fails or is interrupted


def _run_and_collect(inventory: str, extravars: dict, collect: str, connection, start: float) -> RunResult:
    from ..ansible.runner import ApplyRequest, run
    outcome = run(ApplyRequest(playbook="burnin.yml", inventory=inventory, internal_vars=extravars,
                               forks=None, connection=connection))
    reports, missing_hosts, problems = {}, [], []
    for host in outcome.hosts_in_inventory:
        host_ranks, problem = _host_report(os.path.join(collect, f"{host}.json"), host)
        if host_ranks is None:
            missing_hosts.append(host)
            problems += [problem] if problem else []
        else:
            reports[host] = host_ranks
    ranks, world, conflicts = merge_reports(reports)
    problems += conflicts
    failed = [f"{h}: {state.failures[0].message}" for h, state in outcome.state.hosts.items() if state.failures]
    result = RunResult(ranks=ranks, world_size=world or len(ranks), exit_code=0 if not failed else 1,
                       timed_out=False, wall_seconds=time.monotonic() - start,
                       log_tail=failed + [f"no report from {h}" for h in missing_hosts],
                       nodes=len(outcome.hosts_in_inventory),
                       setup_errors=problems + [problem for h, state in sorted(outcome.state.hosts.items())
                                                for problem in _host_setup_errors(h, state)])
    result.rendezvous_failed = bool(missing_hosts) and not ranks
    return result


def merge_reports(reports: dict):
    """(ranks by number, world size, problems) from each host's checked ranks. A rank two hosts both claim is
    believed from neither: a forged or stale report cannot stand in for another host's result."""
    claims: dict = {}
    for host, host_ranks in reports.items():
        for rank in host_ranks:
            claims.setdefault(rank["rank"], []).append(dict(rank, inventory_host=host))
    ranks = {number: found[0] for number, found in claims.items() if len(found) == 1}
    problems = [f"{' and '.join(r['inventory_host'] for r in found)} each report rank {number}"
                for number, found in sorted(claims.items()) if len(found) > 1]
    return ranks, max((r["world_size"] for r in ranks.values()), default=0), problems


MAX_REPORT_BYTES = 64 << 20


def _host_report(path: str, host: str):
    """(the host's ranks, None), (None, None) when it sent no report, or (None, why its report is unusable)."""
    try:
        with open(path, "rb") as fh:
            data = fh.read(MAX_REPORT_BYTES + 1)
    except OSError:
        return None, None
    try:
        if len(data) > MAX_REPORT_BYTES:
            raise ValueError(f"larger than {MAX_REPORT_BYTES >> 20} MiB")
        return checked_ranks(json.loads(data)), None
    except (ValueError, RecursionError) as exc:
        return None, f"{host} sent an unusable burn-in report ({str(exc)[:200]})"


def _host_setup_errors(host: str, state) -> list:
    """A host whose burn-in command could not run (unreachable, no gpuprep there, bad input on that host)
    is a setup problem of that host, not a failed rank."""
    from . import setup_errors
    problems = []
    for failure in state.failures:
        text = failure.message
        error = _error_document(failure.stdout)
        if failure.unreachable:
            problems.append(f"{host} is unreachable: {text.splitlines()[0] if text else ''}")
        elif "No such file or directory" in text and "gpuprep" in text:
            problems.append(f"{host} has no gpuprep to run: install gpuprep[burnin] there (on its PATH, or name it "
                            "with the inventory variable burnin_gpuprep)")
        elif error:
            problems.append(f"{host}: {error}")
        else:
            problems += [f"{host}: {meaning}" for meaning in setup_errors(text)]
    return problems


def _error_document(stdout: str):
    """The error of the JSON error document `gpuprep burnin --json` printed on that host, if it printed one."""
    from ..report import ERROR_SCHEMA
    try:
        document = json.loads(stdout)
    except ValueError:
        return None
    if isinstance(document, dict) and document.get("schema") == ERROR_SCHEMA and isinstance(document.get("error"), str):
        return document["error"].strip().splitlines()[0] if document["error"].strip() else None
    return None
