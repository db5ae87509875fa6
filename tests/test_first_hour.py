"""Issue 43: what a new user meets in the first hour: compat in a person's GPU names and driver branches, watch
whole and honest (its stacks, its signals, a lone process, a PID that is no job), and the small things a person
notices (titles in words, id suggestions, an -o suffix gpuprep does not write)."""
import importlib.util
import json
import os
import signal
import subprocess
import sys
import time

import pytest

from conftest import REPO, run_cli

TRAIN = str(REPO / "tests" / "data" / "jobs" / "train.py")


# -- compat speaks a person's GPU names --------------------------------------------------------------------------

@pytest.mark.parametrize("gpu, cc", [("H100", "9.0"), ("A100", "8.0"), ("H100 SXM5", "9.0"), ("L40S", "8.9"),
                                     ("B200", "10.0"), ("RTX 5090", "12.0"), ("NVIDIA B300 SXM6 AC", "10.3"),
                                     ("NVIDIA H100 80GB HBM3", "9.0")])
def test_compat_resolves_a_family_whose_members_share_a_compute_capability(gpu, cc):
    done = run_cli("compat", "--driver", "580.65.06", "--cuda", "12.4", "--gpu", gpu, "--json")
    assert done.returncode in (0, 1), done.stderr
    found = [f for f in json.loads(done.stdout)["findings"] if f["id"] == "compat.driver-gpu"]
    assert found and all(f["evidence"]["compute_capability"] == cc for f in found), found


def test_compat_refuses_a_family_of_several_compute_capabilities_with_its_members():
    done = run_cli("compat", "--driver", "580.65.06", "--cuda", "12.4", "--gpu", "RTX")
    assert done.returncode == 2 and "RTX 3090 (8.6)" in done.stderr and "RTX 5090 (12.0)" in done.stderr
    typo = run_cli("compat", "--driver", "580.65.06", "--cuda", "12.4", "--gpu", "H10")
    assert typo.returncode == 2 and "close: H100" in typo.stderr and len(typo.stderr.splitlines()) == 1


def test_compat_judges_a_driver_branch_by_its_first_release_and_says_so():
    doc = json.loads(run_cli("compat", "--driver", "535", "--cuda", "12.2", "--json").stdout)
    said = [f for f in doc["findings"] if f["id"] == "compat.table-range"]
    assert said and said[0]["evidence"] == {"branch": "535", "judged_as": "535.54.03"}
    assert [f["severity"] for f in doc["findings"] if f["id"] == "compat.toolkit-driver"] == ["pass"]


# -- watch under signals, a lone process, PIDs that are no job --------------------------------------------------

TERM_AWARE = ("import signal, sys, time\n"
              "def stop(signum, frame):\n"
              "    open(sys.argv[1], 'w').write(str(signum)); sys.exit(0)\n"
              "signal.signal(signal.SIGTERM, stop)\n"
              "open(sys.argv[2], 'w').close()\n"
              "while True:\n    sum(range(10000)); time.sleep(0.01)\n")


def _wait_for(path, proc, seconds=120):
    deadline = time.monotonic() + seconds
    while not os.path.exists(path):
        assert proc.poll() is None and time.monotonic() < deadline, "the job never started"
        time.sleep(0.1)


