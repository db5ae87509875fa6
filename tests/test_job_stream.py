"""The job across nodes without a cluster: a node's watcher on real processes that carry a Slurm job's environment,
its JSON lines merged, a node's forged lines dropped with one note, and the verdicts of the job across nodes
(dead, desync, fabric, node-or-code) on merged facts, each shown both ways. The real cluster runs in
tests/test_job_across_nodes.py."""
import io
import json
import os
import subprocess
import sys
import time

import pytest

from conftest import REPO, run_cli
from gpuprep.job.facts import JobFacts, WatchFacts, WatchRank
from gpuprep.job.judge import Job, judge
from gpuprep.job.stream import Emitter, Merged, parse_line, BadLine
from gpuprep.job.watch import RankProcess


def _line(host="node1", ranks=None, **extra):
    return json.dumps({"v": 1, "host": host, "t": 1795000000.0, "ranks": ranks or [], **extra})


def _rank(pid=100, rank=0, **series):
    item = {"pid": pid, "rank": rank, "local_rank": 0, "visible": None, "workers": 0, "gpu_uuid": None,
            "allowed_cpus": None, "ended": False, "ended_at": None}
    item.update(series)
    return item


# -- the node side on real processes ------------------------------------------------------------------------------

def test_the_node_watcher_finds_the_jobs_ranks_by_their_slurm_environment_and_writes_lines():
    """Two processes of job 4242's step 0 (srun's SLURM_PROCID, no RANK), one of another job, one of the
    watcher's own step: only the first two are ranks, numbered by SLURM_PROCID."""
    from gpuprep.job.nodewatch import JobProcesses, node_watch
    sleeper = [sys.executable, "-c", "import time; time.sleep(60)"]
    env = dict(os.environ, SLURM_JOB_ID="4242", SLURM_STEP_ID="0", SLURMD_NODENAME="gpnode7")
    procs = [subprocess.Popen(sleeper, env=dict(env, SLURM_PROCID=str(r), SLURM_LOCALID=str(r))) for r in (0, 1)]
    procs.append(subprocess.Popen(sleeper, env=dict(env, SLURM_JOB_ID="4243", SLURM_PROCID="0")))
    procs.append(subprocess.Popen(sleeper, env=dict(env, SLURM_STEP_ID="1", SLURM_PROCID="0")))
    out = io.StringIO()
    before = dict(os.environ)
    os.environ.update(SLURM_STEP_ID="1", SLURMD_NODENAME="gpnode7")
    try:
        node_watch(JobProcesses.of_slurm_job("4242", "1"), 0.5, 3,
                   lambda: {"judged": False, "problems": [], "not_judged": ["no GPU here"]}, out)
    finally:
        os.environ.clear()
        os.environ.update(before)
        for p in procs:
            p.kill()
            p.wait()
    lines = [parse_line(text) for text in out.getvalue().splitlines()]
    assert lines and all(line["host"] == "gpnode7" for line in lines)
    merged = Merged()
    for text in out.getvalue().splitlines():
        merged.feed(text)
    facts = merged.facts(3, 10, job_id="4242")
    assert sorted((r.rank, r.pid) for r in facts.ranks) == [(0, procs[0].pid), (1, procs[1].pid)]
    assert all(r.host == "gpnode7" and r.samples >= 2 for r in facts.ranks)
    # the node's CPU pressure reaches the merger with each rank, where this kernel keeps it (PSI)
    from gpuprep.job.watch import cpu_pressure
    if cpu_pressure() is not None:
        assert all(len(r.cpu_pressure_pct) >= 2 and all(0 <= p <= 100 for p in r.cpu_pressure_pct) for r in facts.ranks)
    assert facts.nodes["gpnode7"] == {"judged": False, "problems": [], "not_judged": ["no GPU here"]}
    assert lines[-1]["end"] == "the watch's time is up"


def test_a_rank_that_ends_is_timed_to_the_twentieth_of_a_second():
    from gpuprep.job.watch import Watcher
    proc = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(1.2)"],
                            env=dict(os.environ, RANK="0", LOCAL_RANK="0"))
    watcher = Watcher(proc.pid, interval=1.0, gpu_sample=lambda: None)
    watcher.run(10, lambda: False)
    proc.wait()
    ended = time.time()
    (rank,) = watcher.ranks
    assert rank.ended and ended - 1.0 < rank.ended_at <= ended + 0.01


# -- a node's lines are untrusted ---------------------------------------------------------------------------------

