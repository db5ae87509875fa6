"""One verdict, many consumers: the Slurm drain decision, node-problem-detector's and Nagios' conventions, judged on
real captures and on `scontrol show node` as Debian's Slurm 22.05 prints it (tests/data/slurm)."""
import json
from pathlib import Path

import pytest

from conftest import corpus, run_cli
from gpuprep import adapters, api
from gpuprep.rules import Finding
from gpuprep.slurm import Action, Gate, NodeState, burnin_gate, decide, parse_node

SLURM = Path(__file__).parent / "data" / "slurm"
HEALTHY = "a10.nvidia-smi-q.txt"                       # passes with the default profile
FAILING = "a100-sxm4-x4.nvidia-smi-q.txt"              # gpu.row-remap fails (a remap is pending)
WARN_ONLY = "puget-wrx90-2x-rtx6000ada.nvidia-smi.txt"      # persistence mode off: a warning only


def _found(name, profile=None):
    result = api.check([corpus(name)])
    return result, adapters.problems(result.findings, profile or {})


def test_the_captures_are_what_the_cases_say():
    assert _found(HEALTHY)[0].verdict in ("pass", "info", "warn") and not _found(HEALTHY)[1]
    assert _found(FAILING)[0].verdict == "fail"


@pytest.mark.parametrize("capture, state", [
    ("scontrol-show-node-idle.txt", (["IDLE"], "")),
    ("scontrol-show-node-admin-drain.txt", (["IDLE", "DRAIN"], "bad dimm, ticket 4711")),
    ("scontrol-show-node-gpuprep-drain.txt", (["IDLE", "DRAIN", "NOT_RESPONDING"], "gpuprep: gpu.xid GPU3 (+2 more)")),
])
def test_scontrol_show_node_is_read_as_slurm_prints_it(capture, state):
    node = parse_node((SLURM / capture).read_text(), "node1")
    assert (node.flags, node.reason) == state


def _node(capture):
    return parse_node((SLURM / capture).read_text(), "node1")


def test_a_failing_node_is_drained_with_the_check_id_in_the_first_20_characters():
    """sinfo -R shows 20 characters: 'gpuprep: ' left 11 of them to the id ('gpuprep: gpu.row-rem')."""
    _, found = _found(FAILING)
    action = decide(_node("scontrol-show-node-idle.txt"), found)
    assert action.kind == "drain" and action.reason.startswith("gpu.row-remap GPU1")
    assert action.reason[:20].startswith("gpu.row-remap") and action.reason.endswith(" (gpuprep)")
    assert adapters.is_own_reason(action.reason) and adapters.is_own_reason("gpuprep: gpu.xid GPU3")   # and 0.1's
    assert not adapters.is_own_reason("bad dimm, ticket 4711")


def test_the_reason_is_stable_and_never_ends_in_a_quote():
    """scontrol strips a double quote that ends a reason: the next run saw a reason of its own changed and drained
    the node again, every run."""
    quoted = Finding("gpu.xid", "fail", 'GPU "0"', "x")
    reason = adapters.slurm_reason([quoted])
    assert '"' not in reason and reason == adapters.slurm_reason([quoted])
    node = NodeState("node1", ["IDLE", "DRAIN"], reason)
    assert decide(node, [quoted]).kind == "keep"


def test_an_admins_drain_is_never_cleared_nor_overwritten():
    admin = _node("scontrol-show-node-admin-drain.txt")
    assert decide(admin, _found(FAILING)[1]).kind == "keep"
    assert decide(admin, []).kind == "keep"


def test_gpupreps_own_drain_is_resumed_when_healthy_and_only_then():
    ours = _node("scontrol-show-node-gpuprep-drain.txt")
    assert decide(ours, []) == Action("resume", "healthy again")
    assert decide(ours, [], "the burn-in did not pass").kind == "keep"
    still = decide(ours, _found(FAILING)[1])
    assert still.kind == "drain" and "gpu.row-remap" in still.reason      # the reason follows the current problem


def test_a_down_node_is_not_resumed_by_gpuprep():
    down = NodeState("node1", ["DOWN"], "Not responding")
    assert decide(down, []).kind == "keep"


def test_warnings_do_not_drain_unless_the_profile_acts_on_them(tmp_path):
    result = api.check([corpus(WARN_ONLY)])
    assert result.verdict == "warn" and not adapters.problems(result.findings, {})
    assert adapters.problems(result.findings, {"act_on": ["fail", "warn"]})


def test_node_supplied_words_reach_a_reason_as_printable_ascii():
    hostile = Finding("gpu.xid", "fail", "GPU0\n[root@now] Reason=ok\x1b[2J", "x")
    reason = adapters.slurm_reason([hostile])
    assert "\n" not in reason and "\x1b" not in reason and reason.startswith("gpu.xid GPU0")


