"""Issue 47's classes, each a verdict that must be right both ways: an unknown is neither pass nor fail, a fail
needs positive evidence, and a positive sign of a fault is never lost to the capture around it."""
import json
from pathlib import Path

from conftest import CORPUS, run_cli
from gpuprep.rules import evaluate
from gpuprep.rules.compat import judge_combination
from gpuprep.snapshot import RdmaDevice, Snapshot


def _by_id(findings, finding_id):
    return [(f.severity, f.subject) for f in findings if f.id == finding_id]


# -- an unread table cell is unknown, never a fail --------------------------------------------------------------

def test_the_readmes_compat_example_does_not_fail_on_an_unread_cudnn_cell():
    """cuDNN 9.1.0 is what the torch 2.4-2.6 wheels ship; its CUDA 12.x column was unread (`?`) and failed."""
    done = run_cli("compat", "--driver", "535.104.05", "--cuda", "12.4", "--cudnn", "9.1.0", "--json")
    doc = json.loads(done.stdout)
    cudnn = [f for f in doc["findings"] if f["id"] == "compat.cudnn-cuda"]
    assert cudnn and cudnn[0]["severity"] in ("pass", "info"), cudnn
    assert done.returncode == 0, done.stdout


def test_a_cudnn_built_for_another_cuda_major_still_fails():
    (found,) = [f for f in judge_combination("580.65.06", cuda="13.0", cudnn="9.10.2") if f.id == "compat.cudnn-cuda"]
    assert found.severity == "fail"


# -- InfiniBand: NCCL uses only ACTIVE ports ------------------------------------------------------------------

def _dual_port(second_state, hca=None):
    ports = [RdmaDevice(name="mlx5_0", port=1, link_layer="InfiniBand", state="4: ACTIVE", phys_state="5: LinkUp",
                        rate_gbps=400.0),
             RdmaDevice(name="mlx5_0", port=2, link_layer="InfiniBand", state=second_state[0],
                        phys_state=second_state[1])]
    return Snapshot(rdma_devices=ports, env={"NCCL_IB_HCA": hca} if hca else None)


def test_the_uncabled_second_port_of_a_dual_port_hca_warns():
    findings = evaluate(_dual_port(("1: DOWN", "2: Polling")))
    assert _by_id(findings, "net.ib-port-down") == [("warn", "mlx5_0 port 2")]


def test_a_second_port_nccl_is_told_to_use_fails():
    findings = evaluate(_dual_port(("1: DOWN", "2: Polling"), hca="=mlx5_0:1,mlx5_0:2"))
    assert _by_id(findings, "net.ib-port-down") == [("fail", "mlx5_0 port 2")]


def test_an_hca_with_no_active_port_fails():
    snap = _dual_port(("1: DOWN", "2: Polling"))
    snap.rdma_devices[0].state, snap.rdma_devices[0].phys_state = "1: DOWN", "3: Disabled"
    assert {s for s, _ in _by_id(evaluate(snap), "net.ib-port-down")} == {"fail"}


# -- application clocks: the factory default is no warning ----------------------------------------------------

def test_application_clocks_at_the_factory_default_do_not_warn():
    from gpuprep.parsers import import_files
    snap = import_files([str(CORPUS / "v100-sxm2-x8-vm.nvidia-smi-q.txt")])   # 1312 of 1530 MHz, default 1312
    assert {s for s, _ in _by_id(evaluate(snap), "gpu.app-clocks-below-max")} == {"info"}
    snap.gpus[3].app_clock_graphics_mhz = 1000
    assert ("warn", snap.gpus[3] and "GPU3 (00000000:00:07.0)") in _by_id(evaluate(snap), "gpu.app-clocks-below-max")


# -- "OK" where nothing was judged ------------------------------------------------------------------------------

NO_DRIVER = "NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver. Make sure that the latest " \
            "NVIDIA driver is installed and running.\n"


def test_a_host_whose_gpus_were_not_judged_never_reads_ok(tmp_path):
    topo = str(CORPUS / "h100-x8-stas.topo-m.txt")          # the topology judged, no GPU facts
    text = run_cli("check", "--from", topo)
    doc = json.loads(run_cli("check", "--from", topo, "--json").stdout)
    assert doc["verdict"] == "info" and doc["not_judged"] == ["the GPUs (no GPU facts in the input)"]
    assert "NOT JUDGED: the GPUs" in text.stdout and "\nOK:" not in text.stdout and text.returncode == 0
    judged = run_cli("check", "--from", str(CORPUS / "h100-sxm-x8.nvidia-smi-q.txt"))
    assert "\nOK: 0 fail" in judged.stdout                                 # what was judged and held still reads OK