@pytest.mark.parametrize("line, field", [
    ("not json at all", "line (not JSON)"),
    (json.dumps({"v": 2, "host": "n1", "t": 1, "ranks": []}), "v"),
    (_line(host="n1\n\x1b[2Jhealthy"), "host"),
    (_line(host="../../etc/passwd"), "host"),
    (_line(ranks=[_rank(pid=-5)]), "ranks[].pid"),
    (_line(ranks=[_rank(cpu_seconds=[float("nan")])]).replace("NaN", "NaN"), "ranks[].cpu_seconds"),
    (_line(ranks=[_rank(cpu_seconds=["1"])]), "ranks[].cpu_seconds"),
    (_line(ranks=[_rank(stacks=["x" * 500])]), "ranks[].stacks"),
    (_line(ranks=[_rank(rank="0; rm -rf /")]), "ranks[].rank"),
    (_line(ranks=[_rank(gpu_samples=[{"k" * 80: 1}])]), "ranks[].gpu_samples"),
    (_line(node={"judged": "yes", "problems": []}), "node"),
    (_line(node={"judged": True, "problems": [{"id": "gpu.xid", "severity": "reboot", "subject": "GPU0",
                                               "message": "x"}]}), "node"),
    ("[" * 100000 + "]" * 100000, "line"),
    (_line(ranks=[_rank(cpu_pressure_pct=[1e300])]), "ranks[].cpu_pressure_pct"),
], ids=["not-json", "version", "host-escapes", "host-path", "pid", "nan", "text-number", "long-stack", "rank-text",
        "gpu-key", "node-judged", "node-severity", "deep", "pressure"])
def test_a_forged_line_is_dropped_with_one_note_naming_the_field(line, field):
    merged = Merged()
    merged.feed(_line(ranks=[_rank(cpu_seconds=[1.0])]))
    merged.feed(line, "srun")
    assert len(merged.notes) == 1 and field in merged.notes[0] and "\n" not in merged.notes[0]
    assert "\x1b" not in merged.notes[0]
    assert [r.pid for r in merged.ranks.values()] == [100]          # the good line's rank only


def _compact(line):
    """A line as a watcher writes it (Emitter: no spaces between fields)."""
    return json.dumps(json.loads(line), separators=(",", ":"))


def _labelled_pieces(task, line, size=1024):
    """How srun --label writes one task's line: slurmstepd's messages of at most 1024 bytes, each on a line of its
    own behind the task's number (Slurm's write_labelled_message adds the newline a piece lacks)."""
    return [f"{task}: {line[i:i + size]}\n" for i in range(0, len(line), size)]


def test_lines_srun_tore_into_pieces_between_other_nodes_pieces_are_joined_whole():
    from gpuprep.job.slurmjob import TaskLines
    long_line = _compact(_line(host="gpjob1", notes=["n" * 390] * 8))            # a node's check: a few KiB
    short = _compact(_line(host="gpjob2"))
    first, *rest = _labelled_pieces(0, long_line)
    assert len(rest) >= 2
    tasks = TaskLines()
    out = tasks.feed(first) + tasks.feed(_labelled_pieces(1, short)[0])
    for piece in rest:
        out += tasks.feed(piece)
    assert out == [short, long_line] and tasks.rest() == []
    merged = Merged()
    for line in out:
        merged.feed(line, "srun")
    assert not any("dropped" in note for note in merged.notes) and set(merged.heard) == {"gpjob1", "gpjob2"}


def test_a_torn_line_that_never_completes_is_handed_on_and_named_not_joined_to_the_next():
    from gpuprep.job.slurmjob import TaskLines
    broken = _labelled_pieces(0, _compact(_line(host="gpjob1", notes=["n" * 390] * 4)))[0]    # the rest lost
    whole = _compact(_line(host="gpjob1"))
    tasks = TaskLines()
    out = tasks.feed(broken) + tasks.feed(f"0: {whole}\n") + tasks.feed("srun: error: a word of srun's own\n")
    assert out == [broken[3:-1], whole, "srun: error: a word of srun's own"]
    trailing = tasks.feed(_labelled_pieces(2, _line(host="gpjob3", notes=["n" * 390] * 4))[0])
    assert trailing == [] and len(tasks.rest()) == 1 and tasks.rest() == []
    merged = Merged()
    for line in out:
        merged.feed(line, "srun")
    assert merged.notes == ["srun: a watcher's line dropped: line (not JSON) is not what a watcher writes"]
    assert list(merged.heard) == ["gpjob1"]


def test_a_line_past_a_mebibyte_is_refused_before_it_is_parsed():
    with pytest.raises(BadLine, match="longer than 1 MiB"):
        parse_line(_line(notes=["x" * 300] * 4000))


def test_lines_merge_by_node_and_process_and_keep_a_bounded_history():
    from gpuprep.job.stream import HISTORY
    merged = Merged()
    for second in range(3 * HISTORY):
        for host in ("a", "b"):       # the same pid on two nodes is two ranks
            merged.feed(_line(host=host, ranks=[_rank(pid=7, rank=0 if host == "a" else 1,
                                                       cpu_seconds=[float(second)], stacks=["other"])]))
    assert sorted(merged.ranks) == [("a", 7), ("b", 7)]
    assert all(len(r.cpu_seconds) <= 2 * HISTORY for r in merged.ranks.values())
    assert merged.samples == 3 * HISTORY