def _report(tmp_path, verdict="pass", stamp=None, ranks=None, name="burnin.json"):
    import datetime as dt
    report = tmp_path / name
    stamp = stamp or dt.datetime.now(dt.timezone.utc).isoformat()
    ranks = ranks if ranks is not None else [{"rank": 0, "world_size": 1, "host": "node1", "device": "cuda:0",
                                              "gpu_uuid": "GPU-aaa", "pci_bus_id": "00000000:3B:00.0",
                                              "step_ms": [5.0]}]
    report.write_text(json.dumps({"schema": "gpuprep.burnin/1", "verdict": verdict, "generated_at": stamp,
                                  "ranks": ranks}))
    return str(report)


def test_burnin_gate_wants_a_passing_recent_report(tmp_path):
    import datetime as dt
    now = dt.datetime(2026, 11, 25, 12, tzinfo=dt.timezone.utc)
    gate = Gate(str(tmp_path / "none.json"), 3600, "node1")
    assert "no readable" in burnin_gate(gate, now.timestamp())
    for verdict, age_h, blocked in (("pass", 1, False), ("pass", 30, True), ("fail", 1, True)):
        stamp = (now - dt.timedelta(hours=age_h)).isoformat()
        gate = Gate(_report(tmp_path, verdict, stamp), 24 * 3600, "node1")
        assert (burnin_gate(gate, now.timestamp()) is not None) == blocked, (verdict, age_h)
    (tmp_path / "check.json").write_text(json.dumps({"schema": "gpuprep.check/1", "verdict": "pass"}))
    assert "not a gpuprep burn-in report" in burnin_gate(Gate(str(tmp_path / "check.json")), now.timestamp())


def test_the_gate_believes_no_pass_that_is_not_this_nodes_after_its_drain(tmp_path):
    """Any '"verdict": "pass"' resumed the node: another node's report on a shared file system, one with no
    ranks, one whose ranks break the schema, one from before the drain."""
    import datetime as dt
    import time as _time
    now = _time.time()
    gpus = ["GPU-aaa", "00000000:3B:00.0"]
    assert burnin_gate(Gate(_report(tmp_path), None, "node1", gpus), now) is None
    cases = {
        "another node's": (Gate(_report(tmp_path, name="a.json"), None, "node2", gpus), "not on this node"),
        "no ranks": (Gate(_report(tmp_path, ranks=[], name="b.json"), None, "node1"), "has no ranks"),
        "bad ranks": (Gate(_report(tmp_path, ranks=[{"rank": "zero", "world_size": 1}], name="c.json"), None,
                           "node1"), "malformed"),
        "other GPUs": (Gate(_report(tmp_path, name="d.json"), None, "node1", ["GPU-bbb"]), "this node's GPUs"),
    }
    for what, (gate, words) in cases.items():
        assert words in (burnin_gate(gate, now) or ""), what
    before = (dt.datetime.now(dt.timezone.utc) - dt.timedelta(hours=2)).isoformat()
    assert "before the node was drained" in burnin_gate(Gate(_report(tmp_path, stamp=before), None, "node1"), now,
                                                         drained_at=now - 3600)


def test_a_fifo_or_a_deep_report_never_hangs_or_crashes_the_gate(tmp_path):
    import os as _os
    import time as _time
    fifo = tmp_path / "report.fifo"
    _os.mkfifo(fifo)
    assert "not a regular file" in burnin_gate(Gate(str(fifo)), _time.time())
    deep = tmp_path / "deep.json"
    deep.write_text("[" * 100000 + "]" * 100000)
    assert "no readable" in burnin_gate(Gate(str(deep)), _time.time())


def test_a_drain_newer_than_the_facts_is_not_undone_by_them():
    """A health check that gathered healthy facts before the epilog drained for an Xid must not resume."""
    drained = NodeState("node1", ["IDLE", "DRAIN"], "gpu.xid GPU3 (gpuprep)", reason_at=1_000_000.0)
    assert decide(drained, [], facts_at=999_999.5).kind == "keep"
    assert decide(drained, [], facts_at=1_000_010.0).kind == "resume"


@pytest.mark.parametrize("capture, code, starts", [
    (HEALTHY, 0, "gpuprep: healthy"),
    (FAILING, 1, "gpu.row-remap GPU1"),
])
def test_npd_plugin_mode(capture, code, starts):
    done = run_cli("npd", "--from", corpus(capture))
    assert done.returncode == code, done.stdout + done.stderr
    (line,) = done.stdout.splitlines()
    assert line.startswith(starts) and len(line) <= 80


