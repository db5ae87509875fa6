"""The job across its ranks (issue 45): the rank that never entered the collective the others are in, named from
each rank's PyTorch flight recorder, on real gloo dumps (tests/data/flight, PROVENANCE.md) and on a real job this
test runs; a desync; and dumps that are not what they claim."""
import json
import os
import shutil
import subprocess
import sys

import pytest

from conftest import REPO, run_cli
from gpuprep import api
from gpuprep.errors import BadInput

FLIGHT = REPO / "tests" / "data" / "flight"


def _named(result):
    return {(f.id, f.subject) for f in result.findings if f.severity == "fail"}


@pytest.mark.parametrize("when", ["during-hang", "after-timeout"])
def test_the_rank_that_never_entered_the_collective_is_named(when, tmp_path):
    for case, culprit in (("hang", 2), ("desync", 1)):
        folder = tmp_path / case
        folder.mkdir()
        for dump in (FLIGHT / case).glob(f"{when}.rank*.json"):
            shutil.copy(dump, folder / dump.name)
        result = api.diagnose([str(folder)])
        assert _named(result) == {("job.collective-missing", f"rank {culprit}")}, (case, result.findings)
        (finding,) = result.findings[:1]
        assert finding.evidence["never_entered_by"] == [culprit] and culprit not in finding.evidence["entered_by"]


def test_ranks_that_all_reached_the_same_collective_name_no_one(tmp_path):
    for rank in (0, 1):          # the two ranks of the hang that both entered collective 5
        shutil.copy(FLIGHT / "hang" / f"during-hang.rank{rank}.json", tmp_path / f"during-hang.rank{rank}.json")
    assert not _named(api.diagnose([str(tmp_path)]))


def test_ranks_in_one_collective_with_different_operations_are_a_desync():
    from gpuprep.job.rules.across import desync
    from gpuprep.job.facts import JobFacts
    from gpuprep.job.flight import GroupState, RankCollectives
    from gpuprep.job.judge import Job
    ranks = [RankCollectives(r, f"rank{r}", {"0": GroupState(7, [], {6: op, 7: "gloo:broadcast [[4]]"})})
             for r, op in ((0, "gloo:all_reduce [[5]]"), (1, "gloo:all_gather [[5]]"), (2, "gloo:all_reduce [[5]]"))]
    (found,) = desync(Job(JobFacts([], ranks)))
    assert found.evidence["collective"] == 6 and found.evidence["ops"]["1"] == "gloo:all_gather [[5]]"


def test_a_pickled_dump_is_refused_never_loaded(tmp_path):
    dump = tmp_path / "comm_lib_trace_rank_0"
    dump.write_bytes(b"\x80\x04\x95" + b"\x00" * 32)       # pickle protocol 4's first bytes: code when loaded
    with pytest.raises(BadInput, match="never pickle"):
        from gpuprep.job.flight import read_dump
        read_dump(str(dump))
    bad = tmp_path / "dump.rank0.json"
    bad.write_text(json.dumps({"entries": [{"collective_seq_id": "five", "profiling_name": "x"}], "pg_status": {}}))
    done = run_cli("diagnose", str(bad))
    assert done.returncode == 2 and "entries[0]" in done.stderr and len(done.stderr.splitlines()) == 1


@pytest.mark.slow
@pytest.mark.skipif(__import__("importlib.util").util.find_spec("torch") is None, reason="a real gloo job")
def test_a_real_hung_job_is_named_from_the_dumps_it_wrote(tmp_path):
    """The job of tests/data/flight run here, its collective timeout shortened: after gloo's timeout every rank
    writes its own dump (the JSON form), and the rank that slept is named."""
    env = dict(os.environ, FR_MODE="hang", FR_OUT=str(tmp_path), FR_TIMEOUT_S="6", FR_SLEEP_S="10",
               TORCH_FR_BUFFER_SIZE="2000")
    subprocess.run([sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", "3",
                    str(REPO / "tests" / "data" / "jobs" / "flight_job.py")], env=env, capture_output=True,
                   timeout=240)
    for pickled in tmp_path.glob("api_pickle_rank_*"):
        pickled.unlink()                                   # gpuprep reads the JSON form only
    for sock in tmp_path.glob("sock.rank*"):
        sock.unlink()
    assert sorted(p.name for p in tmp_path.glob("api_json_rank_*.json")) == [f"api_json_rank_{r}.json" for r in range(3)]
    assert _named(api.diagnose([str(tmp_path)])) == {("job.collective-missing", "rank 2")}