def test_an_emitter_sends_each_sample_once():
    out = io.StringIO()
    emitter = Emitter("n1", out)

    class W:
        ranks = [RankProcess(9, 0, 0)]
        notes = ["py-spy is not found"]
    W.ranks[0].cpu_seconds += [1.0, 2.0]
    emitter.sample(W)
    W.ranks[0].cpu_seconds.append(3.0)
    emitter.sample(W)
    first, second = (json.loads(x) for x in out.getvalue().splitlines())
    assert first["ranks"][0]["cpu_seconds"] == [1.0, 2.0] and second["ranks"][0]["cpu_seconds"] == [3.0]
    assert first["notes"] == ["py-spy is not found"] and second["notes"] == []


# -- the verdicts across nodes, both ways -------------------------------------------------------------------------

def _watched(ranks, **facts):
    return WatchFacts(ranks, 30, 30, job_id="1", at=facts.pop("at", 1000.0), **facts)


def _wr(rank, host, **kw):
    return WatchRank(rank=rank, pid=100 + rank, host=host, gpu=f"GPU-{rank}", **kw)


def _ids(facts):
    return {(f.id, f.evidence.get("rank"), f.evidence.get("fault")) for f in judge(Job(JobFacts([]), None, facts))
            if f.severity != "pass" and f.id != "job.not-judged"}


def test_a_rank_gone_while_the_others_run_is_dead_only_past_the_grace():
    def facts(ended_at):
        return _watched([_wr(0, "a"), _wr(1, "b", ended=True, ended_at=ended_at), _wr(2, "c")], at=1000.0)
    assert ("job.rank-dead", 1, None) in _ids(facts(990.0))
    assert not any(i[0] == "job.rank-dead" for i in _ids(facts(999.5)))      # a job that ends, rank by rank


def test_a_job_that_ended_is_dead_only_when_slurm_says_it_failed():
    ranks = [_wr(0, "a", ended=True, ended_at=1.5), _wr(1, "b", ended=True, ended_at=1.0),
             _wr(2, "c", ended=True, ended_at=1.7)]
    assert not any(i[0] == "job.rank-dead" for i in _ids(_watched(ranks, job_ended=True, job_state="COMPLETED")))
    dead = [f for f in judge(Job(JobFacts([]), None, _watched(ranks, job_ended=True, job_state="FAILED")))
            if f.id == "job.rank-dead"]
    assert [f.evidence["rank"] for f in dead] == [1] and "0.50 s later" in dead[0].title


def test_a_node_that_stopped_answering_loses_its_ranks():
    ranks = [_wr(0, "a"), _wr(1, "b", node_lost=True)]
    assert ("job.rank-dead", 1, None) in _ids(_watched(ranks, lost_nodes=["b"]))
    assert not any(i[0] == "job.rank-dead" for i in _ids(_watched([_wr(0, "a"), _wr(1, "b")])))


def _stuck_in(collective, site, n=8, **kw):
    return dict(stack_sigs=["s"] * n, sites=[[collective, site]] * n,
                last_stack="collective", main_thread={"collective": 100.0}, stack_samples=n,
                cpu_seconds=[1.0] * n, switches=[5] * n, samples=n, **kw)


def test_ranks_stuck_in_different_collectives_are_a_desync_naming_the_odd_one():
    ranks = [_wr(0, "a", **_stuck_in("all_reduce", "train.py:98")),
             _wr(1, "b", **_stuck_in("broadcast", "train.py:96")),
             _wr(2, "c", **_stuck_in("all_reduce", "train.py:98"))]
    assert ("job.desync", 1, None) in _ids(_watched(ranks))
    same = [_wr(r, h, **_stuck_in("all_reduce", "train.py:98")) for r, h in ((0, "a"), (1, "b"), (2, "c"))]
    found = _ids(_watched(same))
    assert ("job.fabric-stall", None, None) in found and not any(i[0] == "job.desync" for i in found)


def test_ranks_whose_main_threads_still_block_and_wake_are_not_hung():
    """The stack the same in every sample (a wait at one line) is no hang while the thread still blocks and wakes:
    its collective completes, again and again (a slow input pipeline elsewhere)."""
    moving = [_wr(r, h, **{**_stuck_in("all_reduce", "train.py:98"), "switches": [5 * i for i in range(8)]})
              for r, h in ((0, "a"), (1, "b"))]
    assert not _ids(_watched(moving)) & {("job.fabric-stall", None, None), ("job.hung-rank", None, None)}


N = 12      # stack samples of each rank in the straggler cases: straggler_samples (10) and more


def _slow(host, reasons, n=N, **kw):
    return _wr(1, host, stack_sigs=[str(i) for i in range(n)], sites=[[None, "train.py:60"]] * n,
               last_stack="compute_launch", main_thread={"compute_launch": 100.0},
               stack_samples=n, cpu_seconds=[float(i) for i in range(n)], switches=list(range(0, 10 * n, 10)),
               cpu_pct=[95.0] * n, samples=n, throttle_reasons=[reasons] * n, gpu_util_pct=[40.0] * n, **kw)


