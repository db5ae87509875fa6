"""The command line as users run it: real processes, exit codes, one JSON document, one-line errors."""
import json

import pytest

from conftest import capture_files, corpus, needs_no_gpu, run_cli

# What a GPU engineer reading each capture would raise (fail/warn ids), written down per capture after
# reading it; everything else in a report is a pass or info. A capture missing here fails the test.
EXPECTED = {
    "a10.nvidia-smi-q.txt": set(),
    "a10.nvidia-smi.txt": set(),
    "a100-sxm4-40gb-x8-mig.nvidia-smi.txt": {"gpu.persistence-off"},             # Persistence-M Off on all 8
    "a100-sxm4-80gb-mig.nvidia-smi-q.xml": {"gpu.persistence-off",      # app clocks 1275 of 1410: the default (info)
                                            "gpu.capture-incomplete"},   # attached_gpus 4, one <gpu> kept
    "a100-sxm4-80gb-x8.nvlink-status.txt": set(),                                 # 12 links up on every GPU
    "a100-sxm4-x4.nvidia-smi-q.txt": {"gpu.row-remap"},       # GPU1: remap pending; app clocks at the default
    "a100-sxm4-x4.nvidia-smi.txt": set(),                                         # the table cannot show remaps
    "a10g-aws.nvidia-smi-q.xml": {"gpu.persistence-off"},
    "a40-x10.nvidia-smi-q.txt": set(),
    "a40-x10.nvidia-smi.txt": set(),
    "asus-esc8000a-e12-4x-rtx6000ada.lscpu.txt": set(),
    "asus-esc8000a-e12-4x-rtx6000ada.numactl-H.txt": set(),
    "asus-esc8000a-e12-4x-rtx6000ada.nvidia-smi.txt": {"gpu.persistence-off"},
    "asus-esc8000a-e12-4x-rtx6000ada.topo-m.txt": {"topo.p2p-path"},               # GPU pairs across sockets (SYS)
    "azure-8gpu.nvidia-smi-q-d-PAGE_RETIREMENT.txt": set(),                       # no pages retired or pending
    "azure-a100-sxm4-80gb.nvlink-status.txt": set(),
    "ctk-1.17.5-vm.nvidia-container-toolkit-version.txt": {"container.toolkit-old"},   # before the CVE-2025-23266 fix
    "dual-gpu-nvlink-nv2.topo-m.txt": set(),
    "dual-gpu-pcie-phb.topo-m.txt": set(),                                        # PHB: not SYS; NVLink only with a profile
    "dual-rtx-a5000.nvidia-smi-q.xml": set(),                                     # ECC off on a workstation board: info
    "gh200.nvidia-smi-q.txt": set(),                                              # PCIe x1 is the C2C design, not a fault
    "gh200.nvidia-smi.txt": set(),
    "h100-nvl-x2.nvidia-smi-q.txt": set(),
    "h100-nvl-x2.nvidia-smi.txt": set(),
    "h100-sxm-x8-ib-penny.topo-m.txt": set(),                                     # an IB NIC on every GPU's switch
    "h100-sxm-x8.nvidia-smi-q.txt": set(),
    "h100-sxm-x8.nvidia-smi.txt": set(),
    "h100-x8-stas.topo-m.txt": set(),
    "h200.nvidia-smi-q.txt": set(),
    "h200.nvidia-smi.txt": set(),
    "inspur-nf5280m3-2socket.numactl-H.txt": set(),
    "inspur-nf5280m6-2x-a100-pcie.nvidia-smi.txt": set(),
    "inspur-nf5280m6-2x-a100-pcie.topo-m.txt": set(),                             # NODE between the two GPUs
    "l4.nvidia-smi-q.txt": set(),                                   # x8 of x16 while idle: noted (info), not judged
    "l4.nvidia-smi.txt": set(),
    "l40s.nvidia-smi-q.txt": set(),
    "l40s.nvidia-smi.txt": set(),
    "princeton-traverse-ac922-4x-v100.lscpu.txt": set(),
    "puget-wrx90-2x-rtx6000ada.nvidia-smi.txt": {"gpu.persistence-off"},
    "puget-wrx90-2x-rtx6000ada.topo-m.txt": set(),
    "quadro-p2000.nvidia-smi-q.xml": set(),                                       # app clocks at the factory default
    "rtx-pro6000-maxq-blackwell.nvidia-smi-q.xml": set(),                         # app clocks deprecated on v13: skipped
    "rtx3090-x2.nvidia-smi-q.txt": set(),
    "rtx3090-x2.nvidia-smi.txt": set(),
    "rtx3090.nvidia-smi-q.xml": set(),
    "rtx4000-sff-ada.nvidia-smi-q.xml": set(),
    "rtx4090-x8.nvidia-smi-q.txt": set(),                                         # ECC disabled on GeForce: info
    "rtx4090-x8.nvidia-smi.txt": set(),
    "t4-aws.nvidia-smi-q.xml": {"gpu.persistence-off", "gpu.pcie-width"},        # x8 of x16 at P0, not idle
    "tesla-p4.nvidia-smi-q.xml": set(),                                           # vGPU guest: most fields N/A
    "th2k-4x-v100-sxm2.nvidia-smi.txt": {"gpu.persistence-off"},
    "th2k-4x-v100-sxm2.topo-m.txt": set(),
    "v100-sxm2-x8-vm.nvidia-smi-q.txt": set(),                      # app clocks 1312 of 1530 MHz: the factory default
    "v100-sxm2-x8-vm.nvidia-smi.txt": set(),
    # real tables the previous release refused as cut short (issue 47): read whole, unknown cells unknown
    "gb10-dgx-spark-load.nvidia-smi.txt": set(),                    # Memory-Usage Not Supported, power cap N/A
    "gb10-asus-gx10-vllm-load.nvidia-smi.txt": set(),
    "dgx-a100-mig-disabled-pending.nvidia-smi.txt": set(),          # GPU7 Disabled*: MIG on until the reset (info)
    "a800-8gpu-mig-enabled-pending.nvidia-smi.txt": set(),          # GPU7 Enabled*: pending, still off
    "a30-mig-enabled-pending.nvidia-smi.txt": {"gpu.persistence-off"},
    "geforce-rtx3090-fan-err.nvidia-smi.txt": {"gpu.sensor-unreadable", "gpu.ecc-disabled"},   # fan ERR!
    "a100-pcie-driver595-fan-err.nvidia-smi.txt": {"gpu.sensor-unreadable"},    # GPUs 2, 3: fan and MIG ERR!
    "rtx-pro-6000-driver610-kmd-header-unknown-error.nvidia-smi.txt": {"gpu.unreachable", "gpu.ecc-disabled"},
    "geforce-gtx980-fan-and-power-err.commented.nvidia-smi.txt": {"gpu.persistence-off", "gpu.sensor-unreadable"},
    "geforce-wsl-docker-fan-err.indented.nvidia-smi.txt": {"gpu.persistence-off", "gpu.sensor-unreadable"},
    "xid119-dell-xe9680.dmesg.txt": {"gpu.xid"},                                  # GSP RPC timeout: reset the GPU
    "xid13-xid43.dmesg-iso.txt": {"gpu.xid"},                                     # 13: restart the app (warn)
    "xid149-xid154-gb200.kmsg-lines.txt": {"gpu.xid"},                            # 149 NVLink NETIR fatal
    "xid63-a100-sxm4-80gb.syslog-line.txt": {"gpu.xid"},            # "reset gpu to activate": a remap may wait
    "xid64-xid94-imbue-h100.dmesg-lines.txt": {"gpu.xid"},                        # 64 remap failure: reset
}