def test_npd_and_nagios_say_not_judged_and_require_gpu_makes_it_a_problem(tmp_path):
    lscpu = str(CORPUS / "asus-esc8000a-e12-4x-rtx6000ada.lscpu.txt")
    plain = run_cli("npd", "--from", lscpu)
    assert plain.returncode == 0 and "healthy" not in plain.stdout and "not judged" in plain.stdout
    required = run_cli("npd", "--require-gpu", "--from", lscpu, "--only", "gpu")
    assert required.returncode == 1 and required.stdout.startswith("gpuprep: not judged: the GPUs")
    nagios = run_cli("nagios", "--require-gpu", "--from", lscpu)
    assert nagios.returncode == 2 and "not judged" in nagios.stdout
    failed = tmp_path / "smi.txt"
    failed.write_text(NO_DRIVER)
    down = run_cli("npd", "--require-gpu", "--from", str(failed))
    assert down.returncode == 1 and down.stdout.startswith("driver.nvml-unavailable"), down.stdout


def test_the_shipped_daemonset_requires_gpus():
    import yaml
    text = (CORPUS.parent.parent / "deploy" / "kubernetes" / "gpuprep-npd.yaml").read_text()
    configs = [d for d in yaml.safe_load_all(text) if d and d.get("kind") == "ConfigMap"]
    rules = [r for c in configs for v in c["data"].values() if v.strip().startswith("{")
             for r in json.loads(v).get("rules", [])]
    assert rules and all("--require-gpu" in r["args"] for r in rules if "npd" in r["args"])


# -- unknown used as a fact -------------------------------------------------------------------------------------

def test_nccl_env_leaves_what_the_captures_do_not_say_unset():
    topo = str(CORPUS / "h100-x8-stas.topo-m.txt")        # GPU CPU affinity, no NIC facts
    env = run_cli("nccl-env", "--from", topo).stdout
    plan = json.loads(run_cli("plan", "--from", topo, "--json").stdout)
    assert "NCCL_IB_DISABLE" not in env
    threads = {r["physical_cores"] for r in plan["ranks"]}
    assert f'OMP_NUM_THREADS="{min(threads)}"' in env          # the plan's number, never 1 for "unknown"
    ib = run_cli("nccl-env", "--from", topo, "--from", str(CORPUS / "rdma" / "gpud-h100-ndr-all-active.ibstat.txt"))
    assert 'NCCL_IB_DISABLE="0"' in ib.stdout


def test_a_gpu_count_not_known_is_never_zero_and_a_matrix_counts(tmp_path):
    from gpuprep.parsers import import_files
    from gpuprep.snapshot import gpu_count
    assert gpu_count(import_files([str(CORPUS / "h100-x8-stas.topo-m.txt")])) == 8
    failed = tmp_path / "smi.txt"
    failed.write_text(NO_DRIVER)
    assert gpu_count(import_files([str(failed)])) is None
    profile = tmp_path / "p.toml"
    profile.write_text("min_gpus = 8\n")
    doc = json.loads(run_cli("check", "--from", str(CORPUS / "h100-x8-stas.topo-m.txt"), "--profile", str(profile),
                             "--json").stdout)
    assert [(f["severity"], f["title"]) for f in doc["findings"] if f["id"] == "gpu.count"] == [("pass", "8 GPU(s)")]


def test_drift_never_reports_an_unknown_count_as_a_difference(tmp_path):
    from gpuprep.parsers import import_files
    from gpuprep.rules.drift import fleet_drift
    four = import_files([str(CORPUS / "a100-sxm4-x4.nvidia-smi-q.txt")])
    failed = tmp_path / "smi.txt"
    failed.write_text(NO_DRIVER)
    down = import_files([str(failed)])
    assert not [d for d in fleet_drift({"a": four, "b": down}) if d.fact.id == "drift.gpu-count"]


def test_an_empty_baseline_is_refused_not_read_as_nothing_changed(tmp_path):
    empty = tmp_path / "empty.json"
    empty.write_text('{"schema": "gpuprep.snapshot/1"}')
    done = run_cli("check", "--from", str(CORPUS / "h100-sxm-x8.nvidia-smi-q.txt"), "--baseline", str(empty))
    assert done.returncode == 2 and "holds none of the facts" in done.stderr and "Traceback" not in done.stderr


