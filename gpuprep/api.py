"""gpuprep as a library: what the commands do, called with plain arguments, returning typed results and raising
gpuprep's own exceptions (errors.BadInput for input that cannot be used, errors.GpuprepError for the rest), worded
without command-line flags. The CLI and the node probe call these; so can a Python user or a test:

    from gpuprep import api
    result = api.check(sources=["nvidia-smi-q.txt"])          # or api.check() for this host
    if result.verdict == "fail":
        for finding in result.failed:
            print(finding.id, finding.subject, finding.remedy)
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Dict, List, Optional, Sequence, Set, Union

from .errors import BadInput, bad_argument
from .rules import Finding, worst

if TYPE_CHECKING:       # imported where a snapshot is made or checked: diagnose starts without its dataclasses
    from .snapshot import Snapshot


@dataclass
class CheckResult:
    """One host judged: its facts, the findings kept, and the ones a skip/only filter removed."""
    snapshot: Snapshot
    findings: List[Finding]
    waived: List[Finding] = field(default_factory=list)
    profile: Optional[str] = None
    settings: Dict[str, Any] = field(default_factory=dict)     # the profile's settings (act_on, thresholds)

    @property
    def verdict(self) -> str:
        """fail, warn, info or pass: the worst finding kept; info when nothing, or a whole side, was not judged."""
        from .rules import check_verdict
        return check_verdict(self.findings, self.snapshot)

    @property
    def failed(self) -> List[Finding]:
        return [f for f in self.findings if f.severity == "fail"]

    def document(self) -> dict:
        """The versioned JSON document `gpuprep check --json` prints."""
        from .report import check_document
        return check_document(self.snapshot, self.findings, self.waived, self.profile)


def snapshot(sources: Sequence[str] = (), *, root: str = "/", docker: bool = True, deep: bool = False,
             allow_mixed: bool = False, dcgm_level: int = 1) -> Snapshot:
    """This host's facts, or the facts in captures of one host (`sources`: nvidia-smi, topo -m, numactl, lscpu,
    kernel logs, snapshots; sniffed by content). `deep` also starts containers (the GPU smoke test) and runs DCGM's
    diagnostics at `dcgm_level` (1 by default; 2-4 load the GPUs for minutes) where DCGM is installed."""
    from . import arguments as a
    a.texts("sources", sources)
    a.text("root", root, optional=False)
    for name, value in (("docker", docker), ("deep", deep), ("allow_mixed", allow_mixed)):
        a.flag(name, value)
    if dcgm_level not in (1, 2, 3, 4) or isinstance(dcgm_level, bool):
        raise bad_argument("dcgm_level", f"{dcgm_level!r}: DCGM's levels are 1 to 4")
    if deep and (sources or not docker):
        raise BadInput(lambda name: f"{name('deep')} starts containers on this host: not with captures "
                                    f"({name('sources')}), nor without Docker")
    if sources:
        from .parsers import import_files
        return import_files(list(sources), allow_mixed)
    from .probe import collect
    return collect(root=root, docker=docker, deep=deep, dcgm_level=dcgm_level)


def profile(name_or_path: Optional[str]) -> Dict[str, Any]:
    """A node profile (dev, training, inference, or a TOML file); {} for none."""
    if not name_or_path:
        return {}
    from .profiles import load
    return load(name_or_path)


def check(sources: Sequence[str] = (), *, facts: Optional[Snapshot] = None, profile_name: Optional[str] = None,
          require_gpu: bool = False, skip: Sequence[str] = (), only: Sequence[str] = (), root: str = "/",
          docker: bool = True, deep: bool = False, allow_mixed: bool = False, dcgm_level: int = 1,
          baseline: Union[Snapshot, str, None] = None) -> CheckResult:
    """Judge one host: `facts` if given, else `sources` (captures), else this host. `skip`/`only` take check ids
    or areas (gpu, driver, ...); what they remove is returned as `waived`, never dropped silently. `baseline`, a
    snapshot of this node when it was known good (`gpuprep snapshot -o`, or that file's path), adds what changed since, with the fleet
    drift's ids (driver, firmware, clocks, link widths, GPU count, NIC rates...)."""
    from . import arguments as a
    from .rules import Context, check_filters, judge_all, select
    a.texts("sources", sources), a.texts("skip", skip), a.texts("only", only)
    a.text("profile_name", profile_name)
    a.flag("require_gpu", require_gpu)
    a.snapshot("facts", facts)
    check_filters(skip, only)
    baseline = _baseline_snapshot(baseline)
    context = Context(profile=profile(profile_name), require_gpu=require_gpu)
    snap = facts if facts is not None else snapshot(sources, root=root, docker=docker, deep=deep,
                                                   allow_mixed=allow_mixed, dcgm_level=dcgm_level)
    judged = judge_all(snap, context)
    if baseline is not None:
        from .report import host_name
        from .rules.drift import drift_findings, fleet_drift
        judged += drift_findings(fleet_drift({host_name(snap): snap}, baseline), host_name(baseline))
    kept, waived = select(judged, skip, only)
    return CheckResult(snap, kept, waived, profile_name, context.profile)


def _baseline_snapshot(baseline: Union[Snapshot, str, None]) -> Optional[Snapshot]:
    from .snapshot import Snapshot
    if baseline is None or isinstance(baseline, Snapshot):
        return baseline
    import os
    if not isinstance(baseline, str) or not os.path.isfile(baseline):
        raise bad_argument("baseline", f"{str(baseline)[:200]}: for one host, a Snapshot or a snapshot file "
                                       "(gpuprep snapshot -o FILE)")
    from .parsers import import_files
    from .rules.drift import FACTS
    snap = import_files([baseline])
    if all(fact.value(snap) is None for fact in FACTS):
        # nothing to compare with would read as "nothing changed"
        raise bad_argument("baseline", f"{baseline[:200]}: holds none of the facts drift compares (driver, GPUs, "
                                       "CUDA, NICs...): give a snapshot of a known-good node (gpuprep snapshot -o FILE)")
    return snap


def plan(facts: Optional[Snapshot] = None, *, sources: Sequence[str] = (), ranks: Optional[int] = None,
         mode: str = "exclusive", visible: Optional[str] = None, allowed: Optional[Set[int]] = None):
    """A per-rank launch plan (plan.LaunchPlan) for `facts`, captures, or this host. `visible` is
    CUDA_VISIBLE_DEVICES as written (indexes or UUIDs); `allowed` the CPUs the job may use."""
    from . import arguments as a
    from .plan import MODES, make_plan, visible_gpus
    a.texts("sources", sources)
    a.whole("ranks", ranks, minimum=1, optional=True)
    a.choice("mode", mode, MODES)
    a.text("visible", visible)
    a.snapshot("facts", facts)
    if facts is None and sources:
        from .parsers import import_files
        facts = import_files(list(sources), allow_mixed=True)
    if facts is None:
        from .probe import topology_facts
        facts = topology_facts(uuids=bool(visible) and not visible.replace(",", "").strip().isdigit())
    return make_plan(facts, nproc=ranks, mode=mode, visible=visible_gpus(visible, facts), allowed=allowed)


def compat(driver: str, *, cuda: Optional[str] = None, cudnn: Optional[str] = None, torch: Optional[str] = None,
           gpu: Optional[str] = None, cc: Optional[str] = None) -> List[Finding]:
    """Will this driver run this CUDA / cuDNN / PyTorch wheel on this GPU? No host needed."""
    from .rules.compat import judge_combination
    return judge_combination(driver, cuda, cudnn, torch, gpu, cc)


@dataclass
class ApplyResult:
    """One apply or revert run: per-host results (`outcome.state.hosts`), where its records are, and whether every
    host succeeded. `interrupted_by` is the signal that cancelled it, if any."""
    playbook: str
    check: bool
    outcome: Any        # ansible.runner.ApplyOutcome

    @property
    def succeeded(self) -> bool:
        state = self.outcome.state
        return state.finished and all(h.succeeded and h.final for h in state.hosts.values())

    @property
    def hosts(self) -> Dict[str, Any]:
        return dict(self.outcome.state.hosts)

    @property
    def interrupted_by(self) -> Optional[int]:
        return self.outcome.signal

    def document(self) -> dict:
        from .report import apply_document
        return apply_document(self.playbook, self.check, self.succeeded, self.outcome)


PROBE_ROLES = ("gpuprep_agent", "slurm_health")    # each takes ROLE_pyz, the probe zipapp, which apply passes


def _playbook(playbook: str, inventory: Optional[str], *, local: bool, limit: Optional[str], forks: Optional[int],
              variables: Optional[Dict[str, Any]], internal: Dict[str, Any], tags: Sequence[str],
              skip_tags: Sequence[str], check: bool, diff: bool, mitogen: bool, verbosity: int,
              timeout: Optional[int], connection, on_update, on_output) -> ApplyResult:
    from . import arguments as a
    from .ansible.runner import ApplyRequest, run
    a.text("inventory", inventory), a.text("limit", limit)
    a.whole("forks", forks, minimum=1, optional=True)
    a.mapping("variables", variables)
    a.texts("tags", tags), a.texts("skip_tags", skip_tags)
    for name, value in (("local", local), ("check", check), ("diff", diff), ("mitogen", mitogen)):
        a.flag(name, value)
    a.whole("verbosity", verbosity, minimum=0, maximum=6)
    a.whole("timeout", timeout, minimum=1, optional=True)
    if local and inventory:
        raise BadInput(lambda name: f"give either {name('inventory')} INVENTORY or {name('local')}, not both")
    request = ApplyRequest(playbook=playbook, inventory=inventory, limit=limit, local=local, forks=forks,
                           extravars=dict(variables or {}), internal_vars=internal, tags=list(tags),
                           skip_tags=list(skip_tags), check=check, diff=diff, mitogen=mitogen, verbosity=verbosity,
                           timeout=timeout, connection=connection)
    return ApplyResult(playbook, check, run(request, on_update, on_output))


def apply(inventory: Optional[str] = None, *, local: bool = False, limit: Optional[str] = None,
          forks: Optional[int] = None, variables: Optional[Dict[str, Any]] = None, tags: Sequence[str] = (),
          skip_tags: Sequence[str] = (), check: bool = False, diff: bool = False, full: bool = False,
          mitogen: bool = True, verbosity: int = 0, timeout: Optional[int] = None, connection=None,
          on_update=None, on_output=None) -> ApplyResult:
    """Run the roles (every one, or `tags`) on the inventory's hosts, or this machine with `local`. `variables`
    are role variables (secret: redacted from every record); `check`/`diff` change nothing and show what would
    change; `full` runs every task even in roles whose host still holds their last full run's result."""
    from . import arguments as a
    a.flag("full", full), a.texts("tags", tags), a.mapping("variables", variables)
    internal: Dict[str, Any] = {"gpuprep_fast_rerun": False} if full else {}
    for role in PROBE_ROLES:     # roles that install this very gpuprep's probe on the node
        if role in tags and f"{role}_pyz" not in (variables or {}):
            from .zipapp import probe_zipapp
            internal[f"{role}_pyz"] = probe_zipapp()
    return _playbook("apply.yml", inventory, local=local, limit=limit, forks=forks, variables=variables,
                     internal=internal, tags=tags, skip_tags=skip_tags, check=check, diff=diff, mitogen=mitogen,
                     verbosity=verbosity, timeout=timeout, connection=connection, on_update=on_update,
                     on_output=on_output)


def revert(inventory: Optional[str] = None, *, local: bool = False, limit: Optional[str] = None,
           forks: Optional[int] = None, variables: Optional[Dict[str, Any]] = None, tags: Sequence[str] = (),
           mitogen: bool = True, verbosity: int = 0, timeout: Optional[int] = None, connection=None,
           on_update=None, on_output=None) -> ApplyResult:
    """Put back what apply recorded, for every role or the roles in `tags`."""
    from . import arguments as a
    from .ansible.runner import role_names
    roles = role_names()
    unknown = [t for t in a.texts("tags", tags) if t not in roles]
    if unknown:
        raise bad_argument("tags", f"{', '.join(unknown)}: unknown role(s) (roles: {', '.join(roles)})")
    return _playbook("revert.yml", inventory, local=local, limit=limit, forks=forks, variables=variables,
                     internal={}, tags=tags, skip_tags=(), check=False, diff=False, mitogen=mitogen,
                     verbosity=verbosity, timeout=timeout, connection=connection, on_update=on_update,
                     on_output=on_output)


@dataclass
class BurninResult:
    """A burn-in judged: the ranks' results (`run`), the findings, the backend that ran, the time asked for."""
    run: Any            # burnin.RunResult
    findings: List[Finding]
    backend: str
    seconds: float

    @property
    def verdict(self) -> str:
        return worst(self.findings)

    def document(self) -> dict:
        from .report import burnin_document
        return burnin_document(self.run, self.findings, self.backend, self.seconds)


def store_burnin(document: dict, path: str) -> int:
    """Keep a burn-in report's GPUs in the results store at `path` (a SQLite file, created when missing, or a
    PostgreSQL URL: postgresql://USER@HOST[:PORT]/DATABASE, the password in PGPASSWORD); rows written."""
    from . import arguments as a
    from .store import record
    a.text("store", path, optional=False)
    return record(path, document)


def ready_store(path: str) -> None:
    """The results store at `path` reachable and of this gpuprep's schema (made when missing): checked before a
    burn-in starts, so a wrong URL or file costs no run."""
    from . import arguments as a
    from .store import open_store
    a.text("store", path, optional=False)
    with open_store(path):
        pass


def compare_with_fleet(result: "BurninResult", path: str, days: float = 90) -> None:
    """Add to `result` each GPU's judgement against the same model's GPUs in the results store."""
    from .burnin.peers import against_fleet
    from .store import history, rows_of
    past = history(path, since_days=days, create=True)      # a store not there yet: no peers yet (the run is kept)
    result.findings += against_fleet(rows_of(result.document()), past)


def fleet_report(path: str, *, days: float = 90) -> dict:
    """`gpuprep fleet report`: the store's GPUs judged against their model and their own history (a document)."""
    from .burnin.peers import fleet_report as judged
    from .report import envelope, summary
    from .rules import worst
    from .store import history, shown
    past = history(path, since_days=days)
    findings = judged(past)
    return envelope("gpuprep.fleet-report/1", worst(findings) if findings else "info", summary(findings),
                    store=shown(path), days=days, models={model: len(series) for model, series in past.items()},
                    findings=[f.to_dict() for f in findings])


def burnin_ranks(ranks: Optional[int], backend: str = "auto"):
    """(backend, ranks per node) a burn-in on this host uses: nccl with one rank per GPU where there are GPUs,
    else gloo with 2 ranks."""
    from .burnin import detect_gpus
    gpus = detect_gpus()
    if backend == "nccl" and not gpus:
        raise bad_argument("backend", "nccl needs NVIDIA GPUs; this host has none (use gloo)")
    chosen = backend if backend != "auto" else ("nccl" if gpus else "gloo")
    if ranks is None:
        return chosen, (gpus if chosen == "nccl" else 2)
    if ranks < 1:
        raise bad_argument("ranks", f"{ranks} is not a positive number")
    return chosen, ranks


def burnin(seconds: float = 60.0, *, ranks: Optional[int] = None, backend: str = "auto", nnodes: int = 1,
           node_rank: int = 0, master: Optional[str] = None, rdzv_timeout: float = 60.0,
           inventory: Optional[str] = None, connection=None, on_start=None, on_progress=None,
           baseline: Optional[str] = None) -> BurninResult:
    """Train a small DDP model on every rank for `seconds` (torchrun), sweep all-reduce bandwidth, check GPU
    memory, and judge the ranks together. With `inventory`, on every host of it (the first is the rendezvous);
    with `nnodes` > 1, this host is node `node_rank` of a run whose rendezvous is `master` (HOST:PORT).
    `on_start(backend, ranks_per_node)` is called once the run is about to start on this host. `baseline`: a
    passing burn-in report of this node (`burnin --json -o`) whose all-reduce sweep this run is held to (read before
    the run: a bad one is BadInput naming the file and field; on one node, it must be this node's own run)."""
    from . import arguments as a
    from .burnin import torch_problem
    from .burnin.torchrun import launch
    from .burnin.judge import judge
    a.seconds("seconds", seconds)
    a.whole("ranks", ranks, minimum=1, optional=True)
    a.choice("backend", backend, ("auto", "nccl", "gloo"))
    a.whole("nnodes", nnodes, minimum=1), a.whole("node_rank", node_rank, minimum=0)
    a.seconds("rdzv_timeout", rdzv_timeout)
    a.text("master", master), a.text("inventory", inventory)
    known_good = burnin_baseline(a.text("baseline", baseline), this_node=not inventory) if baseline else None
    if node_rank >= nnodes:
        raise bad_argument("node_rank", lambda name: f"{node_rank} must be below {name('nnodes')} {nnodes}")
    if nnodes > 1 and not master:
        raise bad_argument("nnodes", lambda name: f"> 1 needs {name('master')} HOST:PORT (the rendezvous on node rank 0)")
    if master and nnodes == 1 and not inventory:
        raise bad_argument("master", lambda name: f"is for a multi-node run: give {name('nnodes')} N (and "
                                                  f"{name('node_rank')}), or {name('inventory')} INVENTORY")
    if inventory:
        from .burnin.remote import run_fleet
        run = run_fleet(inventory, seconds, "auto" if ranks is None else str(ranks), backend, master, rdzv_timeout,
                        connection=connection)
        chosen = next(iter(run.ranks.values()))["backend"] if run.ranks else backend
    else:
        problem = torch_problem()
        if problem:
            raise BadInput(problem)
        chosen, per_node = burnin_ranks(ranks, backend)
        if chosen == "nccl":
            from .burnin import gpu_preflight
            gpu_preflight()
        if on_start:
            on_start(chosen, per_node)
        run = launch(seconds, per_node, chosen, nnodes=nnodes, node_rank=node_rank, master=master,
                     rdzv_timeout=rdzv_timeout, on_progress=on_progress)
    return BurninResult(run, judge(run, known_good), chosen, seconds)


def burnin_baseline(path: str, this_node: bool = True):
    """The known-good run a burn-in report at `path` gives (burnin.report_schema.Baseline); BadInput naming the file
    and the field otherwise. A FIFO or device is refused, never waited on; a report past the size limit is not read
    in part."""
    import json
    from .burnin.report_schema import baseline_from
    import os
    from .slurm import REPORT_LIMIT, read_regular
    try:
        data = read_regular(os.path.realpath(path), REPORT_LIMIT + 1)
        if len(data) > REPORT_LIMIT:
            raise ValueError(f"larger than {REPORT_LIMIT >> 20} MiB: not a burn-in report")
        document = json.loads(data)
    except (OSError, ValueError, RecursionError) as exc:
        raise BadInput(f"{path}: {str(getattr(exc, 'strerror', None) or exc)[:160]}") from None
    import socket
    import time
    try:
        return baseline_from(document, path, host=socket.gethostname() if this_node else None, now=time.time())
    except ValueError as exc:
        raise BadInput(f"{path}: {exc}") from None


@dataclass
class JobResult:
    """A training job judged, from its profiler traces (diagnose: `facts` a job.facts.JobFacts) or from samples of
    it running (watch: a job.facts.WatchFacts): each rank's facts and the findings (job.* ids)."""
    facts: Any
    findings: List[Finding]
    node: Optional[Snapshot] = None

    @property
    def verdict(self) -> str:
        return worst(self.findings)

    def document(self) -> dict:
        """The versioned JSON document `gpuprep diagnose --json` or `gpuprep watch --json` prints."""
        from .job.facts import WatchFacts
        from .report import diagnose_document, watch_document
        build = watch_document if isinstance(self.facts, WatchFacts) else diagnose_document
        return build(self.facts, self.findings, self.node)


DiagnoseResult = WatchResult = JobResult      # the names each command's users know


def diagnose(paths: Sequence[str], *, node: Optional[Snapshot] = None) -> JobResult:
    """Why a training job under-uses its GPUs, from its PyTorch profiler (Kineto) traces: `paths` are trace files
    (.json, .json.gz) or directories of them, one file per rank. `node`, the snapshot of the host the job ran on
    (api.snapshot()), joins what the node explains (its PCIe links, NUMA layout, throttling, NCCL transport).
    Traces are read streaming; a file that is not a trace raises BadInput naming it and the byte offset."""
    from . import arguments as a
    from .job import diagnose_traces
    from .job.judge import Job, judge
    if isinstance(paths, (str, bytes)) or not all(isinstance(p, str) for p in paths or ()):
        raise bad_argument("paths", "must be a list of file or directory paths (text)")
    if not paths:
        raise bad_argument("paths", "names no trace: give trace files or a directory of them")
    a.snapshot("node", node)
    facts = diagnose_traces(list(paths))
    return JobResult(facts, judge(Job(facts, node)), node)


@dataclass
class CompareResult:
    """Two diagnoses of one job, before and after a change, and what changed (job.compare-* findings)."""
    before: JobResult
    after: JobResult
    findings: List[Finding]

    @property
    def verdict(self) -> str:
        return worst(self.findings)

    def document(self) -> dict:
        from .report import compare_document
        return compare_document(self.before.document(), self.after.document(), self.findings)


def compare(before: Sequence[str], after: Sequence[str]) -> CompareResult:
    """`gpuprep diagnose --compare`: the job's traces before and after a fix (a trace or a directory each), the
    change in step time (noise when within the before run's own spread) and whether each cause named before is gone."""
    from .job.compare import compare as changes
    first, second = diagnose(list(before)), diagnose(list(after))
    return CompareResult(first, second, changes(first.facts, second.facts, first.findings, second.findings))


def watch(pid: Optional[int] = None, *, command: Optional[Sequence[str]] = None, seconds: Optional[float] = None,
          interval: float = 1.0, node: Optional[Snapshot] = None, on_sample=None, job_stdout=None,
          until: Optional[str] = None) -> JobResult:
    """Why a running job under-uses its GPUs, sampled from outside it without touching its code: `pid` (a torchrun
    agent, a rank, or any process whose children are the ranks), or `command`, which this starts (with NCCL's log
    and PyTorch's flight recorder on) and waits for. Samples every `interval` s for `seconds` (None: until the job
    ends or Ctrl-C). `node` (api.snapshot()) joins the node's facts. `on_sample(facts, findings)` is called per
    sample with the facts so far (job.facts.WatchFacts) and their findings (the verdict so far); `job_stdout`, where
    a started job's output goes (None: this process's standard output). `until` (warn or fail, with `pid`): stop
    once a problem that bad has stood for UNTIL_SAMPLES samples in a row."""
    from . import arguments as a
    from .job.run import watch_job
    if (pid is None) == (command is None):
        raise bad_argument("pid", "give a process id or a command to start, not both and not neither")
    if pid is not None:
        a.whole("pid", pid, minimum=1)
    if command is not None and not a.texts("command", command):
        raise bad_argument("command", "is empty")
    a.seconds("seconds", seconds, optional=True)
    a.seconds("interval", interval)
    a.snapshot("node", node)
    if until is not None and command is not None:
        raise bad_argument("until", "stops the watch, not a job it started: watch a running job by its pid")
    from .job.facts import JobFacts
    from .job.judge import Job, judge
    standing = _Standing(until)

    def so_far(facts) -> bool:
        found = judge(Job(JobFacts([]), node, facts))
        if on_sample:
            on_sample(facts, found)
        return standing.stands(found)
    facts = watch_job(pid, list(command) if command is not None else None, seconds, interval, so_far, job_stdout)
    return JobResult(facts, judge(Job(JobFacts([]), node, facts)), node)


def watch_slurm_job(job_id: str, *, seconds: Optional[float] = None, interval: float = 1.0, on_sample=None,
                    until: Optional[str] = None, drain: bool = False, srun: str = "srun",
                    scontrol: str = "scontrol") -> JobResult:
    """`gpuprep watch --job`: a running Slurm job on all its nodes, one watcher a node started as a step of the job
    (srun --overlap), merged and judged as one job: the dead, hung, desynchronised or slow rank with its node and
    GPU, and whether the node or the code is at fault. Each problem says how long after the start of the watch it
    was first seen. `until` (warn or fail): stop once a problem that bad has stood for UNTIL_SAMPLES samples.
    `drain`: drain the node at fault (a node answer only)."""
    import time
    from . import arguments as a
    from .job.facts import JobFacts
    from .job.judge import Job, judge
    from .job.slurmjob import drain_at_fault, watch_job_nodes
    a.text("job_id", job_id, optional=False)
    a.seconds("seconds", seconds, optional=True)
    a.seconds("interval", interval)
    a.flag("drain", drain)
    seen: dict = {}
    standing = _Standing(until)
    held: dict = {}

    def so_far(facts) -> bool:
        found = judge(Job(JobFacts([], facts.collectives), None, facts))
        for f in found:
            if f.severity in ("warn", "fail"):
                seen.setdefault((f.id, f.subject), (round(facts.seconds, 1), round(time.time(), 3)))
        if on_sample:
            on_sample(facts, found)
        if not standing.stands(found):
            return False
        # the answer node or code rests on the node's own check, which arrives once it has run there: wait for it
        # (bounded), so that a problem seen early is not left "not known" only for being seen early
        held.setdefault("since", facts.seconds)
        return not _node_check_due(facts, found) or facts.seconds - held["since"] >= NODE_CHECK_WAIT_S
    facts = watch_job_nodes(job_id, seconds, interval, so_far, srun=srun, scontrol=scontrol)
    findings = judge(Job(JobFacts([], facts.collectives), None, facts))
    for f in findings:
        if f.severity in ("warn", "fail"):
            after, at = seen.get((f.id, f.subject), (round(facts.seconds, 1), round(time.time(), 3)))
            f.evidence.update(seen_after_s=after, seen_at=at)
    if drain:
        findings += drain_at_fault(findings, scontrol)
    return JobResult(facts, findings, None)


def watch_inventory_job(inventory: str, master: str, *, seconds: float, interval: float = 1.0,
                        limit: Optional[str] = None, connection=None) -> JobResult:
    """`gpuprep watch -i`: a job across the hosts of an Ansible inventory, without Slurm. One watcher a host, started
    through Ansible, samples for `seconds` the ranks there that meet at `master` (ADDR:PORT, their MASTER_ADDR and
    MASTER_PORT); the hosts' samples are merged and judged as one job, as watch_slurm_job does. `connection`: how
    the hosts are reached (gpuprep.ansible.runner.Connection: user, key, become)."""
    from . import arguments as a
    from .job.facts import JobFacts
    from .job.inventoryjob import watch_inventory_nodes
    from .job.judge import Job, judge
    a.text("inventory", inventory, optional=False)
    a.text("master", master, optional=False)
    a.seconds("seconds", seconds)
    a.seconds("interval", interval)
    a.text("limit", limit, optional=True)
    facts = watch_inventory_nodes(inventory, master, seconds, interval, limit=limit, connection=connection)
    return JobResult(facts, judge(Job(JobFacts([], facts.collectives), None, facts)), None)


UNTIL_SAMPLES = 3       # watch --until: a problem must stand this many samples in a row (one odd sample is noise)
NODE_CHECK_WAIT_S = 90  # watch --until: how long a standing problem waits for its node's own check (minutes, if
                        # ever, means the check hangs there; the answer is then "not known", and says why)


class _Standing:
    """watch --until: whether a problem this bad (warn or fail; None: never) has stood for UNTIL_SAMPLES samples in
    a row, fed each sample's findings."""

    def __init__(self, until: Optional[str]):
        if until not in (None, "warn", "fail"):
            raise bad_argument("until", "is warn or fail")
        self.until, self.counts = until, {}

    def stands(self, found) -> bool:
        from .rules import SEVERITY_RANK
        if self.until is None:
            return False
        bad = {(f.id, f.subject) for f in found if SEVERITY_RANK[f.severity] <= SEVERITY_RANK[self.until]}
        self.counts = {key: self.counts.get(key, 0) + 1 for key in bad}
        return any(n >= UNTIL_SAMPLES for n in self.counts.values())


def _node_check_due(facts, found) -> bool:
    """Whether a culprit's answer node-or-code is "not known" only because its node's own check has not arrived
    yet from a watcher that still answers."""
    lost = {r.host for r in facts.ranks if r.node_lost}
    return any(f.id == "job.node-or-code" and f.evidence.get("fault") == "unknown" and
               (facts.nodes or {}).get(f.evidence.get("host")) is None and f.evidence.get("host") not in lost
               for f in found)


def node_problems() -> dict:
    """This node's own check as a job's watcher sends it (the verdict node or code rests on it): whether its GPUs
    were judged, and its problems (warn and fail) with id, severity, subject and words."""
    from .rules import not_judged
    try:
        result = check(facts=snapshot(docker=False))
    except Exception as exc:        # noqa: BLE001 (the job's watch goes on without it, and says so)
        return {"judged": False, "problems": [], "not_judged": [f"the node's check failed: {str(exc)[:200]}"]}
    problems = [{"id": f.id, "severity": f.severity, "subject": str(f.subject)[:80], "message": f.title[:400]}
                for f in result.findings if f.severity in ("warn", "fail")]
    unjudged = not_judged(result.snapshot)
    return {"judged": not unjudged, "problems": problems[:200], "not_judged": [w[:200] for w in unjudged[:10]]}


# --- fleets -------------------------------------------------------------------------------------------------

def saved_fleet(sources: Sequence[str]):
    """The members (fleet.Member) when `sources` name a saved fleet (a directory of snapshots, or snapshot
    files of several hosts), else None: the files are one host's captures."""
    from . import arguments as a
    from .fleet import saved_fleet as members
    return members(list(a.texts("sources", sources)))


def gather_fleet(inventory: str, *, limit: Optional[str] = None, forks: Optional[int] = None, connection=None,
                 on_update=None):
    """Every host of an Ansible inventory probed (the probe zipapp runs there with python3; nothing installed):
    (members, the signal that cancelled the run or None). A host that could not be probed is a member with a status
    and a problem, never left out."""
    from . import arguments as a
    from .fleet import gather
    a.text("inventory", inventory, optional=False)
    members, outcome = gather(inventory, limit, forks, on_update, connection=connection)
    return members, outcome.signal


def save_fleet(members, directory: str) -> List[str]:
    """One snapshot file per member in `directory` (an existing directory); returns the paths written."""
    import os

    from .fleet import save
    if not os.path.isdir(directory):
        raise bad_argument("directory", f"{directory}: not an existing directory (one snapshot file per host)")
    return save(members, directory)


@dataclass
class FleetCheckResult:
    """A fleet judged (fleet.FleetResult) and the signal that cancelled its gathering, if one did."""
    fleet: Any
    cancelled: Optional[int] = None

    @property
    def verdict(self) -> str:
        return self.document()["verdict"]

    def document(self) -> dict:
        from .report import fleet_document
        return fleet_document(self.fleet)


def check_fleet(members=None, *, inventory: Optional[str] = None, limit: Optional[str] = None,
                forks: Optional[int] = None, connection=None, on_update=None, profile_name: Optional[str] = None,
                require_gpu: bool = False, skip: Sequence[str] = (), only: Sequence[str] = (),
                baseline: Optional[str] = None) -> FleetCheckResult:
    """Judge a fleet: `members` (saved_fleet()), or every host of `inventory`, each by the rules of one host, plus
    the drift between them (against `baseline`, a member's name or a snapshot file, instead of the majority)."""
    from . import arguments as a
    from .fleet import judge_fleet
    from .rules import Context, check_filters
    if (members is None) == (inventory is None):
        raise bad_argument("members", "give the saved members or an inventory, not both and not neither")
    a.texts("skip", skip), a.texts("only", only), a.text("baseline", baseline)
    check_filters(skip, only)
    context = Context(profile=profile(profile_name), require_gpu=require_gpu)
    cancelled = None
    if inventory is not None:
        members, cancelled = gather_fleet(inventory, limit=limit, forks=forks, connection=connection,
                                          on_update=on_update)
    return FleetCheckResult(judge_fleet(members, context, skip, only, baseline), cancelled)


# --- what a scheduler or a monitor runs on the node ---------------------------------------------------------

def _judged(sources: Sequence[str], profile_name: Optional[str], skip: Sequence[str], only: Sequence[str],
            require_gpu: bool = False):
    """(the check's result, the findings its profile says to act on) for this host or the captures given."""
    from . import adapters
    result = check(sources, profile_name=profile_name, docker=False, skip=skip, only=only, allow_mixed=True,
                   require_gpu=require_gpu)
    return result, adapters.problems(result.findings, result.settings)


def npd(sources: Sequence[str] = (), *, profile_name: Optional[str] = None, skip: Sequence[str] = (),
        only: Sequence[str] = (), require_gpu: bool = False):
    """node-problem-detector's custom plugin protocol: (exit code 0 healthy or 1 a problem, one line of at most 80
    characters). What cannot be judged raises; adapters.npd_unknown words it as the plugin's unknown (2).
    `require_gpu`: a host whose GPUs could not be judged is a problem (GPU nodes), else it is said, never "healthy"."""
    from . import adapters
    from .rules import not_judged
    result, found = _judged(sources, profile_name, skip, only, require_gpu)
    return adapters.npd(found, not_judged(result.snapshot), require_gpu)


def nagios(sources: Sequence[str] = (), *, profile_name: Optional[str] = None, skip: Sequence[str] = (),
           only: Sequence[str] = (), require_gpu: bool = False):
    """The Nagios/Icinga plugin protocol: (0 OK, 1 WARNING or 2 CRITICAL, one status line with performance data).
    What cannot be judged raises; adapters.nagios_unknown words it as UNKNOWN (3)."""
    from . import adapters
    from .rules import not_judged
    result, found = _judged(sources, profile_name, skip, only, require_gpu)
    return adapters.nagios(result.findings, found, not_judged(result.snapshot), require_gpu)


def slurm_hook(hook: str, *, sources: Sequence[str] = (), profile_name: Optional[str] = None,
               skip: Sequence[str] = (), only: Sequence[str] = (), node: Optional[str] = None,
               scontrol: str = "scontrol", require_burnin: Optional[str] = None, burnin_within: Optional[str] = None,
               baseline_dir: str = "/run/gpuprep/slurm", budget: float = 45.0, job_report: Optional[str] = None,
               drain_slow_gpu: Optional[str] = None):
    """Slurm's HealthCheckProgram, Prolog or Epilog (`hook`): judge this node within `budget` seconds (from this
    call; the hook command counts from its interpreter's start) under the node's lock, then drain it with gpuprep's reason, resume a node gpuprep drained
    once healthy (and, with `require_burnin`, after a passing burn-in report), or leave it. With `job_report` (a
    directory), the epilog also writes the job's GPU report there (jobreport.py). With `drain_slow_gpu` (a burn-in
    report of this node), a GPU it names slow against its peers is a problem: the node is drained, the reason naming
    the GPU (by default a slow GPU is a warning in the burn-in report only). Returns (exit code: 1
    when the node fails a health check or prolog, else 0; the line saying what was done). Raises on gpuprep's own
    trouble; the hook's exit policy (probe_main) turns that into "left as it was"."""
    import os
    import time

    from . import adapters, slurm
    from . import arguments as a
    if hook not in slurm.HOOKS:
        raise bad_argument("hook", f"{hook!r}: one of {', '.join(slurm.HOOKS)}")
    a.texts("sources", sources), a.texts("skip", skip), a.texts("only", only)
    a.seconds("budget", budget)
    within = slurm.parse_age(burnin_within) if burnin_within else None
    name = slurm.node_name(node)
    job = os.environ.get("SLURM_JOB_ID", "")
    with slurm.time_limit(budget), slurm.HookLock(baseline_dir).held(0 if hook == "healthcheck" else budget):
        facts_at = time.time()
        facts = snapshot(sources, docker=False, allow_mixed=True)
        start = slurm.since_job_start(hook, job, facts, baseline_dir)
        result = check(facts=facts, profile_name=profile_name, skip=skip, only=only)
        found = adapters.problems(result.findings, result.settings)
        gpus = [v for g in facts.gpus or [] for v in (g.uuid, g.pci_bus_id) if v]
        gate = slurm.Gate(require_burnin, within, name, gpus)      # the Slurm node name this hook judges
        unused = None
        if drain_slow_gpu:
            slow, unused = slurm.slow_gpus(drain_slow_gpu, slurm.Gate(drain_slow_gpu, within, name, gpus), time.time())
            found = found + slow
        outcome = slurm.act(name, found, slurm.Scontrol(scontrol), gate, facts_at=facts_at)
    from .report.sanitize import text_safe
    # a burn-in report's or a watch document's words reach this line: one line each, escaped, never a forged one
    line = text_safe(f"gpuprep slurm {hook}: node {name}: {outcome.action.kind} ({outcome.action.why})" +
                     (f"; slow GPUs not judged: {unused}" if unused else ""))
    if job_report and hook == "epilog" and job:
        line += "\n" + text_safe(slurm.write_job_report(job, start, job_report, os.environ))
    return (1 if found and hook in ("healthcheck", "prolog") else 0), line


# --- the NCCL environment, the node probe, one rank's launch --------------------------------------------------

def nccl_env(sources: Sequence[str] = (), *, root: Optional[str] = None, default_interface: Optional[str] = None,
             socket_ifname: Optional[str] = None, overrides: Optional[Dict[str, str]] = None) -> Dict[str, str]:
    """The variables the nccl_env role writes to /etc/gpuprep/env for this host (or `root`, a chroot or image, as
    the role's sysroot; or the GPUs and, without `root`, the host facts of captures), from the role's own code."""
    from . import arguments as a
    from .ncclenv import environment, facts_from_snapshot, host_facts
    a.texts("sources", sources), a.text("root", root), a.text("default_interface", default_interface)
    snap = snapshot(sources, docker=False) if sources else None
    facts = host_facts(root or "/") if (root or snap is None) else facts_from_snapshot(snap)
    if default_interface:
        facts["default_interface"] = default_interface
    if snap is not None:
        from .snapshot import gpu_count as counted
        gpu_count = counted(snap)          # a capture without GPU facts: unknown, not 0
    else:
        from .burnin import detect_gpus
        gpu_count = detect_gpus()
    return environment(facts, gpu_count, socket_ifname, overrides)


def zipapp(output: str) -> str:
    """Write the node probe as one file (python3 >= 3.8 runs it on a node with nothing installed); its path."""
    from . import arguments as a
    from .output import check_destination
    from .zipapp import build
    a.text("output", output, optional=False)
    check_destination(output)
    return build(output)


def launch(command: Sequence[str], *, plan_file: Optional[str] = None, mode: str = "exclusive") -> None:
    """Become one rank of a torchrun job (exec `command`), placed by the plan: `plan_file` (gpuprep plan --json -o)
    or this host's facts in `mode`. Returns only when it cannot start the command (raising)."""
    from .launch import run
    run(plan_file, mode, list(command), planner=plan)