# -- NCCL's RAS service ------------------------------------------------------------------------------------------

RAS = REPO / "tests" / "data" / "ras"


def _ras(name):
    return (RAS / name).read_text()


@pytest.mark.parametrize("version, text, json_form, expect", [
    ("2.25.1", "text_docs_dead.txt", None, {("job.rank-dead", "process 3487984"), ("job.rank-dead", "rank 21")}),
    ("2.26.2", "text_2.26.2_issue1911_mismatch.txt", None, {("job.ranks-behind", "job")}),
    ("2.26.2", "text_2.26.2_issue1730_healthy.txt", None, set()),
    ("2.28.9", "text_2.26.2_issue1730_healthy.txt", "json_2.28.9_real_a10g_mismatch.txt", {("job.ranks-behind", "rank 1")}),
    ("2.28.9", "text_2.26.2_issue1730_healthy.txt", "json_synth_2.28.9_buggy_missing_rank.txt", {("job.rank-dead", "rank 1")}),
    ("2.31.2", "text_2.26.2_issue1730_healthy.txt", "json_synth_2.29plus_fixed_missing_rank.txt", {("job.rank-dead", "rank 1")}),
])
def test_the_ras_client_reads_every_form_nccl_prints(version, text, json_form, expect):
    from gpuprep.job.rules.across import rank_dead, ranks_behind
    from gpuprep.job.facts import JobFacts
    from gpuprep.job.judge import Job
    from gpuprep.job.ras import query
    from ras_standin import RasStandIn
    server = RasStandIn(version, _ras(text), _ras(json_form) if json_form else None)
    try:
        report = query(server.addr, timeout=2)
    finally:
        server.close()
    assert server.seen[:3] == ["CLIENT PROTOCOL 2", "TIMEOUT 2", "SET FORMAT json"] and server.seen[-1] == "VERBOSE STATUS"
    job = Job(JobFacts([], [], report))
    found = {(f.id, f.subject) for f in rank_dead(job) + ranks_behind(job)}
    assert found == expect, found


def test_a_saved_ncclras_report_joins_diagnose_and_a_missing_rank_fails(tmp_path):
    saved = tmp_path / "ncclras.txt"
    saved.write_text(_ras("text_docs_incomplete_timeout.txt"))
    done = run_cli("diagnose", str(saved), "--json")
    doc = json.loads(done.stdout)
    assert done.returncode == 1 and ("job.rank-dead", "fail") in {(f["id"], f["severity"]) for f in doc["findings"]}
    (process,) = [f for f in doc["findings"] if f["subject"] == "process 3487984"]
    assert process["evidence"]["host"] == "172.16.64.213" and process["evidence"]["gpu"] == 5


def test_watch_reads_the_nodes_ras_service_where_it_answers(tmp_path):
    from ras_standin import RasStandIn
    server = RasStandIn("2.29.2", "", _ras("json_synth_2.29plus_fixed_missing_rank.txt"))
    try:
        done = run_cli("watch", "--json", "--", sys.executable, "-c", "import time; time.sleep(2)",
                       env={"NCCL_RAS_ADDR": server.addr})
    finally:
        server.close()
    doc = json.loads(done.stdout)
    assert doc["ras"]["missing"][0]["rank"] == 1 and ("job.rank-dead", "rank 1") in {(f["id"], f["subject"])
                                                                                     for f in doc["findings"]}
