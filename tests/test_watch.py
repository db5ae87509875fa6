"""gpuprep watch on real torch jobs this test runs on the CPU (tests/data/jobs/train.py, TRAIN_STEPS set: unprofiled),
sampled from outside through /proc, py-spy and NVML; the GPU side through the C stand-in of libnvidia-ml, given each
GPU's utilisation, clocks, throttle reasons, memory and the job's real PIDs as its compute processes."""
import json
import os
import shutil
import subprocess
import sys
import time

import pytest

import nvml_stub
from conftest import REPO, corpus, run_cli
from gpuprep.parsers import import_files

pytest.importorskip("torch")
TRAIN = str(REPO / "tests" / "data" / "jobs" / "train.py")
needs_pyspy = pytest.mark.skipif(not (shutil.which("py-spy") or os.path.exists(os.path.join(
    os.path.dirname(sys.executable), "py-spy"))), reason="needs py-spy (a test dependency)")


def watched(args, env=None, timeout=180):
    done = run_cli("watch", "--json", *args, env=env, timeout=timeout)
    assert done.stdout.startswith("{"), done.stderr[-2000:]
    return done, json.loads(done.stdout)


def kill_tree(job):
    """The job and every process under it: torchrun starts its ranks in sessions of their own."""
    import psutil
    try:
        family = psutil.Process(job.pid).children(recursive=True)
    except psutil.NoSuchProcess:
        family = []
    for proc in family:
        try:
            proc.kill()
        except psutil.NoSuchProcess:
            pass
    job.kill()
    job.wait()


def watched_on_one_gpu(tmp_path, job, extra, seconds, **changes):
    """`watch --pid` of the job through the NVML stand-in: one H100 of a real capture (with `changes` to its
    fields) and the `extra` configuration lines (utilisation, the job's PID as a compute process...)."""
    snap = import_files([corpus("h100-sxm-x8.nvidia-smi-q.txt")])
    snap.gpus = snap.gpus[:1]
    for key, value in changes.items():
        setattr(snap.gpus[0], key, value)
    config = tmp_path / "nvml.conf"
    config.write_text(nvml_stub.config_for(snap) + extra)
    done = nvml_stub.run(config, [sys.executable, "-m", "gpuprep", "watch", "--json", "--pid", str(job.pid),
                                  "--duration", str(seconds)])
    return snap, done, json.loads(done.stdout)


def warned(doc):
    return [(f["id"], f["subject"].split(" (pid")[0]) for f in doc["findings"] if f["severity"] in ("warn", "fail")]


