"""Real torchrun runs on the CPU (gloo): a pass, a straggler named, a dead rank named, bounded time."""
import json
import shutil
from pathlib import Path

import pytest

from conftest import REPO, run_cli
from gpuprep.burnin.torchrun import launch
from gpuprep.burnin.judge import judge

pytest.importorskip("torch")


@pytest.fixture(scope="module")
def two_rank_report(tmp_path_factory):
    """One real 2-rank burn-in's report (--json -o), which the tests of its numbers and of its HTML page read."""
    report = tmp_path_factory.mktemp("burnin") / "report.json"
    done = run_cli("burnin", "--backend", "gloo", "--duration", "10s", "--json", "-o", str(report), timeout=120)
    assert done.returncode == 0, done.stdout + done.stderr
    return json.loads(report.read_text())


@pytest.mark.slow
def test_two_rank_cpu_burnin_passes_with_numbers(two_rank_report, tmp_path):
    doc = two_rank_report
    assert doc["verdict"] == "pass" and doc["backend"] == "gloo" and doc["world_size"] == 2
    for rank in doc["ranks"]:
        assert rank["median_step_ms"] > 0 and rank["memory"]["ok"] and rank["memory"]["bytes"] == 64 << 20
        assert [p["bad_words"] for p in rank["memory"]["patterns"]] == [0] * 5
        assert rank["load"] == {"width": 256, "batch": 64, "layers": 2, "dtype": "fp32",
                                "flops_per_step": 6.0 * 64 * 256 * 256 * 2, "memory_bytes": 12 * 256 * 256 * 2,
                                "expected_step_s": None}
        sweep = rank["allreduce"]
        assert sweep[0]["bytes"] == 4096 and sweep[-1]["bytes"] == 16 << 20
        for row in sweep:   # nccl-tests' definition for all-reduce on 2 ranks: busbw = algbw * 2(n-1)/n = algbw
            assert row["busbw_gbs"] == pytest.approx(row["algbw_gbs"] * 2 * (2 - 1) / 2)
    assert_burnin_formats(doc)
    # the same node held to its own baseline: this report with every busbw ten times higher (a faster past)
    faster = dict(doc, ranks=[dict(r, allreduce=[dict(p, busbw_gbs=10 * p["busbw_gbs"]) for p in r["allreduce"]])
                              for r in doc["ranks"]])
    baseline = tmp_path / "baseline.json"
    baseline.write_text(json.dumps(faster))
    again = run_cli("burnin", "--backend", "gloo", "--duration", "6s", "--baseline", str(baseline), "--json",
                    timeout=120)
    (held,) = [f for f in json.loads(again.stdout)["findings"] if f["subject"] == "run (baseline)"]
    assert held["severity"] == "warn" and "below this node's baseline" in held["title"], held
    assert held["evidence"]["bytes"] == 16 << 20 and held["evidence"]["baseline_file"] == str(baseline)


def assert_burnin_formats(doc):
    """The real run's report as Prometheus text (parsed) and JUnit (schema-valid), saying what the report says."""
    import xmlschema
    from prometheus_client.parser import text_string_to_metric_families

    from gpuprep.report import render
    from test_formats import XSD
    samples = {(s.name, tuple(sorted(s.labels.items()))): s.value
               for family in text_string_to_metric_families(render(doc, "prometheus")) for s in family.samples}
    sizes = {row["bytes"] for row in doc["ranks"][0]["allreduce"]}
    busbw = {dict(labels)["size"]: v for (name, labels), v in samples.items() if name == "gpuprep_burnin_busbw_gbs"}
    assert set(map(int, busbw)) == sizes
    largest = max(sizes)
    slowest = min(p["busbw_gbs"] for r in doc["ranks"] for p in r["allreduce"] if p["bytes"] == largest)
    assert busbw[str(largest)] == pytest.approx(slowest)
    assert samples[("gpuprep_burnin_verdict", (("verdict", doc["verdict"]),))] == 1
    steps = [v for (name, _), v in samples.items() if name == "gpuprep_burnin_step_seconds"]
    assert sorted(steps) == pytest.approx(sorted(r["median_step_ms"] / 1000 for r in doc["ranks"]))
    xmlschema.XMLSchema(str(XSD)).validate(render(doc, "junit"))