def test_sigterm_to_watch_reaches_the_job_and_the_report_is_written(tmp_path):
    got, started, tmp = tmp_path / "got-signal", tmp_path / "started", tmp_path / "tmp"
    tmp.mkdir()
    report = tmp_path / "watch.json"
    env = dict(os.environ, TMPDIR=str(tmp))
    watch = subprocess.Popen([sys.executable, "-m", "gpuprep", "watch", "-o", str(report), "--", sys.executable, "-c",
                              TERM_AWARE, str(got), str(started)], env=env, cwd=REPO,
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    _wait_for(started, watch)     # the job runs: watch's handler was set before it started (no sleep: any moment)
    watch.send_signal(signal.SIGTERM)
    out, err = watch.communicate(timeout=120)
    assert got.read_text() == str(int(signal.SIGTERM))              # the job was told, once, and stopped itself
    assert watch.returncode == 128 + signal.SIGTERM, err
    doc = json.loads(report.read_text())
    assert doc["signal"] == signal.SIGTERM and doc["exit_code"] == 0
    assert not list(tmp.iterdir())                                   # nothing left in TMPDIR


# the job tells watch to stop as its first act: the stop lands while watch is still setting up its watcher (its
# imports), or at its first samples: either way the job hears it, and is never left running
TELLS_WATCH = ("import os, signal, sys, time\n"
               "def stop(signum, frame):\n"
               "    open(sys.argv[1], 'w').write(str(signum)); sys.exit(0)\n"
               "signal.signal(signal.SIGTERM, stop)\n"
               "open(sys.argv[2], 'w').write(str(os.getpid()))\n"
               "os.kill(os.getppid(), signal.SIGTERM)\n"
               "deadline = time.monotonic() + 300\n"
               "while time.monotonic() < deadline:\n    time.sleep(0.01)\n")


def test_a_stop_while_watch_sets_up_reaches_the_job_and_never_orphans_it(tmp_path):
    got, pid_file, report = tmp_path / "got-signal", tmp_path / "job-pid", tmp_path / "watch.json"
    watch = subprocess.Popen([sys.executable, "-m", "gpuprep", "watch", "-o", str(report), "--", sys.executable, "-c",
                              TELLS_WATCH, str(got), str(pid_file)], cwd=REPO,
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        out, err = watch.communicate(timeout=120)
    finally:
        if pid_file.exists() and pid_file.read_text() and not got.exists():
            os.kill(int(pid_file.read_text()), signal.SIGKILL)      # an orphaned job is not left behind
        if watch.poll() is None:
            watch.kill()
    assert "internal error" not in err, err
    assert got.read_text() == str(int(signal.SIGTERM)), err          # the job was told, and stopped itself
    assert watch.returncode == 128 + signal.SIGTERM, err
    assert json.loads(report.read_text())["signal"] == signal.SIGTERM


def test_a_job_killed_by_a_signal_exits_128_plus_n(tmp_path):
    done = run_cli("watch", "--", sys.executable, "-c", "import os, signal, time; time.sleep(1.5); "
                                                         "os.kill(os.getpid(), signal.SIGKILL)")
    assert done.returncode == 128 + signal.SIGKILL, done.stderr


def _watch_pid(proc, seconds):
    done = run_cli("watch", "--json", "--pid", str(proc.pid), "--duration", str(seconds))
    return done, json.loads(done.stdout)


def test_a_lone_sleeping_process_is_stalled_only_after_its_window_and_never_hung(tmp_path):
    started = tmp_path / "started"
    proc = subprocess.Popen([sys.executable, "-c", f"open({str(started)!r}, 'w').close()\nimport time\n"
                             "time.sleep(600)"])
    try:
        _wait_for(started, proc)
        early, early_doc = _watch_pid(proc, 3)            # fewer quiet samples than the window: nothing said
        late, late_doc = _watch_pid(proc, 9)
    finally:
        proc.kill()
        proc.wait()
    ids = lambda doc: {(f["id"], f["severity"]) for f in doc["findings"]}      # noqa: E731
    assert not {i for i, _ in ids(early_doc)} & {"job.stalled", "job.hung-rank"}
    assert ("job.stalled", "warn") in ids(late_doc) and "job.hung-rank" not in {i for i, _ in ids(late_doc)}
    (stalled,) = [f for f in late_doc["findings"] if f["id"] == "job.stalled"]
    assert json.loads(json.dumps(stalled["evidence"])) == stalled["evidence"] and late.returncode == 0


@pytest.mark.parametrize("pid, words", [("1", "not a training job"), ("99999999999", "not a process id"),
                                        ("NONPYTHON", "runs no Python process")])
def test_a_pid_that_is_no_job_is_one_line_and_exit_2(pid, words):
    other = subprocess.Popen(["sleep", "60"]) if pid == "NONPYTHON" else None
    try:
        done = run_cli("watch", "--pid", str(other.pid) if other else pid, "--duration", "2")
    finally:
        if other:
            other.kill()
            other.wait()
    assert done.returncode == 2 and words in done.stderr and len(done.stderr.splitlines()) == 1, done.stderr


PYSPY_REFUSED = ("#!/bin/sh\n"      # what py-spy prints when ptrace is refused (its own words)
                 "echo 'Permission Denied: Try running again with elevated permissions by going \"sudo env "
                 "\"PATH=$PATH\" !!\"' >&2\nexit 1\n")


@pytest.mark.skipif(importlib.util.find_spec("torch") is None, reason="the starved job is a PyTorch loop")
def test_watch_without_stacks_is_never_ok(tmp_path):
    stub = tmp_path / "bin"
    stub.mkdir()
    (stub / "py-spy").write_text(PYSPY_REFUSED)
    (stub / "py-spy").chmod(0o755)
    env = {"PATH": f"{stub}{os.pathsep}{os.environ['PATH']}", "TRAIN_STEPS": "80"}
    done = run_cli("watch", "--", sys.executable, TRAIN, "data-bound", str(tmp_path), env=env, timeout=600)
    assert done.returncode == 0, done.stderr[-2000:]
    last = done.stdout.strip().splitlines()[-1]
    assert not last.startswith("OK") and ("NOT JUDGED" in last or last.startswith(("WARN", "FAIL"))), done.stdout


# -- the steady state -------------------------------------------------------------------------------------------

def test_the_shares_start_at_the_first_step_frame():
    from gpuprep.job.stacks import classify, steady
    importing = [("<module>", "/venv/lib/torch/distributed/__init__.py"),
                 ("_call_with_frames_removed", "<frozen importlib._bootstrap>"), ("<module>", "train.py")]
    assert classify(importing) == "other"                     # import torch.distributed is start-up, no collective
    samples = ["other"] * 10 + ["dataloader", "compute_launch", "other", "dataloader"]
    assert steady(samples) == samples[10:]
    # a sync-bound loop: its .item() samples are its steady state, not start-up before its first forward frame
    sync_bound = ["other"] * 3 + ["sync"] * 5 + ["compute_launch"]
    assert steady(sync_bound) == sync_bound[3:]


# -- small things a person notices ------------------------------------------------------------------------------

def test_titles_in_words_suggestions_and_output_suffixes(tmp_path):
    plan = run_cli("plan", "--nproc", "2")
    assert "{" not in plan.stdout and "rank 0 has" in plan.stdout
    typo = run_cli("check", "--from", str(REPO / "tests" / "corpus" / "a10.nvidia-smi.txt"), "--skip",
                   "gpu.persistance-off")
    assert typo.returncode == 2 and "did you mean gpu.persistence-off" in typo.stderr
    pdf = run_cli("check", "--from", str(REPO / "tests" / "corpus" / "a10.nvidia-smi.txt"), "-o", str(tmp_path / "r.pdf"))
    assert pdf.returncode == 2 and ".pdf" in pdf.stderr and not (tmp_path / "r.pdf").exists()
