"""The pure event reducer, fed the event stream of a real `gpuprep apply` run (recorded from the
fleet test: node1 failed halfway, node2 was stopped; container names anonymised)."""
import json
from pathlib import Path

from gpuprep.ansible.reducer import RunState, reduce
from gpuprep.ansible.view import summary_table

EVENTS = json.loads((Path(__file__).parent / "data" / "apply-events-failed-and-unreachable.json").read_text())


def replay(events):
    state = RunState()
    for tick, event in enumerate(events):
        state = reduce(state, event, float(tick))
    return state


def test_live_counts_agree_with_ansibles_own_stats():
    before_stats = [e for e in EVENTS if e["event"] != "playbook_on_stats"]
    live = replay(before_stats)
    stats = next(e for e in EVENTS if e["event"] == "playbook_on_stats")["event_data"]
    for name, host in live.hosts.items():
        assert host.ok == stats["ok"].get(name, 0)
        assert host.changed == stats["changed"].get(name, 0)
        assert host.failed == stats["failures"].get(name, 0)
        assert host.unreachable == stats["dark"].get(name, 0)
        assert host.skipped == stats["skipped"].get(name, 0)
    assert not live.finished


def test_final_state_names_the_failed_and_unreachable_hosts():
    state = replay(EVENTS)
    assert state.finished
    assert state.hosts["node0"].succeeded
    assert not state.hosts["node1"].succeeded and state.hosts["node1"].failures[0].task
    assert state.hosts["node2"].unreachable == 1 and state.hosts["node2"].failures[0].unreachable
    table = summary_table(state, "/tmp/artifacts")
    assert "1 of 3 host(s) succeeded; failed: node1, node2" in table


def test_progress_shows_the_current_task_while_running():
    halfway = replay(EVENTS[: len(EVENTS) // 2])
    assert any(h.current_task for h in halfway.hosts.values())
    assert halfway.hosts["node0"].seconds is not None


# A real fast re-run (recorded from the fleet test): nvidia-persistenced stopped, the driver hold
# released and the sysctl file edited by hand; the other roles found nothing moved.
FAST_RERUN = json.loads((Path(__file__).parent / "data" / "apply-events-fast-rerun-after-drift.json").read_text())


def test_a_fast_rerun_names_the_roles_that_did_not_move_and_what_moved_in_the_others():
    state = replay(FAST_RERUN)
    host = state.hosts["node0"]
    assert host.unmoved_roles == ["gpu_clocks", "container_toolkit", "nccl_env"]
    assert host.drift == {"driver_pin": ["command dpkg-query -W"],
                          "gpu_persistence": ["unit nvidia-persistenced.service"],
                          "system_tuning": ["path /etc/sysctl.d/90-gpuprep.conf"]}
    table = summary_table(state, "/tmp/artifacts")
    assert "nothing moved since the last full run of gpu_clocks, container_toolkit, nccl_env on node0" in table
    assert "node0: gpu_persistence ran in full, moved since its last full run: unit nvidia-persistenced.service" \
        in table
    assert "1 of 1 host(s) succeeded" in table


def test_reduce_returns_a_new_state_and_leaves_the_one_it_was_given():
    import copy
    state = RunState()
    for tick, event in enumerate(EVENTS[: len(EVENTS) // 2]):
        state = reduce(state, event, float(tick))
    before = copy.deepcopy(state)
    later = state
    for tick, event in enumerate(EVENTS[len(EVENTS) // 2:]):
        later = reduce(later, event, float(tick))
    assert state == before and later != before and later.finished and not state.finished


def test_the_probes_snapshot_is_found_by_what_the_task_returned_not_its_name():
    snapshot = '{\n  "schema": "gpuprep.snapshot/1",\n  "sources": []\n}'
    state = RunState()
    for name, stdout in (("node1", snapshot), ("node2", "some other task's output")):
        state = reduce(state, {"event": "runner_on_ok", "event_data": {
            "host": name, "task": "Any name a site gives it", "res": {"stdout": stdout, "changed": False}}}, 0.0)
    assert state.hosts["node1"].probe_output == snapshot and state.hosts["node2"].probe_output is None


def test_a_piped_run_says_each_role_as_a_host_starts_it():
    """Piped, apply was silent for 25 s: the line view now names each role as a host enters it."""
    from gpuprep.ansible.reducer import RunState, reduce
    from gpuprep.ansible.view import line_view
    lines = []
    view = line_view(lines.append)
    state = RunState()
    for role, task in (("nccl_env", "Read the host"), ("nccl_env", "Write the file"), ("system_tuning", "sysctl")):
        state = reduce(state, {"event": "runner_on_start", "event_data": {"host": "node1", "task": task, "role": role}},
                       0.0)
        view(state)
    assert lines == ["node1: nccl_env", "node1: system_tuning"]


def test_a_probe_that_fails_on_its_host_says_why_as_data_not_in_stderr_words():
    """The probe prints a probe-error document on standard output when it cannot take a snapshot; the controller
    reads the problem from it, whatever the failed task's stderr or message says."""
    from gpuprep.ansible.reducer import FailedTask, HostState
    from gpuprep.fleet import _gathered
    from gpuprep.probe_main import _probe_error
    printed = "Python 3.11 on gpfc-x\n" + _probe_error("NVML: the driver's library could not be loaded") + "\n"
    host = HostState(name="gpfc-x")
    host.failures.append(FailedTask(task="Collect snapshot", message="non-zero return code\ngpuprep-probe: junk",
                                    stdout=printed))
    member = _gathered("gpfc-x", host)
    assert (member.status, member.problem) == ("probe-failed", "NVML: the driver's library could not be loaded")
    host.failures[0] = FailedTask(task="Collect snapshot", message="gpuprep-probe: error: not data", stdout="")
    assert _gathered("gpfc-x", host).problem.startswith("probe failed: ")      # stderr words are not trusted


def test_the_summary_names_what_was_skipped_on_each_host():
    """Counts alone ("skipped 12") hid which tasks did not run; the summary names them, and the JSON lists all."""
    state = replay(EVENTS)
    skipped = [e["event_data"]["task"] for e in EVENTS if e["event"] == "runner_on_skipped"
               and e["event_data"]["host"] == "node0"]
    assert state.hosts["node0"].to_dict()["skipped_tasks"] == skipped
    table = summary_table(state, "/tmp/artifacts")
    line = next(line for line in table.splitlines() if line.startswith("  node0: skipped: "))
    assert all(task in line for task in skipped) and "more" not in line
    role = reduce(RunState(), {"event": "runner_on_skipped", "event_data": {
        "host": "n", "task": "Apply the sysctl settings", "role": "system_tuning"}}, 0.0)
    assert role.hosts["n"].skipped_tasks == ["system_tuning : Apply the sysctl settings"]