def _waiting(rank, host, n=N):
    return _wr(rank, host, **{**_stuck_in("all_reduce", "train.py:98", n), "switches": list(range(0, 10 * n, 10)),
                              "cpu_seconds": [0.1 * i for i in range(n)], "cpu_pct": [10.0] * n,
                              "throttle_reasons": [[]] * n, "gpu_util_pct": [40.0] * n})


@pytest.mark.parametrize("reasons, node, fault", [
    (["hw_slowdown"], {"judged": True, "problems": []}, "node"),
    ([], {"judged": True, "problems": [{"id": "gpu.xid", "severity": "fail", "subject": "GPU0",
                                        "message": "Xid 79: fallen off the bus"}]}, "node"),
    ([], {"judged": True, "problems": [{"id": "compat.torch-cpu-only", "severity": "fail", "subject": "n",
                                        "message": "a CPU build"}]}, "code"),       # the job's stack, not the node
    ([], {"judged": True, "problems": []}, "code"),
    ([], None, "unknown"),                                                          # the node's check never came
])
def test_the_straggler_is_the_nodes_fault_only_with_a_sign_on_its_node(reasons, node, fault):
    ranks = [_waiting(0, "a"), _slow("b", reasons), _waiting(2, "c")]
    facts = _watched(ranks, nodes={"a": None, "b": node, "c": None})
    found = _ids(facts)
    assert ("job.straggler", 1, None) in found
    assert ("job.node-or-code", 1, fault) in found, found


def _sampled(rank, host, in_collective, samples):
    """A rank of a healthy gloo job: in the loss all-reduce in `in_collective` of `samples` stack samples, working
    in the rest, its CPU busy throughout."""
    share = 100.0 * in_collective / samples
    return _wr(rank, host, stack_sigs=[str(i) for i in range(samples)], sites=[[None, "train.py:60"]] * samples,
               last_stack="compute_launch", main_thread={"collective": share, "compute_launch": 100.0 - share},
               stack_samples=samples, cpu_seconds=[0.5 * i for i in range(samples)],
               switches=list(range(0, 10 * samples, 10)), cpu_pct=[50.0] * samples, samples=samples,
               throttle_reasons=[[]] * samples)


@pytest.mark.parametrize("counts, named", [
    (((3, 8), (4, 8), (1, 13)), False),     # CI's healthy job beside a busy loop: 8 samples tell nothing
    (((4, 10), (5, 10), (1, 13)), True),    # ten samples a rank and the same gap: rank 2 is held apart
])
def test_a_straggler_by_comparison_needs_ten_samples_of_every_rank(counts, named):
    """A healthy job's ranks wait in collectives some of the time, and a loaded host deals them CPU unevenly: with
    8 samples of the others, 3 and 4 in a collective against rank 2's 1 of 13 passes the test of chance by chance.
    Every rank needs straggler_samples before one is named, and until then the watch says it did not judge."""
    ranks = [_sampled(rank, host, *count) for rank, (host, count) in enumerate(zip("abc", counts))]
    found = judge(Job(JobFacts([]), None, _watched(ranks)))
    assert any(f.id == "job.straggler" and f.evidence["rank"] == 2 for f in found) is named
    assert any(f.id == "job.not-judged" and "Straggler by comparison" in f.title for f in found) is not named


@pytest.mark.parametrize("pressure, fault", [
    ({"a": 2.0, "b": 60.0, "c": 3.5}, "node"),       # only the straggler's node is short of CPU: the node's
    ({"a": 55.0, "b": 60.0, "c": 58.0}, "code"),     # every node alike (a loaded host): no sign on its node
    ({"a": 20.0, "b": 40.0, "c": 20.0}, "code"),     # twice the others': under the ratio
    ({"a": 1.0, "b": 20.0, "c": 1.0}, "code"),       # under the mark
    ({"b": 90.0}, "code"),                           # no other node to compare with (kernels without PSI)
])
def test_a_straggler_on_the_one_node_short_of_cpu_is_the_nodes_fault(pressure, fault):
    """CPU pressure (PSI) on the straggler's node, judged against the job's other nodes: they run the same code,
    so what only its node shows (another process on its CPUs) is the node's; a host loaded under every node alike
    is not."""
    ranks = [_waiting(0, "a"), _slow("b", []), _waiting(2, "c")]
    for r in ranks:
        if r.host in pressure:
            r.cpu_pressure_pct = [pressure[r.host]] * N
    facts = _watched(ranks, nodes={"a": None, "b": {"judged": True, "problems": []}, "c": None})
    (answer,) = [f for f in judge(Job(JobFacts([]), None, facts)) if f.id == "job.node-or-code"]
    assert answer.evidence["fault"] == fault and answer.evidence["rank"] == 1
    assert any("contended" in sign for sign in answer.evidence["node_signs"]) is (fault == "node")