# -- two hosts are not one --------------------------------------------------------------------------------------

def test_two_hosts_captures_are_refused_unless_allowed():
    a100, h100_topo = str(CORPUS / "a100-sxm4-x4.nvidia-smi-q.txt"), str(CORPUS / "h100-x8-stas.topo-m.txt")
    done = run_cli("check", "--from", a100, "--from", h100_topo)
    assert done.returncode == 2 and "different GPU counts (4, 8)" in done.stderr and "--allow-mixed" in done.stderr
    assert run_cli("check", "--from", a100, "--from", h100_topo, "--allow-mixed", "--json").returncode in (0, 1)
    h100_q, h100_table = str(CORPUS / "h100-sxm-x8.nvidia-smi-q.txt"), str(CORPUS / "h100-sxm-x8.nvidia-smi.txt")
    assert run_cli("check", "--from", h100_q, "--from", h100_table, "--json").returncode in (0, 1)   # one host


# -- compat: certain failures, the table's end -----------------------------------------------------------------

def test_a_wheel_without_kernels_or_ptx_for_the_gpu_fails():
    found = judge_combination("575.51.03", torch="2.6.0+cu126", gpu_name="NVIDIA GeForce RTX 5090")
    assert [f.severity for f in found if f.id == "compat.torch-arch"] == ["fail"]


def test_drivers_past_an_architectures_last_branch_fail_and_the_table_end_is_said():
    volta = judge_combination("590.44.01", cuda="12.4", gpu_name="Tesla V100-SXM2-16GB")
    assert [(f.severity, f.evidence.get("last_driver_branch")) for f in volta if f.id == "compat.driver-gpu"] == \
        [("fail", 580)]
    assert "fail" not in [f.severity for f in judge_combination("580.65.06", cuda="12.4", gpu_name="Tesla V100-SXM2-16GB")
                          if f.id == "compat.driver-gpu"]
    beyond = judge_combination("640.10.01", cuda="12.4")
    assert [f.severity for f in beyond if f.id == "compat.table-range"] == ["info"]
    assert not [f for f in judge_combination("575.51.03", cuda="12.4") if f.id == "compat.table-range"]


# -- actions come from the check's own table ------------------------------------------------------------------

def test_a_node_named_reboot_cannot_forge_an_action():
    port = RdmaDevice(name="mlx5_reboot_RMA", port=1, link_layer="InfiniBand", state="1: DOWN", phys_state="2: Polling")
    (down,) = [f for f in evaluate(Snapshot(rdma_devices=[port])) if f.id == "net.ib-port-down"]
    assert "reboot" in down.remedy and down.action == "fix-config"


def test_every_check_has_an_action_from_the_closed_set_and_replace_hardware_is_reached():
    from gpuprep.checks import all_ids
    from gpuprep.rules import ACTIONS, action_for, action_of
    assert all(action_for(i) in ACTIONS for i in all_ids())
    assert action_of("if it recurs, reseat or RMA") == "replace-hardware"       # written in capitals
    from gpuprep.parsers import import_files
    lost = import_files([str(CORPUS.parent / "data" / "broken" / "owod-81-gpu-is-lost.nvidia-smi-error.txt")])
    assert [f.action for f in evaluate(lost) if f.id == "gpu.unreachable"] == ["reboot"]


# -- a hang is no progress, never a wall-clock bound --------------------------------------------------------------

BEATING = """import json, os, sys, time
out, beat_for, then = sys.argv[1], float(sys.argv[2]), sys.argv[3]
open(os.path.join(out, "joined"), "w").close()
start, beats = time.monotonic(), 0
while time.monotonic() - start < beat_for:
    beats += 1
    with open(os.path.join(out, "p.tmp"), "w") as fh:
        json.dump({"phase": "training", "done": 0.5, "beats": beats}, fh)
    os.replace(os.path.join(out, "p.tmp"), os.path.join(out, "progress.json"))
    time.sleep(0.1)
if then == "stall":
    time.sleep(3600)
"""