@pytest.mark.parametrize("name", capture_files())
def test_check_from_every_capture(name):
    done = run_cli("check", "--from", corpus(name), "--json")
    assert "Traceback" not in done.stderr
    doc = json.loads(done.stdout)
    assert doc["schema"] == "gpuprep.check/1" and doc["snapshot"]["schema"] == "gpuprep.snapshot/1"
    failing = [f for f in doc["findings"] if f["severity"] == "fail"]
    assert done.returncode == (1 if failing else 0)
    for finding in doc["findings"]:
        assert {"id", "severity", "subject", "title", "evidence", "remedy"} <= set(finding)
    raised = {f["id"] for f in doc["findings"] if f["severity"] in ("fail", "warn")}
    assert raised == EXPECTED[name]


def test_terminal_report_on_a_combined_host():
    done = run_cli("check", "--from", corpus("h100-sxm-x8.nvidia-smi-q.txt"), "--from", corpus("h100-x8-stas.topo-m.txt"),
                   "--from", corpus("xid119-dell-xe9680.dmesg.txt"))
    assert done.returncode == 1
    assert "GPUs (8)" in done.stdout and "NV18" in done.stdout and "Xid 119" in done.stdout
    assert "\033[" not in done.stdout          # no colour when not a TTY


@needs_no_gpu
def test_check_on_this_gpu_less_host():
    done = run_cli("check", "--no-docker")
    assert done.returncode == 0, done.stderr
    assert "No NVIDIA driver" in done.stdout or "no NVIDIA driver" in done.stdout
    doc = json.loads(run_cli("check", "--json", "--no-docker").stdout)
    assert doc["snapshot"]["nvml"]["available"] is False
    assert doc["snapshot"]["system"]["cores"] >= 1
    required = run_cli("check", "--require-gpu", "--no-docker")
    assert required.returncode == 1


def test_snapshot_then_check_from_it(tmp_path):
    out = tmp_path / "host.json"
    assert run_cli("snapshot", "--from", corpus("a100-sxm4-x4.nvidia-smi-q.txt"), "-o", str(out)).returncode == 0
    done = run_cli("check", "--from", str(out), "--json")
    assert done.returncode == 1
    assert any(f["id"] == "gpu.row-remap" for f in json.loads(done.stdout)["findings"])


