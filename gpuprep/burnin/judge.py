"""Pure verdict over the per-rank results of a burn-in run."""
from __future__ import annotations

import dataclasses
import statistics
from dataclasses import dataclass
from typing import Callable, Dict, List, Optional

from ..parsers.nvsmi import THROTTLE_REASONS
from ..rules import Finding, declared, registrar
from . import RunResult
from .peers import MIN_GAP, MIN_GAP_CPU, outlier
from .report_schema import Baseline, EccSample, MemoryCheck, Rank, RankGpu, typed

STRAGGLER_MARGIN = 0.25     # a rank whose compute step is 25% slower than the others' median
# a CPU (gloo) rank's step is a few milliseconds shared with every other process on the host: its median moves by
# more than 25% with the machine's load, so only a rank three times slower than the others is named, as a warning
CPU_STRAGGLER_MARGIN = 2.0
BANDWIDTH_FLOOR = 0.8       # warn below 80% of the expected bus bandwidth for the GPU model
# warn more than 5% below this node's own known-good run at the same message size (SuperBench flags a node whose
# all-reduce busbw drops over 5% below its baseline): the verdict for boxes no published figure covers (PCIe, NVL)
BASELINE_DROP = 0.05
LOAD_POWER_SHARE = 0.7     # a GEMM load sized to the GPU runs at (or is capped near) its power limit


def _label(rank: Rank) -> str:
    bus = f" {rank.pci_bus_id}" if rank.pci_bus_id else ""
    return f"rank {rank.rank} ({rank.host or '?'} {rank.device or '?'}{bus})"


@dataclass
class Ranks:
    """What every burn-in rule reads: the run, the ranks that reported (by rank), and the ones that did not."""
    run: RunResult
    complete: List[Rank]
    missing: List[int]
    baseline: Optional[Baseline] = None


BURNIN_RULES: List[Callable[[Ranks], List[Finding]]] = []
burnin_rule = registrar(BURNIN_RULES)     # in the order their findings are reported


def judge(run: RunResult, baseline: Optional[Baseline] = None) -> List[Finding]:
    if run.setup_errors:
        # the run never had a fair start: naming a rank or the rendezvous would send the operator to the wrong place
        return [Finding("burnin.setup", "fail", "run", "The burn-in could not be set up: " + "; ".join(run.setup_errors),
                        {"errors": run.setup_errors, "log": run.log_tail[-5:]},
                        "Fix the named setup problem and run the burn-in again; no GPU was judged")]
    expected = run.expected_ranks if run.expected_ranks is not None else range(run.world_size)
    ranks = Ranks(run, *_typed_ranks(run, expected), baseline=baseline)
    findings = [f for fn in BURNIN_RULES for f in declared(fn, fn(ranks))]
    if ranks.complete and not any(f.severity == "fail" for f in findings):
        findings.append(_passed(ranks.complete))
    return findings


def _typed_ranks(run: RunResult, expected) -> tuple:
    """(the ranks that reported a well-formed result, typed; the ranks expected that did not): a result that is not
    a rank's result is no report at all."""
    complete = []
    for number in sorted(run.ranks):
        try:
            complete.append(typed(run.ranks[number], f"rank {number}"))
        except ValueError:
            continue
    reported = {rank.rank for rank in complete}
    return complete, [r for r in expected if r not in reported]


@burnin_rule("burnin.rendezvous")
def rendezvous(ranks: Ranks) -> List[Finding]:
    run = ranks.run
    if not run.rendezvous_failed:
        return []
    return [Finding("burnin.rendezvous", "fail", "run",
                    f"Rendezvous did not complete: not all {run.nodes} node(s) joined in time", {"log": run.log_tail[-5:]},
                    "Check that every node runs the burn-in, the master address/port is reachable, "
                    "and NCCL_SOCKET_IFNAME/GLOO_SOCKET_IFNAME name the right interface")]


@burnin_rule("burnin.hang")
def hang(ranks: Ranks) -> List[Finding]:
    """No progress (no step, no collective) for the stall window after the run was due: a wall-clock bound alone
    never makes a hang (a busy host's run that still progresses is burnin.slow-run)."""
    run = ranks.run
    if not run.timed_out:
        return []
    return [Finding("burnin.hang", "fail", "run", f"Burn-in made no progress (no step, no collective) for "
                    f"{stall_seconds(run):.0f} s after it was due, and was killed",
                    {"missing_ranks": ranks.missing, "wall_seconds": round(run.wall_seconds, 1), "log": run.log_tail[-5:]},
                    "A rank hung in a collective: check NCCL_SOCKET_IFNAME, P2P/ACS settings and the kernel log")]