def _watched(tmp_path, beat_for, then, monkeypatch):
    """torchrun's watcher over a process that beats like rank 0 (a real process, its real progress file), with the
    bounds shrunk: due 1 s after the join, a stall window of 2 s, the outer bound at 3 x (1 s + 1 s)."""
    import subprocess
    import sys
    from gpuprep.burnin import torchrun
    monkeypatch.setattr(torchrun, "GRACE_SECONDS", 1)
    monkeypatch.setattr(torchrun, "stall_window", lambda duration: 2.0)
    script = tmp_path / "ranks.py"
    script.write_text(BEATING)
    proc = subprocess.Popen([sys.executable, str(script), str(tmp_path), str(beat_for), then], start_new_session=True)
    return torchrun._watch(proc, str(tmp_path), duration=0.0, rdzv_timeout=60, on_progress=None)


def test_a_run_still_progressing_past_its_time_is_not_a_hang(tmp_path, monkeypatch):
    assert _watched(tmp_path, 2.0, "exit", monkeypatch) == (False, False, False)      # late, and finished


def test_a_run_that_stops_progressing_is_a_hang(tmp_path, monkeypatch):
    assert _watched(tmp_path, 1.0, "stall", monkeypatch) == (True, False, False)


def test_a_run_progressing_at_its_outer_bound_is_stopped_as_slow_never_hung(tmp_path, monkeypatch):
    assert _watched(tmp_path, 3600, "exit", monkeypatch) == (False, False, True)


def test_a_slow_run_judges_no_rank_and_is_never_a_pass():
    from gpuprep.burnin import RunResult
    from gpuprep.burnin.judge import judge
    slow = judge(RunResult(ranks={}, world_size=2, exit_code=None, timed_out=False, wall_seconds=120,
                           stopped_slow=True, duration=10))
    assert [(f.id, f.severity) for f in slow] == [("burnin.slow-run", "warn")]
    hung = judge(RunResult(ranks={}, world_size=2, exit_code=None, timed_out=True, wall_seconds=40, duration=10))
    assert ("burnin.hang", "fail") in [(f.id, f.severity) for f in hung]


# -- baselines and reports that node data can forge ------------------------------------------------------------

def _burnin_report(tmp_path, **changes):
    import datetime as dt
    import socket
    rank = {"rank": 0, "world_size": 2, "host": socket.gethostname(), "device": "cpu", "backend": "gloo",
            "step_ms": [5.0], "allreduce": [{"bytes": 1 << 20, "busbw_gbs": 1.5}]}
    rank.update(changes.pop("rank", {}))
    report = {"schema": "gpuprep.burnin/1", "verdict": "pass",
              "generated_at": dt.datetime.now(dt.timezone.utc).isoformat(), "ranks": [rank, dict(rank, rank=1)]}
    report.update(changes)
    path = tmp_path / "base.json"
    path.write_text(json.dumps(report))
    return str(path)


def test_a_burnin_baseline_is_checked_before_anything_runs(tmp_path):
    import datetime as dt
    from gpuprep import api
    from gpuprep.errors import BadInput
    assert api.burnin_baseline(_burnin_report(tmp_path)).sweep[0].busbw_gbs == 1.5
    ahead = (dt.datetime.now(dt.timezone.utc) + dt.timedelta(days=30)).isoformat()
    for changes, words in (({"rank": {"host": "other-node"}}, "another node's run"),
                           ({"rank": {"allreduce": [{"bytes": 1 << 20, "busbw_gbs": -1}]}}, "is no measurement"),
                           ({"rank": {"allreduce": [{"bytes": 1 << 20, "busbw_gbs": 1e308}]}}, "is no measurement"),
                           ({"schema": "gpuprep.burnin/9"}, "is not gpuprep.burnin/1"),
                           ({"generated_at": ahead}, "ahead of this host's clock")):
        try:
            api.burnin_baseline(_burnin_report(tmp_path, **changes))
        except BadInput as exc:
            assert words in str(exc) and "base.json" in str(exc), (changes, exc)
        else:
            raise AssertionError(f"accepted {changes}")
    done = run_cli("burnin", "--baseline", _burnin_report(tmp_path, rank={"host": "other-node"}), "--duration", "5s")
    assert done.returncode == 2 and "another node's run" in done.stderr


def test_the_return_gate_judges_the_slurm_node_and_says_every_reason(tmp_path):
    import datetime as dt
    import time
    from gpuprep.slurm import Gate, burnin_gate
    ahead = (dt.datetime.now(dt.timezone.utc) + dt.timedelta(days=30)).isoformat()
    report = _burnin_report(tmp_path, verdict="fail\n\x1b[2J", generated_at=ahead, rank={"host": "gpu-node-7"})
    why = burnin_gate(Gate(report, None, "gpu-node-9"), time.time())
    assert "did not pass" in why and "not on this node (gpu-node-9)" in why and "30.0 day(s) ahead" in why
    assert "\n" not in why and "\x1b" not in why
    assert burnin_gate(Gate(_burnin_report(tmp_path, rank={"host": "gpu-node-9"}), None, "gpu-node-9"), time.time()) \
        is None