@pytest.mark.parametrize("capture, code, starts", [
    (HEALTHY, 0, "GPUPREP OK"), (WARN_ONLY, 1, "GPUPREP WARNING"), (FAILING, 2, "GPUPREP CRITICAL - gpu.row-remap"),
])
def test_nagios_plugin_mode(capture, code, starts):
    done = run_cli("nagios", "--from", corpus(capture))
    assert done.returncode == code and done.stdout.startswith(starts), done.stdout
    assert "| fail=" in done.stdout


def test_nagios_warning_when_the_profile_acts_on_warnings(tmp_path):
    profile = tmp_path / "page.toml"
    profile.write_text('act_on = ["fail", "warn"]\nmin_gpus = 1\n')
    done = run_cli("nagios", "--from", corpus(WARN_ONLY), "--profile", str(profile))
    assert done.returncode == 1 and done.stdout.startswith("GPUPREP WARNING - "), done.stdout


@pytest.mark.parametrize("command, code, prefix", [("npd", 2, "gpuprep unknown: "), ("nagios", 3, "GPUPREP UNKNOWN - ")])
def test_what_cannot_be_judged_is_unknown_never_healthy(tmp_path, command, code, prefix):
    bad = tmp_path / "snapshot.json"
    bad.write_text('{"schema": "gpuprep.snapshot/1", "gpus": [{"index": "zero"}]}')
    done = run_cli(command, "--from", str(bad))
    assert done.returncode == code and done.stdout.startswith(prefix) and "Traceback" not in done.stderr
    assert "gpus[0].index" in done.stdout


def _scontrol(tmp_path, state_capture):
    """A stand-in scontrol (the scheduler's command, the true boundary): `show node` prints what Debian's Slurm
    printed (tests/data/slurm); every update is appended to a log the test reads."""
    script = tmp_path / "scontrol"
    log = tmp_path / "scontrol.log"
    script.write_text(f"#!/bin/sh\nif [ \"$1\" = show ]; then cat {SLURM / state_capture}; exit 0; fi\n"
                      f"printf '%s\\n' \"$*\" >> {log}\n")
    script.chmod(0o755)
    return str(script), log


def test_the_epilog_drains_for_xids_that_came_during_the_job_only(tmp_path):
    """The prolog notes how many Xid lines the log held (here: a capture with Xid 13 x16); the epilog judges only
    the lines after them (the same log, then Xid 64 and 94 of another capture): Xid 64 fails, so it drains."""
    scontrol, log = _scontrol(tmp_path, "scontrol-show-node-idle.txt")
    before, during = corpus("xid13-xid43.dmesg-iso.txt"), corpus("xid64-xid94-imbue-h100.dmesg-lines.txt")
    common = ["--scontrol", scontrol, "--node", "node1", "--baseline-dir", str(tmp_path / "jobs")]
    env = {"SLURM_JOB_ID": "4242"}
    done = run_cli("slurm", "prolog", "--from", before, *common, env=env)
    assert done.returncode == 0, done.stderr                       # Xid 13 warns: a warning does not drain
    assert (tmp_path / "jobs" / "job-4242.json").is_file() and not log.exists()
    done = run_cli("slurm", "epilog", "--from", before, "--from", during, *common, env=env)
    assert done.returncode == 0, done.stderr                       # the epilog drains itself and exits 0
    (update,) = log.read_text().splitlines()
    assert update.startswith("update NodeName=node1 State=DRAIN Reason=gpu.xid PCI 0000:0f:00")
    assert not (tmp_path / "jobs" / "job-4242.json").exists()      # the baseline is used once


def test_an_epilog_with_no_new_xids_leaves_the_node(tmp_path):
    scontrol, log = _scontrol(tmp_path, "scontrol-show-node-idle.txt")
    capture = corpus("xid64-xid94-imbue-h100.dmesg-lines.txt")     # Xid 64 fails, but it was there before the job
    common = ["--from", capture, "--scontrol", scontrol, "--node", "node1", "--baseline-dir", str(tmp_path)]
    prolog = run_cli("slurm", "prolog", *common, env={"SLURM_JOB_ID": "7"})
    assert prolog.returncode == 1 and "State=DRAIN" in log.read_text()  # a failing node: the prolog drains, the job requeues
    log.unlink()
    epilog = run_cli("slurm", "epilog", *common, env={"SLURM_JOB_ID": "7"})
    assert epilog.returncode == 0 and not log.exists(), epilog.stderr


@pytest.mark.parametrize("hook", ["healthcheck", "prolog", "epilog"])
def test_judging_past_the_budget_changes_nothing_and_fails_no_hook(tmp_path, hook):
    """The budget counts from the interpreter's start; running out is gpuprep's trouble, not the node's: a failed
    prolog or epilog would have Slurm drain a healthy node."""
    scontrol, log = _scontrol(tmp_path, "scontrol-show-node-idle.txt")
    done = run_cli("slurm", hook, "--from", corpus(FAILING), "--scontrol", scontrol, "--node", "node1",
                   "--budget", "0.001", "--baseline-dir", str(tmp_path / "state"), env={"SLURM_JOB_ID": "9"})
    assert done.returncode == 0 and "the node was left as it was" in done.stderr, done.stderr
    assert not log.exists()                                    # no drain, no resume


