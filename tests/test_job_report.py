"""The Slurm epilog's job report (`gpuprep slurm epilog --job-report DIR`): the prolog notes the job's start, the
epilog reads NVML's per-process accounting through the real nvidia-ml-py and the C stand-in of libnvidia-ml (the
processes a job ran, kept after they ended), and writes how busy each of the job's GPUs was and why: the causes a
`gpuprep watch` of the job left beside it, or how to get them. What cannot be measured is said, never passed."""
import json
import subprocess
import sys
import time

import nvml_stub
from conftest import REPO, corpus
from gpuprep.parsers import import_files

SLURM = REPO / "tests" / "data" / "slurm"
pytestmark = __import__("pytest").mark.skipif(not nvml_stub.compiler_available(), reason="needs a C compiler")


def _scontrol(tmp_path):
    script = tmp_path / "scontrol"
    script.write_text(f"#!/bin/sh\nif [ \"$1\" = show ]; then cat {SLURM / 'scontrol-show-node-idle.txt'}; exit 0; fi\n"
                      f"printf '%s\\n' \"$*\" >> {tmp_path / 'scontrol.log'}\n")
    script.chmod(0o755)
    return str(script)


def _config(tmp_path, accounted, mode=1):
    """Two GPUs of a real capture, accounting `mode` on both, and per GPU the processes NVML kept:
    (pid, gpu %, memory %, max bytes, start time, seconds, running)."""
    snap = import_files([corpus("dual-rtx-a5000.nvidia-smi-q.xml")])
    path = tmp_path / "nvml.conf"
    lines = nvml_stub.config_for(snap).splitlines()
    for index, processes in enumerate(accounted):
        lines.append(f"gpu {index} accounting_mode {mode}")
        if processes:
            lines.append(f"gpu {index} accounted " + ",".join(
                f"{pid}:{gpu}:{mem}:{peak}:{int(start * 1e6)}:{int(seconds * 1000)}:{int(running)}"
                for pid, gpu, mem, peak, start, seconds, running in processes))
    path.write_text("\n".join(lines) + "\n")
    return path


def _hook(config, tmp_path, hook, *extra, gpus="0,1"):
    env = dict(nvml_stub.stub_env(config), SLURM_JOB_ID="4242", SLURM_JOB_GPUS=gpus)
    return subprocess.run([sys.executable, "-m", "gpuprep", "slurm", hook, "--scontrol", _scontrol(tmp_path),
                           "--node", "node1", "--baseline-dir", str(tmp_path / "state"), *extra],
                          capture_output=True, text=True, timeout=120, cwd=str(REPO), env=env)


def _prolog(config, tmp_path):
    """The prolog notes the job's start (this machine is judged too: its verdict does not matter here)."""
    done = _hook(config, tmp_path, "prolog")
    assert done.returncode in (0, 1) and (tmp_path / "state" / "job-4242.json").is_file(), done.stderr


def test_the_epilog_reports_each_gpu_of_the_job_and_names_the_cause_a_watch_saw(tmp_path):
    reports = tmp_path / "reports"
    reports.mkdir()
    before = time.time() - 3600
    config = _config(tmp_path, [[], []])
    _prolog(config, tmp_path)
    start = time.time()
    # GPU0: an earlier job's process (not this job's), then two of this job's, busy 8% and 12% of their time;
    # GPU1: one process busy 91%
    config = _config(tmp_path, [[(11, 95, 40, 1 << 30, before, 60, False), (21, 8, 3, 2 << 30, start + 1, 100, False),
                                 (22, 12, 5, 3 << 30, start + 2, 100, False)],
                                [(23, 91, 60, 20 << 30, start + 1, 200, False)]])
    watch = {"schema": "gpuprep.watch/1", "findings": [
        {"id": "job.dataloader", "severity": "warn", "subject": "rank 0 (pid 21)",
         "title": "The main thread waits on the DataLoader in 80% of samples", "remedy": "Raise num_workers"},
        {"id": "job.summary", "severity": "pass", "subject": "job", "title": "ok"},
        {"id": "rm -rf /", "severity": "fail", "subject": "x", "title": "not an id of ours"}]}
    (reports / "job-4242.watch.json").write_text(json.dumps(watch))
    done = _hook(config, tmp_path, "epilog", "--job-report", str(reports))
    assert done.returncode == 0, done.stderr
    report = json.loads((reports / "job-4242.report.json").read_text())
    assert report["schema"] == "gpuprep.job-report/1" and report["job"] == "4242" and report["verdict"] == "warn"
    gpus = {g["index"]: g for g in report["gpus"]}
    assert gpus[0]["processes"] == 2 and gpus[0]["gpu_util_pct"] == 10.0 and gpus[0]["max_memory_bytes"] == 3 << 30
    assert gpus[1]["gpu_util_pct"] == 91.0
    found = [(f["id"], f["subject"].split()[0]) for f in report["findings"]]
    assert found == [("job.gpu-idle", "GPU0"), ("job.dataloader", "rank")]
    assert "job 4242: warn (kernels ran: GPU0 10%, GPU1 91%); job.gpu-idle GPU0" in done.stderr


def test_an_unused_gpu_and_accounting_switched_off_are_said_not_passed(tmp_path):
    reports = tmp_path / "reports"
    config = _config(tmp_path, [[], []])
    _prolog(config, tmp_path)
    busy = _config(tmp_path, [[(31, 97, 50, 1 << 30, time.time() + 1, 50, False)], []])
    assert _hook(busy, tmp_path, "epilog", "--job-report", str(reports)).returncode == 0
    report = json.loads((reports / "job-4242.report.json").read_text())
    (unused,) = report["findings"]
    assert (unused["id"], unused["subject"].split()[0], unused["severity"]) == ("job.gpu-idle", "GPU1", "warn")
    assert "ran nothing" in unused["title"] and "how to" not in unused["remedy"]

    _prolog(config, tmp_path)
    off = _config(tmp_path, [[], []], mode=0)
    assert _hook(off, tmp_path, "epilog", "--job-report", str(reports)).returncode == 0
    report = json.loads((reports / "job-4242.report.json").read_text())
    assert report["gpus"] == [] and report["verdict"] == "info"
    assert {(f["id"], f["subject"].split()[0]) for f in report["findings"]} == {("job.not-judged", "GPU0"),
                                                                                ("job.not-judged", "GPU1")}
    assert all("nvidia-smi -am 1" in f["remedy"] for f in report["findings"])


def test_without_the_prologs_note_no_process_is_counted_as_the_jobs(tmp_path):
    reports = tmp_path / "reports"
    config = _config(tmp_path, [[(41, 5, 1, 1 << 20, time.time() - 10, 5, False)], []])
    assert _hook(config, tmp_path, "epilog", "--job-report", str(reports)).returncode == 0
    report = json.loads((reports / "job-4242.report.json").read_text())
    (finding,) = report["findings"]
    assert finding["id"] == "job.not-judged" and "no start time" in finding["title"] and report["gpus"] == []