@pytest.mark.parametrize("text, value", [
    ("some avg10=37.52 avg60=12.00 avg300=3.10 total=2938472\nfull avg10=0.00 avg60=0.00 avg300=0.00 total=0\n",
     37.52),                                            # Linux 5.13+: a "full" line for the CPU too
    ("some avg10=0.00 avg60=0.00 avg300=0.00 total=0\n", 0.0),     # 4.20 to 5.12: "some" alone
    ("some avg10=512.00 avg60=0.00 avg300=0.00 total=0\n", None),  # not a share
    ("", None),                                          # psi=0: the file reads empty or refuses
])
def test_the_nodes_cpu_pressure_is_read_from_psi(tmp_path, text, value):
    from gpuprep.job.watch import cpu_pressure
    psi = tmp_path / "cpu"
    psi.write_text(text)
    assert cpu_pressure(str(psi)) == value
    assert cpu_pressure(str(tmp_path / "missing")) is None


@pytest.mark.parametrize("in_loader, samples, named", [
    (0, 10, {"job.straggler"}),                 # never at its DataLoader: its own work
    (1, 3, set()),                              # 1 of 3 there: data or its own work, not known yet
    (2, 3, {"job.dataloader"}),                 # 2 of 3: more than a healthy loop's chance look
    (5, 11, {"job.dataloader"}),                # 5 of 11, a loaded host's data-bound job (CI's run)
    (3, 4, {"job.dataloader"}),                 # 3 of 4: it waits on its data
    (1, 15, {"job.straggler"}),                 # 1 of 15: a chance look; its own work
    (5, 20, {"job.straggler"}),                 # 5 of 20: under the mark, mostly its own work
])
def test_the_rank_the_others_wait_for_is_named_by_its_cause_only_once_the_samples_tell(in_loader, samples, named):
    """A rank that works while the others wait in the collective is a straggler by its own work, or starved by its
    DataLoader: 1 sample of 3 there tells neither, and a watch --until must not stop on "straggler" then."""
    loader = 100.0 * in_loader / samples
    slow = _wr(1, "b", stack_sigs=[str(i) for i in range(samples)], sites=[[None, "train.py:60"]] * samples,
               last_stack="compute_launch", main_thread={"dataloader": loader, "compute_launch": 100.0 - loader},
               stack_samples=samples, cpu_seconds=[float(i) for i in range(samples)], cpu_pct=[95.0] * samples,
               samples=samples, throttle_reasons=[[]] * samples)
    facts = _watched([_waiting(0, "a"), slow, _waiting(2, "c")], nodes={"a": None, "b": None, "c": None})
    found = {i[0] for i in _ids(facts) if i[1] == 1 and i[0] in ("job.straggler", "job.dataloader")}
    assert found == named


@pytest.mark.parametrize("node, lost, waits", [
    (None, False, True),                                    # its check has not arrived from a node that answers
    ({"judged": True, "problems": []}, False, False),       # it arrived: the answer stands (code)
    ({"judged": False, "problems": [], "not_judged": ["no driver"]}, False, False),   # arrived, judged nothing
    (None, True, False),                                    # its node stopped answering: nothing more will come
])
def test_watch_until_waits_for_the_culprits_node_check_only_while_it_can_still_come(node, lost, waits):
    """--until stops once a problem stands; an answer node-or-code that is "not known" only because the culprit
    node's own check is still running there is worth waiting for (bounded), any other is not."""
    from gpuprep.api import _node_check_due
    ranks = [_waiting(0, "a"), _slow("b", [], node_lost=lost), _waiting(2, "c")]
    facts = _watched(ranks, nodes={"a": None, "b": node, "c": None})
    found = judge(Job(JobFacts([]), None, facts))
    assert ("job.straggler", 1, None) in _ids(facts)
    assert _node_check_due(facts, found) is waits


def test_a_job_id_that_is_not_a_number_is_refused_in_one_line():
    done = run_cli("watch", "--job", "12; reboot")
    assert done.returncode == 2 and len(done.stderr.strip().splitlines()) == 1 and "job id" in done.stderr
    done = run_cli("watch", "--drain", "--pid", str(os.getpid()))
    assert done.returncode == 2 and "--job" in done.stderr


def test_watch_job_without_slurm_says_so_in_one_line(tmp_path):
    done = run_cli("watch", "--job", "77", env={"PATH": str(tmp_path)})
    assert done.returncode != 0 and len(done.stderr.strip().splitlines()) == 1
    assert "scontrol not found" in done.stderr and "Traceback" not in done.stderr