@pytest.mark.parametrize("trouble", ["no scontrol", "read-only state", "symlinked state", "fifo baseline",
                                     "budget inf"])
def test_gpupreps_own_trouble_never_fails_a_prolog_or_epilog(tmp_path, trouble):
    import os as _os
    scontrol, log = _scontrol(tmp_path, "scontrol-show-node-idle.txt")
    state, budget = tmp_path / "state", "30"
    if trouble == "no scontrol":
        scontrol = str(tmp_path / "missing-scontrol")
    elif trouble == "read-only state":      # /proc refuses even root (a chmod would not stop root here)
        state = Path("/proc/gpuprep/slurm")
    elif trouble == "symlinked state":
        (tmp_path / "elsewhere").mkdir()
        state.symlink_to(tmp_path / "elsewhere")
    elif trouble == "fifo baseline":
        state.mkdir(mode=0o700)
        _os.mkfifo(state / "job-9.json")
    for hook in ("prolog", "epilog"):
        args = ["slurm", hook, "--from", corpus(HEALTHY), "--scontrol", scontrol, "--node", "node1",
                "--baseline-dir", str(state), "--budget", "inf" if trouble == "budget inf" else budget]
        done = run_cli(*args, env={"SLURM_JOB_ID": "9"}, timeout=60)
        if trouble == "budget inf":         # a usage error: argparse's exit 2, before any hook work
            assert done.returncode == 2 and "at most 3600" in done.stderr, done.stderr
            continue
        assert done.returncode == 0, (hook, done.stderr)
        assert "Traceback" not in done.stderr and "internal error" not in done.stderr, done.stderr
        if trouble == "fifo baseline" and hook == "prolog":    # refused at once, not written through until the budget
            assert "not a regular file" in done.stderr and "budget" not in done.stderr, done.stderr
    if trouble == "symlinked state":
        assert not list((tmp_path / "elsewhere").iterdir())       # nothing written through the link
    if trouble == "fifo baseline":
        assert _os.path.exists(state / "job-9.json")              # the epilog neither hung nor removed it


def test_a_health_check_while_another_hook_holds_the_lock_changes_nothing(tmp_path):
    """slurmd starts health checks while the last still runs (22 at once at a 5 s interval on a real Slurm): one
    judges and acts at a time, and the others leave the node as it was."""
    from gpuprep.slurm import HookLock
    scontrol, log = _scontrol(tmp_path, "scontrol-show-node-idle.txt")
    held = HookLock(str(tmp_path / "state"))
    assert held.acquire(0)
    try:
        done = run_cli("slurm", "healthcheck", "--from", corpus(FAILING), "--scontrol", scontrol, "--node", "node1",
                       "--baseline-dir", str(tmp_path / "state"))
        assert done.returncode == 0 and "holds this node's lock" in done.stderr, done.stderr
        assert not log.exists()
    finally:
        held.release()
    done = run_cli("slurm", "healthcheck", "--from", corpus(FAILING), "--scontrol", scontrol, "--node", "node1",
                   "--baseline-dir", str(tmp_path / "state"))
    assert done.returncode == 1 and "DRAIN" in log.read_text()


def test_every_finding_carries_a_machine_readable_action():
    """gpud's scan gives repair actions where gpuprep's remedies were free text only."""
    from gpuprep.rules import ACTIONS
    doc = api.check([corpus(FAILING)]).document()
    assert all(f["action"] in ACTIONS for f in doc["findings"])
    assert {(f["id"], f["action"]) for f in doc["findings"] if f["severity"] == "fail"} == {("gpu.row-remap", "reset-gpu")}
    assert all(f["action"] == "none" for f in doc["findings"] if f["severity"] == "pass")
    from gpuprep.report import render
    assert 'gpuprep_check_actions{action="reset-gpu"' in render(doc, "prometheus")
    code, line = adapters.npd(adapters.problems(api.check([corpus(FAILING)]).findings, {}))
    assert code == 1 and "[reset-gpu]" in line and len(line) <= 80


def test_an_npd_unknown_line_is_one_printable_line_even_for_a_hostile_file_name(tmp_path):
    bad = tmp_path / "a\x1b[2Jname\nwith lines.json"
    bad.write_text('{"schema": "gpuprep.snapshot/1", "gpus": [{"index": "zero"}]}')
    done = run_cli("npd", "--from", str(bad))
    assert done.returncode == 2 and done.stdout.count("\n") == 1 and "\x1b" not in done.stdout
    assert len(done.stdout.rstrip("\n")) <= 80