def stall_seconds(run) -> float:
    from .torchrun import stall_window
    return stall_window(run.duration or 0.0)


@burnin_rule("burnin.slow-run")
def slow_run(ranks: Ranks) -> List[Finding]:
    """Stopped at the outer bound while its ranks still made progress: the host was too slow or too busy to finish,
    which judges no rank (nothing hung, nothing died)."""
    run = ranks.run
    if not run.stopped_slow:
        return []
    return [Finding("burnin.slow-run", "warn", "run",
                    f"Burn-in still progressing after {run.wall_seconds:.0f} s (asked for {run.duration or 0:.0f} s) "
                    "and was stopped: its ranks were not judged",
                    {"wall_seconds": round(run.wall_seconds, 1), "duration_s": run.duration,
                     "unreported_ranks": ranks.missing},
                    "Run it when the node is idle (no other job on its CPUs or GPUs), or with a shorter --duration")]


@burnin_rule("burnin.rank-failed", "burnin.rank-aborted")
def missing_ranks(ranks: Ranks) -> List[Finding]:
    """A rank that did not report died, unless torchrun names another rank as the first failure: then it was
    stopped because of that one."""
    run = ranks.run
    culprit = run.root_cause_rank if run.root_cause_rank in ranks.missing else None
    if run.stopped_slow:
        return []       # stopped by the launcher while progressing: burnin.slow-run says so, no rank died
    findings = []
    for rank in ranks.missing:
        if culprit is not None and rank != culprit:
            findings.append(Finding("burnin.rank-aborted", "info", f"rank {rank}",
                                    f"rank {rank} was stopped after rank {culprit} failed"))
            continue
        findings.append(Finding("burnin.rank-failed", "fail", f"rank {rank}",
                                f"rank {rank} died" + (f" with exit code {run.root_cause_exit}"
                                                       if culprit is not None else " or did not complete the burn-in"),
                                {"exit_code": run.root_cause_exit if culprit is not None else run.exit_code,
                                 "log": run.log_tail[-5:]},
                                "Check the GPU and host behind this rank (`gpuprep check`, kernel log Xids)"))
    return findings


@burnin_rule("burnin.no-steps")
def no_steps(ranks: Ranks) -> List[Finding]:
    """A rank that reported without a single timed training step proved nothing about its GPU: it fails, never
    passes on the strength of the collectives alone."""
    return [Finding("burnin.no-steps", "fail", _label(rank), f"{_label(rank)} completed no training step",
                    {"steps": rank.steps, "step_ms": len(rank.step_ms or [])},
                    "Run the burn-in again with a longer --duration; if it repeats, look at what held this rank "
                    "before its first step (the log tail, `gpuprep check`)")
            for rank in ranks.complete if rank.steps == 0 or not rank.step_ms]


PEER_FIGURES = (
    ("compute step", lambda r: statistics.median(r.compute_ms) if r.compute_ms else None, False, "ms"),
    ("peak training power", lambda r: (r.gpu or RankGpu()).training_max_power_w, True, "W"),
    ("lowest SM clock", lambda r: (r.gpu or RankGpu()).min_sm_clock_mhz, True, "MHz"),
)


def _model(rank: Rank) -> str:
    return rank.gpu_name or ("CPU" if rank.device == "cpu" else "unknown GPU")


@burnin_rule("burnin.slow-gpu")
def slow_gpu(ranks: Ranks) -> List[Finding]:
    """Each GPU against the others of its model in this run (median and MAD, not mean and deviation): the slow GPU
    that passes every absolute threshold is named. Fewer than three of a model cannot say which one is slow: the
    pass says so (peer_comparison), never a pass by comparison."""
    return [f for model, members in sorted(_by_model(ranks.complete).items()) if len(members) >= 3
            for f in _slow_members(model, members)]


def _by_model(complete: List[Rank]) -> Dict[str, List[Rank]]:
    by_model: Dict[str, List[Rank]] = {}
    for rank in complete:
        by_model.setdefault(_model(rank), []).append(rank)
    return by_model