def torchrun(mode, steps, out, **env):
    return [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", "2", TRAIN, mode, str(out)]


@needs_pyspy
@pytest.mark.slow
def test_a_data_bound_job_is_named_and_its_exit_code_passes_through(tmp_path):
    done, doc = watched(["--", sys.executable, TRAIN, "data-bound", str(tmp_path)], env={"TRAIN_STEPS": "150"})
    assert done.returncode == 0 and doc["exit_code"] == 0 and doc["schema"] == "gpuprep.watch/1"
    (rank,) = doc["ranks"]
    assert rank["main_thread"]["dataloader"] >= 30 and rank["workers"] == 0
    assert [i for i, _ in warned(doc)] == ["job.dataloader"]
    failing = run_cli("watch", "--", sys.executable, "-c", "import sys, time; time.sleep(2); sys.exit(3)")
    assert failing.returncode == 3, failing.stderr


@needs_pyspy
@pytest.mark.slow
@pytest.mark.parametrize("mode, kind, words", [("workers-waiting", "waiting", "cache the data set locally"),
                                               ("workers-computing", "computing", "CPU-bound")])
def test_a_data_bound_job_with_workers_says_whether_they_wait_or_compute(tmp_path, mode, kind, words):
    """Two DataLoader workers too slow for the step: asleep between samples (a slow read) or on a CPU all the time
    (a costly decode). Their state tells which, whatever the host's load; the fix differs."""
    job = subprocess.Popen([sys.executable, TRAIN, mode, str(tmp_path)], env=dict(os.environ, TRAIN_STEPS="100000"),
                           stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    try:
        assert job.stdout.readline().strip() == "TRAINING"        # watched from the loop on, not the imports
        done, doc = watched(["--pid", str(job.pid), "--duration", "6"])
    finally:
        kill_tree(job)
    (rank,) = doc["ranks"]
    assert rank["workers"] == 2, rank
    (finding,) = [f for f in doc["findings"] if f["id"] == "job.dataloader"]
    assert finding["evidence"]["workers_are"] == kind and words in finding["remedy"], finding


def on_a_terminal(argv, env):
    """(stdout, what was written to the terminal on stderr) of `argv` run with stderr on a pseudo-terminal."""
    import pty
    import threading
    master, slave = pty.openpty()
    proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=slave, env=env,
                            cwd=str(REPO), text=True)
    os.close(slave)
    seen = []

    def read():
        while True:
            try:
                chunk = os.read(master, 4096)
            except OSError:        # EIO: every writer closed the terminal
                return
            if not chunk:
                return
            seen.append(chunk)
    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    out, _ = proc.communicate(timeout=240)
    reader.join(timeout=10)
    os.close(master)
    return proc.returncode, out, b"".join(seen).decode(errors="replace")


@needs_pyspy
@pytest.mark.slow
def test_the_live_view_on_a_terminal_gives_each_ranks_gpu_and_the_verdict_so_far(tmp_path):
    code, out, terminal = on_a_terminal([sys.executable, "-m", "gpuprep", "watch", "--", sys.executable, TRAIN,
                                         "data-bound", str(tmp_path)], dict(os.environ, TRAIN_STEPS="150"))
    live = [line for line in terminal.splitlines() if line.startswith("[")]
    assert code == 0 and len(live) >= 3, terminal[-2000:]
    assert all("GPU" in line and "SM" in line and "power" in line and "mem" in line for line in live), live
    assert "so far: nothing wrong" in live[0] or "job." in live[0]
    assert any("so far: job.dataloader" in line for line in live), live
    assert "job.dataloader" in out            # and the final report on stdout


@needs_pyspy
@pytest.mark.slow
def test_a_healthy_job_on_a_busy_gpu_gets_no_verdict(tmp_path):
    """The compute-bound loop, with the stand-in reporting its PID on a GPU that is 97% busy at full clock."""
    job = subprocess.Popen([sys.executable, TRAIN, "compute-bound", str(tmp_path)],
                           env=dict(os.environ, TRAIN_STEPS="400"), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        snap, done, doc = watched_on_one_gpu(tmp_path, job, f"gpu 0 util 97,60\ngpu 0 procs {job.pid}:2000000000\n", 6)
    finally:
        job.kill()
        job.wait()
    (rank,) = doc["ranks"]
    assert rank["gpu"] == snap.gpus[0].uuid and rank["gpu_util_pct"][-1] == 97, rank
    assert warned(doc) == [] and done.returncode == 0, doc["findings"]


@needs_pyspy
@pytest.mark.slow
def test_the_slow_rank_of_a_ddp_job_is_the_straggler(tmp_path):
    """A running job watched until its verdict stands (--until warn): how many samples that takes is the rule's to
    say (10 of every rank), whatever the host's load; --duration is only a hang guard. The job itself runs on."""
    job = subprocess.Popen(torchrun("ddp", 100000, tmp_path), env=dict(os.environ, TRAIN_STEPS="100000", SLOW_RANK="1"),
                           stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True, start_new_session=True)
    try:
        # watched from the loop on, not the imports (both ranks print it to one pipe: the two can share a line)
        assert job.stdout.readline().startswith("TRAINING")
        done, doc = watched(["--pid", str(job.pid), "--until", "warn", "--duration", "170"], timeout=240)
        assert job.poll() is None, "the watch stopped the job"
    finally:
        kill_tree(job)
    assert sorted(r["rank"] for r in doc["ranks"]) == [0, 1]
    assert warned(doc) == [("job.straggler", "rank 1")], doc["findings"]
    assert done.returncode == 0 and doc["exit_code"] is None      # a warning; the job's exit is not the watch's
    assert min(r["stack_samples"] for r in doc["ranks"]) >= 10        # the rule's minimum, after the start-up


def test_until_is_refused_where_it_would_not_stop_a_watch(tmp_path):
    started = run_cli("watch", "--until", "warn", "--", sys.executable, "-c", "pass")
    assert started.returncode == 2 and "--until stops the watch, not the job" in started.stderr, started.stderr
    assert "Traceback" not in started.stderr


@needs_pyspy
@pytest.mark.slow
def test_a_hung_collective_names_the_rank_that_never_joined(tmp_path):
    job = subprocess.Popen(torchrun("hang", 1000, tmp_path), env=dict(os.environ, TRAIN_STEPS="1000", SLOW_RANK="1"),
                           stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
    try:
        marker, deadline = tmp_path / "hanging", time.monotonic() + 300
        while not marker.exists():          # the slow rank has stopped before its all-reduce: watch from there
            assert job.poll() is None and time.monotonic() < deadline, "the job ended or never reached the hang"
            time.sleep(0.2)
        done, doc = watched(["--pid", str(job.pid), "--duration", "10"])
    finally:
        kill_tree(job)
    assert done.returncode == 1 and ("job.hung-rank", "rank 1") in warned(doc), doc["findings"]


@pytest.mark.slow
def test_a_throttled_gpu_and_full_memory_are_named_from_nvml(tmp_path):
    job = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"])
    try:           # SM clock 900 MHz of a 1980 MHz maximum, with hard reasons; 79000 of 81559 MiB used
        _, done, doc = watched_on_one_gpu(tmp_path, job, f"gpu 0 util 40,20\ngpu 0 procs {job.pid}:1000\n"
                                          f"gpu 0 mem_used {79000 << 20}\n", 4, clock_sm_mhz=900,
                                          clock_event_reasons=["hw_slowdown", "hw_thermal_slowdown"])
    finally:
        job.kill()
        job.wait()
    found = {i for i, _ in warned(doc)}
    assert {"job.throttled", "job.memory-full"} <= found, doc["findings"]
    (throttled,) = [f for f in doc["findings"] if f["id"] == "job.throttled"]
    assert "hw_slowdown" in throttled["title"] and throttled["evidence"]["sm_clock_median_pct"] < 50


@pytest.mark.slow
def test_the_power_cap_throttles_a_job_only_under_a_lowered_power_limit(tmp_path):
    """An H100 at its default 700 W limit runs GEMM-heavy jobs at the power cap, at a lower clock, by design: no
    verdict. The same clock under a limit set to 450 W is named, with the limit's remedy; so is a clock held by the
    board-limit policy (nvml.h 13.x, 0x200)."""
    job = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    base = f"gpu 0 util 97,60\ngpu 0 procs {job.pid}:1000\n"
    try:           # SM clock 1200 of 1980 MHz, capped by power
        _, _, default = watched_on_one_gpu(tmp_path, job, base, 4, clock_sm_mhz=1200,
                                           clock_event_reasons=["sw_power_cap"])
        _, _, lowered = watched_on_one_gpu(tmp_path, job, base, 4, clock_sm_mhz=1200,
                                           clock_event_reasons=["sw_power_cap"], power_enforced_limit_w=450.0)
        _, _, board = watched_on_one_gpu(tmp_path, job, base, 4, clock_sm_mhz=1200, clock_event_reasons=["board_limit"])
    finally:
        job.kill()
        job.wait()
    assert "job.throttled" not in {i for i, _ in warned(default)}, default["findings"]
    (capped,) = [f for f in lowered["findings"] if f["id"] == "job.throttled"]
    assert capped["evidence"]["reasons"] == ["sw_power_cap"] and "below its default" in capped["remedy"]
    (policy,) = [f for f in board["findings"] if f["id"] == "job.throttled"]
    assert policy["evidence"]["reasons"] == ["board_limit"] and "system vendor" in policy["remedy"]


@pytest.mark.slow
@pytest.mark.skipif(not shutil.which("taskset") or len(os.sched_getaffinity(0)) < 2, reason="needs taskset and 2 CPUs")
def test_a_rank_running_away_from_its_gpus_cpus_is_named_with_the_node_joined(tmp_path):
    """`watch --node`: the node's GPU (NVML's CPU affinity, through the stand-in) is near CPU 1; the job is bound to
    CPU 0. The same job beside a GPU near both CPUs gets no verdict."""
    job = subprocess.Popen(["taskset", "-c", "0", sys.executable, "-c",
                            "import time\nend = time.time() + 90\nwhile time.time() < end:\n    sum(range(10000))\n"])

    def watch(affinity):
        snap = import_files([corpus("h100-sxm-x8.nvidia-smi-q.txt")])
        snap.gpus = snap.gpus[:1]
        config = tmp_path / "nvml.conf"
        config.write_text(f"gpu 0 affinity {affinity}\ngpu 0 numa 1\ngpu 0 procs {job.pid}:1000\n"
                          f"gpu 0 util 30,10\n" + nvml_stub.config_for(snap))
        done = nvml_stub.run(config, [sys.executable, "-m", "gpuprep", "watch", "--json", "--node", "--pid",
                                      str(job.pid), "--duration", "5"], timeout=300)
        assert done.stdout.startswith("{"), done.stderr[-2000:]
        return json.loads(done.stdout)
    try:
        away, near = watch("2"), watch("3")        # CPU 1 alone; CPUs 0 and 1
    finally:
        job.kill()
        job.wait()
    (placed,) = [f for f in away["findings"] if f["id"] == "job.numa-placement"]
    assert placed["evidence"]["near_cpus"] == "1" and placed["evidence"]["allowed_cpus"] == "0", placed
    assert "none of them near its GPU" in placed["title"] and "gpuprep launch" in placed["remedy"]
    assert "job.numa-placement" not in {f["id"] for f in near["findings"]}, near["findings"]


@pytest.mark.slow
def test_a_busy_gpu_whose_sms_never_run_tensor_cores_is_named_from_gpm(tmp_path):
    """GPM (Hopper and later): NVML's ANY_TENSOR_UTIL over two samples. A GPU busy 95% with Tensor Cores idle
    gets job.no-tensor-cores; the same GPU with them at 60% does not; a GPU without GPM says nothing of them."""
    job = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        found = {}
        for name, extra in (("idle", "gpu 0 gpm_tensor 0;1.5;0;0.5;0;0\n"), ("used", "gpu 0 gpm_tensor 60\n"),
                            ("no gpm", "")):
            _, done, doc = watched_on_one_gpu(tmp_path, job, f"gpu 0 util 95,40\ngpu 0 procs {job.pid}:1000\n" + extra, 5)
            found[name] = [f for f in doc["findings"] if f["id"] == "job.no-tensor-cores"]
            series = doc["ranks"][0]["tensor_active_pct"]
            assert (all(v is None for v in series) if name == "no gpm" else len(series) >= 3), (name, series)
    finally:
        job.kill()
        job.wait()
    (idle,) = found["idle"]
    assert idle["severity"] == "warn" and idle["evidence"]["tensor_active_median_pct"] < 10
    assert found["used"] == [] and found["no gpm"] == []


@needs_pyspy
@pytest.mark.slow
def test_a_loop_that_reads_a_metric_with_item_every_step_is_sync_bound_unless_its_gpu_is_busy(tmp_path):
    """The main thread on the .item() line in most samples: job.host-sync where its GPU idles (40%); on a GPU busy
    97% the same wait is the steady state of a GPU-bound job and gets no verdict."""
    job = subprocess.Popen([sys.executable, TRAIN, "sync-bound", str(tmp_path)],
                           env=dict(os.environ, TRAIN_STEPS="100000"), stdout=subprocess.PIPE,
                           stderr=subprocess.DEVNULL, text=True)
    try:
        assert job.stdout.readline().strip() == "TRAINING"
        _, _, idle = watched_on_one_gpu(tmp_path, job, f"gpu 0 util 40,20\ngpu 0 procs {job.pid}:2000000000\n", 6)
        _, _, busy = watched_on_one_gpu(tmp_path, job, f"gpu 0 util 97,60\ngpu 0 procs {job.pid}:2000000000\n", 6)
    finally:
        job.kill()
        job.wait()
    (rank,) = idle["ranks"]
    assert rank["main_thread"]["sync"] >= 50, rank["main_thread"]
    assert warned(idle) == [("job.host-sync", f"pid {job.pid}")], idle["findings"]
    sync = next(f for f in idle["findings"] if f["id"] == "job.host-sync")
    assert "busy only 40%" in sync["title"]
    assert warned(busy) == [], busy["findings"]


def test_a_job_ending_mid_watch_ends_the_watch_with_what_was_seen(tmp_path):
    job = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(2)"])
    done, doc = watched(["--pid", str(job.pid), "--duration", "30"])
    job.wait()
    assert done.returncode == 0 and doc["job_ended"] and doc["seconds"] < 30 and doc["samples"] >= 1


# another user's job: it drops to nobody once its interpreter has loaded (nobody may not reach this machine's Python)
OTHER_USERS_JOB = ("import os, time\nos.setgid(65534); os.setuid(65534)\nend = time.time() + 60\n"
                   "while time.time() < end:\n    sum(range(10000))\n")


@needs_pyspy
@pytest.mark.skipif(os.geteuid() != 0 or not shutil.which("setpriv"), reason="needs root and setpriv to make the case")
def test_another_users_job_without_ptrace_drops_stacks_and_environ_with_one_line_each(tmp_path):
    """A watch without CAP_SYS_PTRACE (a container without SYS_PTRACE) of a job of another user: py-spy is refused and
    the job's environment is unreadable. Each signal is dropped with one line saying what it costs; the CPU side is
    still sampled and the watch ends normally."""
    no_ptrace = ["setpriv", "--inh-caps=-all", "--bounding-set=-sys_ptrace", "--", sys.executable]
    job = subprocess.Popen([sys.executable, "-c", OTHER_USERS_JOB])
    try:
        deadline = time.monotonic() + 60
        while "Uid:\t65534" not in open(f"/proc/{job.pid}/status").read():     # the job is another user's now
            assert time.monotonic() < deadline, "the job never changed its user"
            time.sleep(0.05)
        done = subprocess.run(no_ptrace + ["-m", "gpuprep", "watch", "--json", "--pid", str(job.pid), "--duration", "4"],
                              capture_output=True, text=True, timeout=120, cwd=str(REPO))
        # whether this kernel lets such a process read the job's environment (Linux refuses; some sandboxes allow)
        environ_readable = subprocess.run(no_ptrace + ["-c", f"open('/proc/{job.pid}/environ').read()"],
                                          capture_output=True).returncode == 0
    finally:
        job.kill()
        job.wait()
    assert done.returncode == 0 and "Traceback" not in done.stderr, done.stderr[-2000:]
    doc = json.loads(done.stdout)
    ptrace = [n for n in doc["notes"] if "py-spy may not read the job" in n]
    environ = [n for n in doc["notes"] if "environment may not be read" in n]
    assert len(ptrace) == 1 and "SYS_PTRACE" in ptrace[0], doc["notes"]
    assert len(environ) == (0 if environ_readable else 1), doc["notes"]
    (rank,) = doc["ranks"]
    assert rank["pid"] == job.pid and rank["stack_samples"] == 0
    assert rank["cpu_pct"] and max(rank["cpu_pct"]) > 20, rank      # the busy loop is still seen from /proc
    dropped = [f["title"] for f in doc["findings"] if f["id"] == "job.not-judged"]
    assert sum("py-spy may not read the job" in t for t in dropped) == 1, dropped


@pytest.mark.parametrize("args, words", [(["--pid", "999999999"], "not a process id"),
                                         (["--pid", "1", "--", "true"], "not both"),
                                         ([], "not both and not neither"),
                                         (["--duration", "soon", "--", "true"], "not a duration")])
def test_bad_watch_input_is_one_line_and_exit_2(args, words):
    done = run_cli("watch", *args)
    assert done.returncode == 2 and words in done.stderr and done.stderr.count("\n") == 1, done.stderr