def test_a_forged_report_reaches_the_hooks_line_escaped(tmp_path):
    from test_adapters import _scontrol
    scontrol, log = _scontrol(tmp_path, "scontrol-show-node-gpuprep-drain.txt")
    report = _burnin_report(tmp_path, verdict="fail\nnode1: resume (healthy)\x1b[2J")
    done = run_cli("slurm", "healthcheck", "--from", str(CORPUS / "h100-sxm-x8.nvidia-smi-q.txt"), "--scontrol",
                   scontrol, "--node", "node1", "--require-burnin", report, "--baseline-dir", str(tmp_path / "s"))
    assert "\x1b" not in done.stderr and "\nnode1: resume" not in done.stderr, done.stderr
    assert "fail\\nnode1" in done.stderr and not log.exists()      # shown escaped, and the node was not resumed


# -- secrets in every encoding Ansible prints -------------------------------------------------------------------

def test_every_form_of_an_e_value_on_ansibles_command_line_is_redacted(tmp_path):
    """ansible-runner puts the -e values on Ansible's command line as JSON; -vvvv and the artifacts show that
    argument list as a Python list, a shell command and JSON."""
    import shlex
    from ansible_runner.config.runner import RunnerConfig
    from gpuprep.ansible.artifacts import redact, secret_strings
    from gpuprep.ansible.runner import parse_extravars
    extravars = parse_extravars(['db_password="Pa\\"ss"', "token='it''s \\\\ x'", "pin=123456"])
    (tmp_path / "project").mkdir()
    (tmp_path / "project" / "site.yml").write_text("- hosts: all\n  tasks: []\n")
    config = RunnerConfig(private_data_dir=str(tmp_path), playbook="site.yml", extravars=extravars)
    config.prepare()
    secrets = secret_strings(extravars)
    for shown in (repr(config.command), shlex.join(config.command), json.dumps(config.command), str(extravars)):
        clean = redact(shown, secrets)
        assert not any(str(v) in clean for v in extravars.values()) and "Pa" not in clean and "123456" not in clean, clean


# -- positive evidence survives a cut -----------------------------------------------------------------------------