def peer_comparison(complete: List[Rank]) -> List[str]:
    """What the peer comparison could judge: '8 NVIDIA H100 80GB HBM3 compared', '2 CPU: too few to compare'."""
    return [f"{len(m)} {model} " + ("compared with each other" if len(m) >= 3 else "rank(s): too few to compare with "
                                    "peers (3 or more of a model are)") for model, m in sorted(_by_model(complete).items())]


def _slow_members(model: str, members: List[Rank]) -> List[Finding]:
    out = []
    for name, read, higher_is_better, unit in PEER_FIGURES:
        values = {r.rank: read(r) for r in members if read(r) is not None}
        if len(values) < 3:
            continue
        for rank in members:
            if rank.rank not in values:
                continue
            peers = [v for k, v in values.items() if k != rank.rank]
            spreads = outlier(values[rank.rank], peers, higher_is_better,
                              MIN_GAP_CPU if rank.device == "cpu" else MIN_GAP)
            if spreads is None:
                continue
            out.append(Finding("burnin.slow-gpu", "warn", _label(rank),
                               f"{_label(rank)} is slow for a {model}: {name} {values[rank.rank]:.1f} {unit} against "
                               f"its peers' median {statistics.median(peers):.1f} {unit}",
                               {"model": model, "figure": name, "value": round(values[rank.rank], 2),
                                "peers_median": round(statistics.median(peers), 2), "peers": len(peers),
                                "spreads": round(spreads, 1) if spreads != float("inf") else None,
                                "host": rank.host, "pci_bus_id": rank.pci_bus_id, "gpu_uuid": rank.gpu_uuid},
                               "Compare this GPU with its neighbours: clocks and throttle reasons, power limit, PCIe "
                               "link and temperature (`gpuprep check`); swap it with a peer to tell the GPU from the "
                               "slot", "SuperBench (peer comparison of the same SKU); median and MAD"))
    return out


@burnin_rule("burnin.straggler")
def straggler(ranks: Ranks) -> List[Finding]:
    if len(ranks.complete) < 2:
        return []
    medians = {r.rank: statistics.median(r.compute_ms) for r in ranks.complete if r.compute_ms}
    findings = []
    for rank in ranks.complete:
        others = [m for k, m in medians.items() if k != rank.rank]
        if rank.rank not in medians or not others:
            continue
        baseline, mine = statistics.median(others), medians[rank.rank]
        on_cpu = rank.device == "cpu"
        if mine > baseline * (1 + (CPU_STRAGGLER_MARGIN if on_cpu else STRAGGLER_MARGIN)):
            findings.append(Finding("burnin.straggler", "warn" if on_cpu else "fail", _label(rank),
                                    f"{_label(rank)} is the straggler: compute step {mine:.1f} ms vs {baseline:.1f} ms",
                                    {"median_compute_ms": round(mine, 2), "others_median_ms": round(baseline, 2)},
                                    "Check this GPU's clocks, temperature and throttle reasons (`gpuprep check`)"))
    return findings


@burnin_rule("burnin.gpu-lost", "burnin.throttle", "burnin.ecc")
def gpu_health(ranks: Ranks) -> List[Finding]:
    """What NVML saw of each rank's GPU during the run: lost, throttled for a hard reason, new uncorrectable ECC."""
    return [f for rank in ranks.complete for f in _gpu_health(rank)]


def _gpu_health(rank: Rank) -> List[Finding]:
    gpu = rank.gpu or RankGpu()
    findings = []
    if gpu.failure:
        findings.append(Finding("burnin.gpu-lost", "fail", _label(rank),
                                f"NVML lost the GPU during the run: {gpu.failure}", {"failure": gpu.failure},
                                "Drain the node; look in the kernel log for the Xid (79, 119, 154 are usual); "
                                "reset the GPU (`nvidia-smi -r`) or reboot"))
    hard = [r for r in gpu.reasons_seen or [] if r in THROTTLE_REASONS]
    if hard:
        counts = gpu.reason_counts or {}
        # nvml.h: HW Slowdown "may be reported during PState or clock change": one sample alone is a warning
        transient = bool(counts) and all(counts.get(r, 0) <= 1 for r in hard)
        findings.append(Finding("burnin.throttle", "warn" if transient else "fail", _label(rank),
                                "GPU throttled during the run: " + ", ".join(hard) +
                                (" (in one sample only: a P-state or clock change can report it)" if transient else ""),
                                {"max_temperature_c": gpu.max_temperature_c, "reason_counts": counts or None,
                                 "min_sm_clock_mhz": gpu.min_sm_clock_mhz},
                                "Check cooling and power delivery; `gpuprep check` for the throttle reasons"))
    before, after = gpu.before or EccSample(), gpu.after or EccSample()
    if (after.ecc_volatile_uncorrected or 0) > (before.ecc_volatile_uncorrected or 0):
        findings.append(Finding("burnin.ecc", "fail", _label(rank), "New uncorrectable ECC errors during the run",
                                {"before": before.ecc_volatile_uncorrected, "after": after.ecc_volatile_uncorrected},
                                "Drain the GPU and reset it; run `dcgmi diag -r 3`"))
    return findings