def test_the_report_of_a_job_across_nodes_names_each_ranks_node_and_where_it_is():
    from gpuprep.api import JobResult
    from gpuprep.report import render
    ranks = [_wr(0, "gpjob1", **_stuck_in("all_reduce", "train.py:98")),
             _wr(1, "gpjob2", **_stuck_in("broadcast", "train.py:96")),
             _wr(2, "gpjob3", **_stuck_in("all_reduce", "train.py:98"))]
    facts = _watched(ranks, job_state="RUNNING", nodes={"gpjob1": None, "gpjob2": None, "gpjob3": None})
    document = JobResult(facts, judge(Job(JobFacts([]), None, facts)), None).document()
    text = render(document, "text", colour=False)
    assert "of job 1 on 3 node(s)" in text and "the job is RUNNING" in text
    row = next(line for line in text.splitlines() if line.strip().startswith("1 "))
    assert "gpjob2" in row and "now broadcast at train.py:96" in row
    assert json.loads(render(document, "json", colour=False))["verdict"] == "fail"


def test_a_step_srun_refuses_is_an_error_in_srun_s_own_words():
    """scontrol says job 1 runs on three nodes, srun says it has ended (real captures, tests/fakes/slurm): no
    watcher answered, and the watch says so in one line, never an empty verdict."""
    from conftest import REPO
    path = f"{REPO / 'tests' / 'fakes' / 'slurm'}{os.pathsep}{os.environ['PATH']}"
    done = run_cli("watch", "--job", "1", "--json", env={"PATH": path})
    assert done.returncode == 1 and len(done.stderr.strip().splitlines()) == 1, done.stderr
    assert "srun started no watcher in job 1: srun: error: Slurm job 1 has expired" in done.stderr
    assert json.loads(done.stdout)["verdict"] == "error"
    done = run_cli("watch", "--job", "99999", env={"PATH": path})
    assert done.returncode == 2 and "Invalid job id specified" in done.stderr and len(done.stderr.splitlines()) == 1


@pytest.mark.parametrize("in_collective, samples, straggler", [
    ((5, 2, 5), 11, None),      # a healthy job beside a CPU hog (the labelled suite's run): rank 1 got fewer slices
    ((4, 2, 0), 4, None),       # 4 samples: rank 2 never seen waiting, rank 1 half the time: chance, not yet told
    ((10, 9, 0), 10, 2),        # rank 2 never waits, the others nearly always: it is the one they wait for
])
def test_one_rank_seen_waiting_less_is_the_straggler_only_beyond_chance(in_collective, samples, straggler):
    """Shares of stack samples in the collective as a real watch saw them: the rank seen waiting least is named
    only when the samples tell it from each rank that waits, never on a few samples' chance."""
    def rank(r, k):
        share = 100.0 * k / samples
        return _wr(r, "abc"[r], stack_sigs=[str(i) for i in range(samples)], sites=[["all_reduce", "t.py:9"]] * samples,
                   last_stack="collective", main_thread={"collective": share, "other": 100 - share},
                   stack_samples=samples, cpu_seconds=[0.5 * i for i in range(samples)],
                   switches=list(range(0, 10 * samples, 10)), cpu_pct=[50.0] * samples, samples=samples,
                   gpu_util_pct=[30.0] * samples, throttle_reasons=[[]] * samples)
    found = _ids(_watched([rank(r, k) for r, k in enumerate(in_collective)]))
    named = {i[1] for i in found if i[0] == "job.straggler"}
    assert named == ({straggler} if straggler is not None else set())


@pytest.mark.parametrize("shares, straggler", [((80.0, 35.0, 75.0), 1), ((80.0, 60.0, 75.0), None)])
def test_when_every_rank_waits_some_of_the_time_the_one_waiting_least_is_the_straggler(shares, straggler):
    """A loaded host: each rank is seen in collectives in 30% of its samples or more, the slow rank too (it waits
    in the collective after its own work). The one waiting half as often as every other is named; ranks alike in
    their waits are exposed communication, no straggler."""
    def rank(r, share):
        return _wr(r, "abc"[r], stack_sigs=[str(i) for i in range(12)], sites=[["all_reduce", "t.py:9"]] * 12,
                   last_stack="collective", main_thread={"collective": share, "compute_launch": 100 - share},
                   stack_samples=12, cpu_seconds=[0.5 * i for i in range(12)], switches=list(range(0, 120, 10)),
                   cpu_pct=[50.0] * 12, samples=12, gpu_util_pct=[30.0] * 12, throttle_reasons=[[]] * 12)
    found = _ids(_watched([rank(r, s) for r, s in enumerate(shares)]))
    named = {i[1] for i in found if i[0] == "job.straggler"}
    assert named == ({straggler} if straggler is not None else set())
    assert (("job.comm-exposed", None, None) in found) == (straggler is None)