@pytest.mark.slow
@pytest.mark.skipif(not shutil.which("chromium"), reason="needs chromium")
def test_burnin_html_report_draws_bandwidth_and_step_times(two_rank_report, tmp_path):
    from gpuprep.report import render
    from test_formats import colour_share, screenshot
    page = tmp_path / "burnin.html"
    page.write_text(render(two_rank_report, "html"))
    dom = screenshot(page, tmp_path / "burnin.png")
    assert dom.count('class="busbw"') == 2 and dom.count('class="step"') == 2      # one line and one bar per rank
    assert colour_share(tmp_path / "burnin.png", (0x1f, 0x77, 0xb4)) > 0.0005       # rank 0's line / the bars


@pytest.mark.slow
def test_slow_rank_is_named_as_the_straggler():
    run = launch(8, 2, "gloo", env={"GPUPREP_BURNIN_TEST_SLOW_RANK": "1"})
    findings = judge(run)
    stragglers = [f for f in findings if f.id == "burnin.straggler"]
    assert len(stragglers) == 1 and stragglers[0].subject.startswith("rank 1 ")


@pytest.mark.slow
def test_the_ranks_run_with_the_env_file_apply_wrote_unquoted(tmp_path):
    """The loop on one host: the file `gpuprep nccl-env` prints (byte for byte what the nccl_env role writes) is
    the environment every rank sees, without the file's quotes. The old reader handed NCCL '"=lo"'."""
    done = run_cli("nccl-env", "--socket-ifname", "=lo", "--set", "NCCL_DEBUG=WARN")
    assert done.returncode == 0, done.stderr
    env_file = tmp_path / "env"
    env_file.write_text(done.stdout)
    run = launch(6, 2, "gloo", env_file=str(env_file))
    assert sorted(run.ranks) == [0, 1], run.log_tail
    for rank in run.ranks.values():
        assert rank["env"]["NCCL_SOCKET_IFNAME"] == "=lo" and rank["env"]["NCCL_DEBUG"] == "WARN"
        assert rank["env"]["OMP_NUM_THREADS"].isdigit() and rank["steps"] > 0
    assert [f.id for f in judge(run) if f.severity == "fail"] == []


@pytest.mark.slow
def test_dead_rank_ends_the_run_and_is_named():
    run = launch(8, 2, "gloo", env={"GPUPREP_BURNIN_TEST_DIE_RANK": "1"})
    assert not run.timed_out          # it ended when the rank died, not when the hang watchdog fired
    failed = [f for f in judge(run) if f.id == "burnin.rank-failed"]
    assert [f.subject for f in failed] == ["rank 1"]
    assert run.exit_code != 0


def test_the_rank_that_died_first_is_named_when_torchrun_sees_two_fail_at_once():
    """torchrun names the first failure it observed; when it sees two in one look it may name the rank that only
    raised because its peer vanished (seen in CI, a loaded machine). Real torchrun, a slow monitor to see both."""
    import subprocess
    import sys
    from gpuprep.burnin.torchrun import root_cause
    done = subprocess.run([sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", "2",
                           "--max-restarts", "0", "--monitor-interval", "3",
                           str(REPO / "tests" / "data" / "burnin" / "peer-vanishes.py")],
                          capture_output=True, text=True, timeout=120)
    assert done.returncode != 0 and "exitcode  : 17" in done.stderr
    assert root_cause(done.stdout + done.stderr) == (1, 17)


def test_a_rank_torn_down_by_sigabrt_after_its_peer_died_is_not_named_first():
    """NCCL's watchdog aborts a rank whose peer is gone (SIGABRT, exit code -6), as gloo's teardown did to the test
    job of gpuprep watch on a loaded host: the rank that died on its own (17) is the one named."""
    import os
    import subprocess
    import sys
    from gpuprep.burnin.torchrun import root_cause
    done = subprocess.run([sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", "2",
                           "--max-restarts", "0", "--monitor-interval", "3",
                           str(REPO / "tests" / "data" / "burnin" / "peer-vanishes.py")],
                          capture_output=True, text=True, timeout=120, env=dict(os.environ, PEER_VANISHES_ABORT="1"))
    assert "exitcode  : -6" in done.stderr and "exitcode  : 17" in done.stderr, done.stderr[-2000:]
    assert root_cause(done.stdout + done.stderr) == (1, 17)