@burnin_rule("burnin.load-low")
def load_low(ranks: Ranks) -> List[Finding]:
    return [_load_reached(rank) for rank in ranks.complete if _load_fell_short(rank)]


@burnin_rule("burnin.xid")
def new_xids(ranks: Ranks) -> List[Finding]:
    return [Finding("burnin.xid", "fail", f"PCI {xid.get('pci')}", f"Xid {xid.get('code')} during the burn-in",
                    xid, "See `gpuprep check` (gpu.xid) for NVIDIA's recommended action") for xid in ranks.run.new_xids]


@burnin_rule("burnin.bandwidth")
def bandwidth(ranks: Ranks) -> List[Finding]:
    return _bandwidth(ranks.complete) + _against_baseline(ranks.complete, ranks.baseline)


def _against_baseline(complete: List[Rank], baseline: Optional[Baseline]) -> List[Finding]:
    """The sweep against the node's own known-good run, at the largest message size both swept."""
    if baseline is None or not complete or not complete[0].allreduce:
        return []
    first = complete[0]
    if (first.world_size, first.backend, first.gpu_name) != (baseline.world_size, baseline.backend, baseline.gpu_name):
        return [Finding("burnin.bandwidth", "info", "run (baseline)", "The baseline is another kind of run: not "
                        "compared", {"this_run": [first.world_size, first.backend, first.gpu_name],
                                     "baseline": [baseline.world_size, baseline.backend, baseline.gpu_name],
                                     "baseline_file": baseline.source},
                        "Give a baseline of the same node, backend and number of ranks")]
    theirs = {row.bytes: row.busbw_gbs for row in baseline.sweep}
    common = [row for row in first.allreduce if row.bytes in theirs and theirs[row.bytes] > 0]
    if not common:
        return [Finding("burnin.bandwidth", "info", "run (baseline)", "The baseline swept other message sizes: not "
                        "compared", {"baseline_file": baseline.source})]
    row = max(common, key=lambda r: r.bytes)
    expected = theirs[row.bytes]
    evidence = {"busbw_gbs": round(row.busbw_gbs, 2), "baseline_gbs": round(expected, 2), "bytes": row.bytes,
                "baseline_file": baseline.source, "baseline_at": baseline.generated_at}
    if row.busbw_gbs < (1 - BASELINE_DROP) * expected:
        return [Finding("burnin.bandwidth", "warn", "run (baseline)",
                        f"All-reduce busbw {row.busbw_gbs:.1f} GB/s at {row.bytes >> 20} MiB is "
                        f"{1 - row.busbw_gbs / expected:.0%} below this node's baseline {expected:.1f} GB/s", evidence,
                        "Compare with the baseline's run: NVLink/PCIe link state and width (`gpuprep check`), ACS and "
                        "IOMMU settings, NCCL_* overrides, other jobs on the node", "SuperBench: busbw over 5% below "
                        "the node's baseline")]
    return [Finding("burnin.bandwidth", "pass", "run (baseline)", f"All-reduce busbw {row.busbw_gbs:.1f} GB/s at "
                    f"{row.bytes >> 20} MiB holds this node's baseline ({expected:.1f} GB/s)", evidence)]


@burnin_rule("burnin.memory")
def memory(ranks: Ranks) -> List[Finding]:
    findings = []
    for rank in ranks.complete:
        checked = rank.memory or MemoryCheck()
        if not checked.ok:
            where = (f": {checked.bad_words} bad word(s), the first at byte offset {checked.first_bad_offset}"
                     if checked.first_bad_offset is not None else "")
            findings.append(Finding("burnin.memory", "fail", _label(rank), "Memory pattern mismatch" + where,
                                    {k: v for k, v in dataclasses.asdict(checked).items() if v is not None},
                                    "Drain the GPU and run `dcgmi diag -r 3`"))
    return findings