@pytest.mark.parametrize("samples, judged", [(6, False), (12, True)])
def test_a_watch_too_short_to_compare_the_ranks_says_so_in_its_headline(samples, judged):
    """Every rank waits some of the time and rank 1 half as often: with 6 samples a rank, too few to tell, the
    report says the comparison was not made (its headline is never a bare OK); with 12 it names rank 1."""
    from gpuprep.report import watch_document

    def rank(r, share):
        return _wr(r, "abc"[r], stack_sigs=[str(i) for i in range(samples)], sites=[["all_reduce", "t.py:9"]] * samples,
                   last_stack="collective", main_thread={"collective": share, "compute_launch": 100 - share},
                   stack_samples=samples, cpu_seconds=[0.5 * i for i in range(samples)],
                   switches=list(range(0, 10 * samples, 10)), cpu_pct=[50.0] * samples, samples=samples,
                   gpu_util_pct=[30.0] * samples, throttle_reasons=[[]] * samples)
    facts = _watched([rank(r, s) for r, s in enumerate((80.0, 35.0, 75.0))])
    found = judge(Job(JobFacts([]), None, facts))
    assert [f.evidence["rank"] for f in found if f.id == "job.straggler"] == ([1] if judged else [])
    doc = watch_document(facts, found)
    assert ("Straggler by comparison" in doc["not_judged"]) is not judged
    assert doc["verdict"] == ("warn" if judged else "info")


def test_a_nodes_words_reach_the_report_with_their_control_characters_escaped():
    merged = Merged()
    merged.feed(_line(ranks=[_rank(sites=[["all_reduce", "t.py:9\x1b[2J"]])], notes=["py-spy\nhealthy\x1b[31m"],
                      node={"judged": True, "problems": [{"id": "gpu.xid", "severity": "fail", "subject": "GPU0\r",
                                                         "message": "Xid 79\n\x1b[2J"}]}))
    texts = merged.notes + [v for p in merged.node_facts["node1"]["problems"] for v in p.values()] + \
        [x for r in merged.ranks.values() for site in r.sites for x in site]
    assert texts and not any(c in t for t in texts for c in "\x1b\n\r")


@pytest.mark.parametrize("in_loader, samples, named", [(1, 3, False), (3, 3, True), (2, 12, False), (9, 12, True),
                                                       (6, 10, True), (5, 10, True), (3, 12, False)])
def test_a_share_of_stack_samples_is_a_verdict_only_when_the_samples_hold_it(in_loader, samples, named):
    """A healthy loop's main thread is in its DataLoader ~3% of the time: one look in three that lands there is
    chance (the failure CI caught on a healthy job), three in three is not. A verdict needs the share at the mark
    (30%) and its lower confidence bound above such chance (10%); 5 in 10 is a starved loop (CI's data-bound job on
    a loaded host was missed when the bound itself had to reach the mark), 3 in 12 is under the mark."""
    share = round(100.0 * in_loader / samples, 1)
    rank = _wr(2, "c", main_thread={"dataloader": share, "other": 100 - share}, stack_samples=samples,
               last_stack="other", samples=samples, cpu_pct=[20.0] * samples, cpu_seconds=[0.2 * i for i in range(samples)])
    found = {i[0] for i in _ids(_watched([rank]))}
    assert ("job.dataloader" in found) == named, found


def test_a_stopped_rank_inside_the_collective_is_the_hung_rank_not_the_fabric():
    """SIGSTOP (or a debugger) holds a rank wherever it is, inside the all-reduce too: every rank then waits in the
    same collective at the same line, which alone reads as the transport. The process state (T) names it; whether
    its node or its code is at fault is not known (who stopped it is not)."""
    def ranks(stopped_rank):
        return [_wr(r, h, **_stuck_in("all_reduce", "train.py:98", stopped=[r == stopped_rank] * 8,
                                      throttle_reasons=[[]] * 8))
                for r, h in ((0, "a"), (1, "b"), (2, "c"))]
    nodes = {h: {"judged": True, "problems": []} for h in "abc"}
    found = _ids(_watched(ranks(1), nodes=nodes))
    assert ("job.hung-rank", 1, None) in found and ("job.node-or-code", 1, "unknown") in found
    assert not any(i[0] == "job.fabric-stall" for i in found)
    assert ("job.fabric-stall", None, None) in _ids(_watched(ranks(None), nodes=nodes))


def test_each_node_relays_its_nccl_ras_report_and_the_merger_names_the_dead_rank_from_it():
    """A node's watcher asks the NCCL RAS service beside it (a strict stand-in answering with the NCCL docs' DEAD
    report) and sends the report on once; the merger reads it as a saved one is read, and the job rules name the
    dead process with its node. A node's text that is no RAS report is dropped with one note."""
    from gpuprep.job.nodewatch import JobProcesses, node_watch
    from ras_standin import RasStandIn
    report = (REPO / "tests" / "data" / "ras" / "text_docs_dead.txt").read_text()
    server = RasStandIn("2.25.1", report, None)
    out = io.StringIO()
    before = dict(os.environ)
    os.environ.update(SLURM_STEP_ID="1", SLURMD_NODENAME="gpnode7", NCCL_RAS_ADDR=server.addr)
    try:
        node_watch(JobProcesses.of_slurm_job("4242", "1"), 0.5, 2,
                   lambda: {"judged": False, "problems": [], "not_judged": []}, out)
    finally:
        os.environ.clear()
        os.environ.update(before)
        server.close()
    lines = [parse_line(text) for text in out.getvalue().splitlines()]
    assert sum(1 for line in lines if line.get("ras")) == 1          # sent once: it did not change
    merged = Merged()
    for text in out.getvalue().splitlines():
        merged.feed(text)
    facts = merged.facts(2, 10, job_id="4242")
    dead = {f.subject for f in judge(Job(JobFacts([]), None, facts)) if f.id == "job.rank-dead"}
    assert {"process 3487984", "rank 21"} <= dead, dead
    merged.feed(_line(ras="a node's words \x1b[2J, no report"))
    assert any("a RAS report dropped" in n for n in merged.notes) and merged.ras is facts.ras