@pytest.mark.parametrize("args,message", [
    (["check", "--from", "/no/such/file"], "/no/such/file: cannot read"),
    (["check", "--profile", "nonexistent"], "unknown profile"),
    (["check", "--bogus"], "No such option"),
    (["compat", "--driver", "535.1"], "nothing to judge"),
])
def test_bad_input_is_one_line_and_exit_2(args, message):
    done = run_cli(*args)
    assert done.returncode == 2
    assert message in done.stderr and done.stderr.strip().count("\n") == 0 and "Traceback" not in done.stderr


def test_unrecognised_capture_names_the_file(tmp_path):
    bad = tmp_path / "mystery.txt"
    bad.write_text("nothing to see\n")
    done = run_cli("check", "--from", str(bad))
    assert done.returncode == 2 and "mystery.txt" in done.stderr


def test_profile_and_skip():
    args = ["check", "--json", "--from", corpus("dual-gpu-pcie-phb.topo-m.txt"), "--from", corpus("rtx3090-x2.nvidia-smi-q.txt")]
    plain = json.loads(run_cli(*args).stdout)
    training = run_cli(*args, "--profile", "training")
    assert training.returncode == 1
    assert any(f["id"] == "topo.p2p-path" and f["severity"] == "fail" for f in json.loads(training.stdout)["findings"])
    assert not any(f["severity"] == "fail" for f in plain["findings"])
    skipped = run_cli(*args, "--profile", "training", "--skip", "topo.p2p-path")
    assert not any(f["id"] == "topo.p2p-path" for f in json.loads(skipped.stdout)["findings"])


def test_nccl_env_for_a_snapshot():
    done = run_cli("nccl-env", "--from", corpus("asus-esc8000a-e12-4x-rtx6000ada.lscpu.txt"),
                   "--from", corpus("asus-esc8000a-e12-4x-rtx6000ada.nvidia-smi.txt"), "--default-interface", "eno1")
    assert done.returncode == 0
    # the lscpu capture: 2 sockets x 32 cores, no SMT; 4 GPUs -> 16 threads each (as `gpuprep plan` says); the
    # captures hold no RDMA facts, so NCCL_IB_DISABLE is left to NCCL, never guessed
    assert done.stdout.splitlines()[2:] == ['MKL_NUM_THREADS="16"', 'NCCL_SOCKET_IFNAME="=eno1"',
                                            'OMP_NUM_THREADS="16"']


def test_the_text_report_says_not_known_where_captures_are_silent():
    """For captures the JSON says null (not known); the text said "CUDA toolkits: none found", "PyTorch: not
    installed" as if they had been looked for."""
    done = run_cli("check", "--from", corpus("h100-sxm-x8.nvidia-smi-q.txt"))
    assert "CUDA toolkits: not known" in done.stdout and "PyTorch: not known" in done.stdout
    assert "none found" not in done.stdout and "not installed" not in done.stdout


def test_findings_fit_the_terminal_width():
    done = run_cli("check", "--from", corpus("a100-sxm4-x4.nvidia-smi-q.txt"), env={"COLUMNS": "80"})
    findings = done.stdout[done.stdout.index("\n["):]          # the findings (the GPU table is a table)
    assert max(len(line) for line in findings.splitlines()) <= 80
    assert "remedy:   Drain the GPU and reset it" in findings or "remedy:   " in findings


def test_the_profile_is_named_and_a_gpu_count_it_cannot_see_is_not_ok(tmp_path):
    """--profile training on a host without GPUs printed the plain output, OK, exit 0 (min_gpus ignored)."""
    lscpu = corpus("asus-esc8000a-e12-4x-rtx6000ada.lscpu.txt")
    done = run_cli("check", "--from", lscpu, "--profile", "training", "--json")
    doc = json.loads(done.stdout)
    assert doc["profile"] == "training" and ("gpu.count", "warn") in {(f["id"], f["severity"]) for f in doc["findings"]}
    failed = tmp_path / "smi.txt"
    failed.write_text("NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver. Make sure that "
                      "the latest NVIDIA driver is installed and running.\n")
    done = run_cli("check", "--from", str(failed), "--profile", "training")
    assert done.returncode == 1 and "judged against profile: training" in done.stdout
    assert "gpu.count" in done.stdout and "0 GPU(s), profile wants at least 2" in done.stdout


def test_a_filter_that_checks_nothing_does_not_read_as_ok():
    lscpu = corpus("asus-esc8000a-e12-4x-rtx6000ada.lscpu.txt")
    done = run_cli("check", "--from", lscpu, "--only", "gpu")
    assert done.returncode == 0 and "NOTHING CHECKED" in done.stdout and "OK:" not in done.stdout
    assert json.loads(run_cli("check", "--from", lscpu, "--only", "gpu", "--json").stdout)["verdict"] == "info"