def _passed(complete: List[Rank]) -> Finding:
    rows = complete[0].allreduce or []
    peak = max((r.busbw_gbs for r in rows), default=0.0)
    steps = [statistics.median(r.step_ms) for r in complete if r.step_ms]
    busbw = f"peak all-reduce busbw {peak:.2f} GB/s" if len(complete) > 1 else "all-reduce busbw n/a with one rank"
    return Finding("burnin.pass", "pass", "run", f"{len(complete)} rank(s) completed; {busbw}",
                   {"peak_busbw_gbs": round(peak, 3), "peer_comparison": peer_comparison(complete),
                    "median_step_ms": round(statistics.median(steps), 2) if steps else None})


# Ids judge() reports itself, around the rules: a run that never started, and a run with nothing failed.
BURNIN_IDS = frozenset({"burnin.setup", "burnin.pass"}) | frozenset(i for fn in BURNIN_RULES for i in fn.ids)


def compute_share(rank: Rank) -> float:
    """The share of the training phase the GPU computed: each iteration is a compute-only step (compute_ms) and a
    full step (step_ms: the same compute and the gradient all-reduce). On a PCIe box the all-reduce of fp32
    gradients can take twice the compute (8x L40S: ~280 ms against ~130 ms), and NVML's power is a 1 s average."""
    compute, step = rank.compute_ms or [], rank.step_ms or []
    if not compute or not step:
        return 1.0
    c, s = statistics.median(compute), statistics.median(step)
    return min(1.0, 2 * c / (c + s)) if c + s > 0 else 1.0


def _load_fell_short(rank: Rank) -> bool:
    """The training phase's power never came near the GPU's limit (and nothing capped it there), allowing for the
    time the GPU spent waiting on the all-reduce rather than computing."""
    gpu = rank.gpu or RankGpu()
    peak, limit = gpu.training_max_power_w, gpu.power_limit_w
    if not gpu.training_samples or not peak or not limit:
        return False
    capped = "sw_power_cap" in (gpu.training_reasons or [])
    return not capped and peak < LOAD_POWER_SHARE * limit * compute_share(rank)


def _load_reached(rank: Rank) -> Finding:
    gpu = rank.gpu
    peak, limit = gpu.training_max_power_w, gpu.power_limit_w
    return Finding("burnin.load-low", "warn", _label(rank),
                   f"The training load peaked at {peak:.0f} W of the GPU's {limit:.0f} W limit "
                   f"({peak / limit:.0%}): the burn-in proved less than a full-power run",
                   {"training_max_power_w": peak, "power_limit_w": limit, "samples": gpu.training_samples,
                    "reasons_seen": gpu.training_reasons, "load": rank.load},
                   "Run longer (--duration), and check that nothing else held the GPU back: clocks locked low, "
                   "an application-clock or power-limit setting, MIG, or a GPU that cannot reach its clocks")


def _bandwidth(complete: List[Rank]) -> List[Finding]:
    from .. import knowledge as kb
    if not complete or complete[0].backend != "nccl":
        return []
    model = kb.gpu_model(complete[0].gpu_name)
    if model is None:
        return []
    world = complete[0].world_size
    row = next((r for r in kb.expected_busbw() if r["product"] == model["product"] and int(r["gpus"]) == world), None)
    sweep = complete[0].allreduce or []
    if row is None or not sweep:
        return []
    measured, expected = sweep[-1].busbw_gbs, float(row["expected_busbw_gbs"])
    evidence = {"busbw_gbs": round(measured, 1), "expected_gbs": expected, "bytes": sweep[-1].bytes,
                "expected_algorithm": row["algorithm"], "expected_at_bytes": int(row["message_bytes"])}
    if measured < BANDWIDTH_FLOOR * expected:
        return [Finding("burnin.bandwidth", "warn", "run",
                        f"All-reduce busbw {measured:.0f} GB/s is below {BANDWIDTH_FLOOR:.0%} of the expected "
                        f"{expected:.0f} GB/s ({row['algorithm']}) for {world}x {model['product']}", evidence,
                        "Check NVLink state (`nvidia-smi nvlink --status`), fabric manager, and NCCL_* overrides",
                        row["source"])]
    return [Finding("burnin.bandwidth", "pass", "run", f"All-reduce busbw {measured:.0f} GB/s "
                    f"(expected ~{expected:.0f})", evidence, source=row["source"])]