def test_lines_replayed_after_the_watch_judge_a_node_lost_by_its_missing_end_never_by_clocks():
    """watch -i gets each host's lines whole, at the end: a host whose watcher never wrote its end line stopped
    answering, and its ranks are on a lost node. The nodes' clocks are not compared: a node whose clock runs a day
    ahead (or whose lines forge their time) makes no other node lost. Hosts are named by their inventory names, so
    two nodes that call themselves alike (containers, images) stay two."""
    def line(t, pid, rank, **extra):
        return json.dumps({"v": 1, "host": "localhost", "t": t, "ranks": [_rank(pid, rank, cpu_seconds=[1.0])],
                           **extra})
    start = 1795000000.0
    merged = Merged(replay=True)
    for t in range(40):
        merged.feed(line(start + t, 100, 0, **({"end": "done"} if t == 39 else {})), "node-a", host="node-a")
    for t in range(10):
        merged.feed(line(start + t, 100, 1), "node-b", host="node-b")
    for t in range(40):      # a clock a day ahead
        merged.feed(line(start + 86400 + t, 100, 2, **({"end": "done"} if t == 39 else {})), "node-c", host="node-c")
    facts = merged.facts(40, 10)
    assert [(r.rank, r.host, r.node_lost) for r in facts.ranks] == [(0, "node-a", False), (1, "node-b", True),
                                                                    (2, "node-c", False)]
    assert facts.lost_nodes == ["node-b"]
    live = Merged(clock=lambda: 1.0)         # lines as they come: the merger's clock, every node heard just now
    for host in ("node-a", "node-b"):
        live.feed(line(start, 100, 0), host, host=host)
    assert live.facts(40, 10).lost_nodes == []


@pytest.mark.parametrize("grace, sent", [(30.0, True), (0.0, False)])
def test_a_watch_whose_window_ends_before_the_nodes_check_waits_for_it_only_within_its_grace(grace, sent):
    """watch -i's node watcher: its lines are read only at its end, so a node check still running when its 0.5 s
    window ends (this one ends 1 s after the start) is waited for, up to the grace, and sent; without a grace (a
    check that has not ended by the time the watcher returns) the window is all, and the check is not sent."""
    import threading
    from gpuprep.job.nodewatch import JobProcesses, node_watch
    released, start = threading.Event(), time.monotonic()

    def slow_check():
        if grace:
            time.sleep(max(0.0, start + 1.0 - time.monotonic()))
        else:
            released.wait(60)
        return {"judged": True, "problems": [], "not_judged": []}
    out = io.StringIO()
    node_watch(JobProcesses.of_rendezvous("127.0.0.1:9"), 0.2, 0.5, slow_check, out, check_grace=grace)
    released.set()
    lines = [parse_line(text) for text in out.getvalue().splitlines()]
    assert lines[-1]["end"] == "the watch's time is up"
    assert any(line.get("node") for line in lines) is sent, lines


def test_watch_i_with_no_rank_found_and_a_host_that_did_not_answer_says_the_job_was_not_judged(tmp_path):
    """watch -i through a real Ansible run: this machine answers (no rank of the job here), a second host does not
    (nothing listens on 127.0.0.254:1). The job's ranks may be on that host, so this is no "wrong --master" and no
    verdict: one line naming the host that did not answer, never a pass."""
    inventory = tmp_path / "inventory.ini"
    inventory.write_text(
        f"here ansible_connection=local ansible_python_interpreter={sys.executable} "
        f"watch_gpuprep={os.path.join(os.path.dirname(sys.executable), 'gpuprep')} gpuprep_watch_become=false\n"
        "ghost ansible_host=127.0.0.254 ansible_port=1 ansible_connection=ssh\n")
    done = run_cli("watch", "-i", str(inventory), "--master", "127.0.0.1:9", "--duration", "1", timeout=300)
    lines = [line for line in done.stderr.splitlines() if line.strip()]
    assert done.returncode == 1 and not done.stdout.strip(), done.stdout + done.stderr
    assert len(lines) == 1 and "ghost" in lines[0] and "not judged" in lines[0], done.stderr