def test_a_dcgmi_report_cut_short_keeps_the_failure_it_shows(tmp_path):
    text = (CORPUS / "fabric" / "glimmer-burnin-gb10-level2-plugins-allowed-dcgm452.dcgmi-diag.json").read_text()
    cut = tmp_path / "diag.json"
    cut.write_text(text[:text.index('"test_summary"')])          # after the first failing result, mid-test
    doc = json.loads(run_cli("check", "--from", str(cut), "--json").stdout)
    assert ("dcgm.diag", "fail") in {(f["id"], f["severity"]) for f in doc["findings"]}
    healthy = (CORPUS / "fabric" / "virtualclient-t4-diag-r3-pass.dcgmi-diag.json").read_text()
    cut.write_text(healthy[:len(healthy) // 2])
    doc = json.loads(run_cli("check", "--from", str(cut), "--json").stdout)
    assert doc["verdict"] != "pass" and ("dcgm.diag", "warn") in {(f["id"], f["severity"]) for f in doc["findings"]}


def test_a_fabric_manager_log_past_the_size_limit_is_read_from_its_end(tmp_path, monkeypatch):
    import gpuprep.parsers as parsers
    monkeypatch.setattr(parsers, "MAX_CAPTURE_BYTES", 1 << 20)
    monkeypatch.setattr(parsers, "FABRIC_LOG_TAIL", 64 << 10)
    real = (CORPUS / "fabric" / "gpud-testdata-8gpu-nvswitch-fm-runtime-nonfatal-error.fabricmanager-log.txt").read_text()
    first = real.splitlines(keepends=True)[0]
    big = tmp_path / "fabricmanager.log"
    with open(big, "w") as fh:                  # the real log's first line, 2 MiB of its own lines, then a fatal end
        fh.write(first)
        fh.write(first * ((2 << 20) // len(first)))
        fh.write("[Nov 28 2026 10:00:00] [FATAL] [tid 1234] detected NVSwitch fatal error 24 on NVSwitch pci bus id "
                 "00000000:07:00.0 physical id 0 port 1\n")
    snap = parsers.import_files([str(big)])
    assert snap.fabric_manager.errors and "FATAL" in snap.fabric_manager.errors[-1]


# -- a GPU slow against its peers drains its node only when asked ------------------------------------------------

H100 = "h100-sxm-x8.nvidia-smi-q.txt"


def _slow_gpu_report(tmp_path, host):
    """A burn-in report as `burnin --json` writes it (the judge and the document writer), of the eight H100s of a
    real capture (their UUIDs and bus ids) on `host`, the fifth 15% slower than its peers: it passes every
    absolute threshold."""
    from gpuprep.api import BurninResult
    from gpuprep.burnin import RunResult
    from gpuprep.burnin.judge import judge
    from gpuprep.parsers import import_files
    gpus = import_files([str(CORPUS / H100)]).gpus
    ranks = {}
    for i, ms in enumerate([100.0, 101.0, 99.5, 100.4, 115.0, 100.8, 99.7, 100.2]):
        ranks[i] = {"rank": i, "world_size": 8, "host": host, "device": f"cuda:{i}", "gpu_name": "NVIDIA H100 80GB HBM3",
                    "gpu_uuid": gpus[i].uuid, "pci_bus_id": gpus[i].pci_bus_id, "steps": 40,
                    "compute_ms": [ms] * 40, "step_ms": [ms * 1.3] * 40,
                    "allreduce": [{"bytes": 1 << 30, "busbw_gbs": 400.0}], "memory": {"ok": True}}
    run = RunResult(ranks=ranks, world_size=8, exit_code=0, timed_out=False, wall_seconds=70)
    document = BurninResult(run, judge(run), "nccl", 60).document()
    path = tmp_path / "burnin.json"
    path.write_text(json.dumps(document))
    return str(path), document


def test_a_gpu_slow_against_its_peers_drains_its_node_only_with_the_option(tmp_path):
    from test_adapters import _scontrol
    report, document = _slow_gpu_report(tmp_path, "node1")
    assert document["verdict"] == "warn"            # by default: a warning in the report
    bus = document["ranks"][4]["pci_bus_id"]
    common = ["--from", str(CORPUS / H100), "--node", "node1", "--baseline-dir", str(tmp_path / "s")]
    scontrol, log = _scontrol(tmp_path, "scontrol-show-node-idle.txt")
    plain = run_cli("slurm", "healthcheck", *common, "--scontrol", scontrol)
    assert plain.returncode == 0 and not log.exists(), plain.stderr
    asked = run_cli("slurm", "healthcheck", *common, "--scontrol", scontrol, "--drain-slow-gpu", report)
    assert asked.returncode == 1, asked.stderr
    (update,) = log.read_text().splitlines()
    assert update.startswith(f"update NodeName=node1 State=DRAIN Reason=burnin.slow-gpu GPU {bus}"), update


def test_a_slow_gpu_report_of_another_node_or_forged_drains_nothing(tmp_path):
    from test_adapters import _scontrol
    common = ["--from", str(CORPUS / H100), "--node", "node1", "--baseline-dir", str(tmp_path / "s")]
    report, document = _slow_gpu_report(tmp_path, "node2")
    scontrol, log = _scontrol(tmp_path, "scontrol-show-node-idle.txt")
    other = run_cli("slurm", "healthcheck", *common, "--scontrol", scontrol, "--drain-slow-gpu", report)
    assert other.returncode == 0 and not log.exists() and "not on this node" in other.stderr, other.stderr
    report, document = _slow_gpu_report(tmp_path, "node1")
    (slow,) = [f for f in document["findings"] if f["id"] == "burnin.slow-gpu"]
    slow["evidence"]["pci_bus_id"] = "0000:1c:00.0 (gpuprep)\nnode1: resume"
    Path(report).write_text(json.dumps(document))
    forged = run_cli("slurm", "healthcheck", *common, "--scontrol", scontrol, "--drain-slow-gpu", report)
    assert forged.returncode == 0 and not log.exists(), forged.stderr
    missing = run_cli("slurm", "healthcheck", *common, "--scontrol", scontrol, "--drain-slow-gpu",
                      str(tmp_path / "none.json"))
    assert missing.returncode == 0 and "slow GPUs not judged: no readable burn-in report" in missing.stderr