@pytest.mark.slow
def test_a_corrupted_word_fails_the_rank_with_its_offset():
    run = launch(6, 2, "gloo", env={"GPUPREP_BURNIN_TEST_FLIP_WORD": "1000003"})
    memory = [f for f in judge(run) if f.id == "burnin.memory"]
    assert len(memory) == 2          # both ranks of this host corrupt the same word in their own buffer
    assert all(f.evidence["first_bad_offset"] == 8 * 1000003 and f.evidence["bad_words"] == 1 for f in memory)
    assert "the first at byte offset 8000024" in memory[0].title        # 64-bit words


def test_bad_duration_is_bad_input():
    done = run_cli("burnin", "--duration", "soon")
    assert done.returncode == 2 and "not a duration" in done.stderr


def _free_port():
    from gpuprep.burnin.torchrun import free_port
    return free_port()


@pytest.mark.slow
def test_two_nodes_rendezvous_on_loopback():
    import subprocess
    import sys
    port = _free_port()
    argv = [sys.executable, "-m", "gpuprep", "burnin", "--backend", "gloo", "--duration", "8s", "--nproc", "1", "--nnodes", "2",
            "--master", f"127.0.0.1:{port}", "--json"]
    nodes = [subprocess.Popen(argv + ["--node-rank", str(r)], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                              text=True) for r in (0, 1)]
    outputs = [n.communicate(timeout=120) for n in nodes]
    for node, (out, err) in zip(nodes, outputs):
        assert node.returncode == 0, err[-2000:]
        doc = json.loads(out)
        assert doc["world_size"] == 2 and doc["nodes"] == 2 and doc["verdict"] == "pass"
    ranks = {json.loads(out)["ranks"][0]["rank"] for out, _ in outputs}
    assert ranks == {0, 1}


@pytest.mark.slow
def test_impossible_rendezvous_fails_within_its_timeout():
    port = _free_port()          # nobody will host the store there
    done = run_cli("burnin", "--backend", "gloo", "--duration", "5s", "--nproc", "1", "--nnodes", "2", "--node-rank", "1",
                   "--master", f"127.0.0.1:{port}", "--rdzv-timeout", "8", "--json", timeout=120)
    assert done.returncode == 1       # the subprocess timeout above bounds a hang
    doc = json.loads(done.stdout)
    assert doc["findings"][0]["id"] == "burnin.rendezvous"
    assert not any(f["id"] == "burnin.hang" for f in doc["findings"])


@pytest.mark.slow
def test_burnin_across_an_inventory_of_two_local_nodes(tmp_path):
    import sys
    import yaml
    port = _free_port()
    inventory = tmp_path / "two.yml"
    inventory.write_text(yaml.safe_dump({"all": {"hosts": {"node-a": {"ansible_host": "127.0.0.1"}, "node-b": {}},
                                                 "vars": {"ansible_connection": "local",
                                                          "ansible_python_interpreter": sys.executable,
                                                          # the hosts' own gpuprep, as a user with a venv names it
                                                          "burnin_gpuprep": str(Path(sys.executable).parent / "gpuprep")}}}))
    done = run_cli("burnin", "-i", str(inventory), "--backend", "gloo", "--duration", "8s", "--nproc", "1",
                   "--master", f"127.0.0.1:{port}", "--json", timeout=300)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    doc = json.loads(done.stdout)
    assert doc["nodes"] == 2 and doc["world_size"] == 2 and doc["verdict"] == "pass"
    assert {r["inventory_host"] for r in doc["ranks"]} == {"node-a", "node-b"}


@pytest.mark.slow
def test_a_burnin_beside_a_cpu_hog_trains_and_passes(cpu_hog):
    """On a loaded machine the CPU-built model ate the training window: a run of zero steps passed."""
    run = launch(8, 2, "gloo")
    findings = judge(run)
    assert [f.id for f in findings if f.severity == "fail"] == [], run.log_tail
    assert all(rank["steps"] > 0 for rank in run.ranks.values()) and sorted(run.ranks) == [0, 1]


@pytest.mark.slow
def test_a_killed_rank_is_named_beside_a_cpu_hog(cpu_hog):
    """On a loaded host torchrun may see the surviving rank's teardown (exit 1, or SIGABRT) first: the rank that
    died on its own is still the one named."""
    run = launch(8, 2, "gloo", env={"GPUPREP_BURNIN_TEST_DIE_RANK": "1"})
    assert [f.subject for f in judge(run) if f.id == "burnin.rank-failed"] == ["rank 1"], run.log_tail[-20:]
