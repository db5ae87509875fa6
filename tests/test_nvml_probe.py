"""The live NVML probe and the burn-in's NVML sampler through the real nvidia-ml-py, loading a C stand-in of
libnvidia-ml.so.1 compiled against NVIDIA's nvml.h (tests/nvml_stub): capture -> snapshot -> the values each
NVML function returns -> probe -> the same GPU facts. The stand-in is as strict as the real library about
pointers, struct versions and functions an older driver lacks, so mistakes at the C boundary fail here."""
import dataclasses
import json
import sys

import pytest

import nvml_stub
from conftest import REPO, corpus
from gpuprep.parsers import import_files, import_text
from gpuprep.rules import evaluate
from gpuprep.snapshot import Gpu, Snapshot

pytestmark = pytest.mark.skipif(not nvml_stub.compiler_available(), reason="needs a C compiler for the NVML stand-in")

MACHINES = {
    "8x H100 SXM (NVSwitch)": ["h100-sxm-x8.nvidia-smi-q.txt"],
    "4x A100 SXM4 (row remapping)": ["a100-sxm4-x4.nvidia-smi-q.txt"],
    "8x V100 (retired pages)": ["v100-sxm2-x8-vm.nvidia-smi-q.txt"],
    "A100 MIG (XML)": ["a100-sxm4-80gb-mig.nvidia-smi-q.xml"],
    "2x RTX 3090 (no ECC, no app clocks)": ["rtx3090-x2.nvidia-smi-q.txt"],
    "2x RTX A5000 (supported clocks)": ["dual-rtx-a5000.nvidia-smi-q.xml"],
    "8x A100 with NVLink state": ["a100-sxm4-80gb-x8.nvlink-status.txt"],
    "T4 (old XML)": ["t4-aws.nvidia-smi-q.xml"],
}
H100 = "h100-sxm-x8.nvidia-smi-q.txt"
# nvidia-smi -L of the same A100-SXM4-80GB (GPU-513536b6-...) as the MIG XML capture: its MIG instances' UUIDs
MIG_LIST = REPO / "tests" / "data" / "container" / "a100-sxm4-80gb-x4-mig.nvidia-smi-L.txt"


def _comparable(gpu: dict) -> dict:
    data = dict(gpu)
    data.pop("pcie_gen_host_max")   # nvidia-smi derives the host side; NVML has no query for it
    for link in data.get("nvlinks") or []:
        link.pop("speed_gbps")      # NVML has no plain per-link speed query; nvlink --status prints one
    return data


def _configure(tmp_path, snap, **kwargs):
    path = tmp_path / "nvml.conf"
    path.write_text(nvml_stub.config_for(snap, **kwargs))
    return path


def _gpus(facts: dict):
    return [Gpu(**{**g, "nvlinks": None, "supported_clocks": None}) for g in facts["gpus"]]


@pytest.mark.parametrize("machine", MACHINES)
def test_round_trip(machine, tmp_path):
    captured = import_files([corpus(f) for f in MACHINES[machine]])
    migs = nvml_stub.mig_uuids_of(MIG_LIST) if "MIG" in machine else None
    facts = nvml_stub.probe_json(_configure(tmp_path, captured, mig_uuids=migs))
    assert facts["status"]["available"] is True
    assert facts["driver"] == captured.software.driver_version
    assert facts["cuda"] == captured.software.cuda_driver_version
    assert len(facts["gpus"]) == len(captured.gpus)
    for probed, original in zip(facts["gpus"], captured.gpus):
        assert _comparable(probed) == _comparable(dataclasses.asdict(original))


@pytest.mark.parametrize("reason, code", [("driver-not-loaded", "DRIVER_NOT_LOADED"), ("library-not-found", "LIBRARY_NOT_FOUND"),
                                          ("version-mismatch", "LIB_RM_VERSION_MISMATCH"), ("no-permission", "NO_PERMISSION")])
def test_init_failures_are_recorded_not_raised(reason, code, tmp_path):
    facts = nvml_stub.probe_json(_configure(tmp_path, Snapshot(), init=code))
    assert facts["status"]["available"] is False and facts["status"]["reason"] == reason
    assert facts["gpus"] == []


def test_init_failure_from_a_real_nvidia_smi_error(tmp_path):
    snap = import_text("Failed to initialize NVML: Driver/library version mismatch\n", "smi.txt")
    assert snap.nvml.reason == "version-mismatch"
    facts = nvml_stub.probe_json(_configure(tmp_path, snap, init="LIB_RM_VERSION_MISMATCH"))
    assert facts["status"]["reason"] == "version-mismatch"
    assert "mismatch" in facts["status"]["message"].lower()


def test_a_gpu_nvml_cannot_open_is_named_and_fails_the_check(tmp_path):
    captured = import_files([corpus(H100)])
    facts = nvml_stub.probe_json(_configure(tmp_path, captured, errors=[(5, "nvmlDeviceGetHandleByIndex_v2", "GPU_IS_LOST", 1)]))
    gpus = _gpus(facts)
    assert len(gpus) == 8 and gpus[5].failure == "NVML cannot open it: GPU is lost"
    (finding,) = [f for f in evaluate(Snapshot(gpus=gpus)) if f.id == "gpu.unreachable"]
    assert finding.severity == "fail" and finding.subject == "GPU5" and "reboot" in finding.remedy


@pytest.mark.parametrize("code, words, action", [("GPU_IS_LOST", "GPU is lost", "reboot"),
                                                 ("RESET_REQUIRED", "GPU requires restart", "nvidia-smi -r"),
                                                 ("UNKNOWN", "Unknown Error", "kernel log")])
def test_a_gpu_that_opens_and_then_fails_is_a_fail_naming_it(code, words, action, tmp_path):
    """After the GPU opened, NVML answers every query with the error (what the driver says once it fell off
    the bus): the GPU must fail, not pass with every field unknown."""
    captured = import_files([corpus(H100)])
    facts = nvml_stub.probe_json(_configure(tmp_path, captured, errors=[
        (2, fn, code, 1) for fn in ("nvmlDeviceGetName", "nvmlDeviceGetUUID", "nvmlDeviceGetPowerUsage",
                                    "nvmlDeviceGetPersistenceMode", "nvmlDeviceGetTemperature")]))
    gpus = _gpus(facts)
    assert gpus[2].failure.startswith(f"NVML answered '{words}' to nvmlDeviceGet")
    assert gpus[3].failure is None and gpus[3].uuid == captured.gpus[3].uuid
    failed = [f for f in evaluate(Snapshot(gpus=gpus)) if f.severity == "fail"]
    assert [(f.id, f.subject.split()[0]) for f in failed] == [("gpu.unreachable", "GPU2")]
    assert action in failed[0].remedy and words in failed[0].title


def test_one_sensor_without_permission_stays_unknown_and_does_not_fail(tmp_path):
    captured = import_files([corpus(H100)])
    facts = nvml_stub.probe_json(_configure(tmp_path, captured, errors=[(1, "nvmlDeviceGetPowerUsage", "NO_PERMISSION", 1)]))
    gpu = _gpus(facts)[1]
    assert gpu.power_draw_w is None and gpu.failure is None and gpu.uuid == captured.gpus[1].uuid


def _nvswitch_board():
    """Two H100 SXM GPUs of a real HGX capture: the first registered with the fabric, the second not yet."""
    captured = import_files([corpus(H100)])
    captured.gpus = captured.gpus[:2]
    captured.gpus[1].fabric_state, captured.gpus[1].fabric_status = "In Progress", None
    return captured


def test_fabric_registration_is_read_by_reference_on_every_driver_branch(tmp_path):
    board = _nvswitch_board()
    board.gpus[0].fabric_bandwidth = "Full"
    config = _configure(tmp_path, board)
    latest = _gpus(nvml_stub.probe_json(config))                  # R550+: nvmlDeviceGetGpuFabricInfoV, health mask
    assert [(g.fabric_state, g.fabric_status, g.fabric_bandwidth) for g in latest] == [
        ("Completed", "Success", "Full"), ("In Progress", None, None)]
    r535 = _gpus(nvml_stub.probe_json(config, branch=535))       # only the unversioned call
    assert [(g.fabric_state, g.fabric_status, g.fabric_bandwidth) for g in r535] == [
        ("Completed", "Success", None), ("In Progress", None, None)]
    r470 = _gpus(nvml_stub.probe_json(config, branch=470))       # no fabric calls at all: unknown, no crash
    assert [g.fabric_state for g in r470] == [None, None] and r470[0].uuid == board.gpus[0].uuid


def test_fabric_status_and_degraded_bandwidth_fail_the_gpu(tmp_path):
    captured = import_files([corpus(H100)])
    captured.gpus[2].fabric_status = "Insufficient Resources"      # the status of azhpc-images PR 506's capture
    captured.gpus[4].fabric_bandwidth = "Degraded"
    gpus = _gpus(nvml_stub.probe_json(_configure(tmp_path, captured)))
    assert gpus[2].fabric_status == "Insufficient Resources" and gpus[4].fabric_bandwidth == "Degraded"
    failed = {f.subject.split()[0]: f.title for f in evaluate(Snapshot(gpus=gpus)) if f.id == "gpu.fabric" and f.severity == "fail"}
    assert set(failed) == {"GPU2", "GPU4"} and "degraded" in failed["GPU4"]


def test_fabric_routes_unhealthy_fail_and_recovering_warn_from_the_health_mask(tmp_path):
    """nvml.h's health mask holds more than the bandwidth bits: an unhealthy route fails the GPU, a route or access
    timeout recovery in progress warns, all FALSE passes; a driver before the mask (R535) cannot say: unknown."""
    captured = import_files([corpus(H100)])
    captured.gpus = captured.gpus[:3]
    for gpu, flags in zip(captured.gpus, ([], ["route unhealthy"], ["route recovery in progress"])):
        gpu.fabric_bandwidth, gpu.fabric_health_flags = "Full", flags
    config = _configure(tmp_path, captured)
    gpus = _gpus(nvml_stub.probe_json(config))
    assert [g.fabric_health_flags for g in gpus] == [[], ["route unhealthy"], ["route recovery in progress"]]
    verdicts = {f.subject.split()[0]: f.severity for f in evaluate(Snapshot(gpus=gpus)) if f.id == "gpu.fabric"}
    assert verdicts == {"GPU0": "pass", "GPU1": "fail", "GPU2": "warn"}
    assert [g.fabric_health_flags for g in _gpus(nvml_stub.probe_json(config, branch=535))] == [None, None, None]


def test_check_and_snapshot_run_on_an_nvswitch_board(tmp_path):
    """The commands themselves, as a user runs them, on the board that crashed them (struct passed by value)."""
    config = _configure(tmp_path, _nvswitch_board())
    snap = nvml_stub.run(config, [sys.executable, "-m", "gpuprep", "snapshot", "--no-docker"])
    assert snap.returncode == 0, snap.stderr
    assert [g["fabric_state"] for g in json.loads(snap.stdout)["gpus"]] == ["Completed", "In Progress"]
    check = nvml_stub.run(config, [sys.executable, "-m", "gpuprep", "check", "--no-docker", "--json"])
    assert check.returncode == 1, check.stderr
    fabric = [(f["subject"].split()[0], f["severity"]) for f in json.loads(check.stdout)["findings"] if f["id"] == "gpu.fabric"]
    assert sorted(fabric) == [("GPU0", "pass"), ("GPU1", "fail")]


def test_a_pcie_geforce_board_reports_what_it_lacks_as_unknown(tmp_path):
    captured = import_files([corpus("rtx3090-x2.nvidia-smi-q.txt")])
    gpu = _gpus(nvml_stub.probe_json(_configure(tmp_path, captured)))[0]
    assert gpu.ecc_mode_current is None and gpu.ecc_volatile_uncorrected is None
    assert gpu.retired_pages_pending is None and gpu.remapped_rows_pending is None   # both N/A in the capture
    assert gpu.fabric_state is None and gpu.failure is None


def test_an_older_driver_branch_lacks_the_newer_calls(tmp_path):
    """R470 has neither the clock *event* reasons (R535's name), the NUMA node query nor GSP firmware (R510): the
    probe falls back to the throttle reasons and leaves the others unknown."""
    captured = import_files([corpus(H100)])
    gpus = _gpus(nvml_stub.probe_json(_configure(tmp_path, captured), branch=470))
    assert gpus[0].clock_event_reasons == captured.gpus[0].clock_event_reasons
    assert gpus[0].numa_node is None and gpus[0].gsp_firmware is None and gpus[0].uuid == captured.gpus[0].uuid


STRICT = """
import ctypes, json, pynvml
pynvml.nvmlInit()
h = pynvml.nvmlDeviceGetHandleByIndex(0)
out = {}
def code(fn, *args):
    try:
        fn(*args)
        return 0
    except pynvml.NVMLError as exc:
        return exc.value
info = pynvml.c_nvmlGpuFabricInfo_v2_t()
out["null_info"] = code(pynvml.nvmlDeviceGetGpuFabricInfo, h, None)
out["null_count"] = pynvml._nvmlGetFunctionPointer("nvmlDeviceGetCount_v2")(None)
info.version = 1
out["wrong_version"] = code(pynvml.nvmlDeviceGetGpuFabricInfoV, h, ctypes.byref(info))
info.version = pynvml.nvmlGpuFabricInfo_v2
out["right_version"] = code(pynvml.nvmlDeviceGetGpuFabricInfoV, h, ctypes.byref(info))
out["absent"] = code(pynvml.nvmlDeviceGetPowerSource, h)
pynvml.nvmlShutdown()
out["after_shutdown"] = code(pynvml.nvmlDeviceGetName, h)
print(json.dumps(out))
"""


def test_the_stand_in_is_as_strict_as_the_real_library(tmp_path):
    import pynvml
    done = nvml_stub.run(_configure(tmp_path, _nvswitch_board()), [sys.executable, "-c", STRICT])
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout) == {
        "null_info": pynvml.NVML_ERROR_INVALID_ARGUMENT, "null_count": pynvml.NVML_ERROR_INVALID_ARGUMENT,
        "wrong_version": pynvml.NVML_ERROR_ARGUMENT_VERSION_MISMATCH, "right_version": 0,
        "absent": pynvml.NVML_ERROR_FUNCTION_NOT_FOUND, "after_shutdown": pynvml.NVML_ERROR_UNINITIALIZED}


# ---------------------------------------------------------------------------- the burn-in's sampler
def test_sampler_reads_a_real_capture(tmp_path):
    snap = import_files([corpus(H100)])
    (reading,) = nvml_stub.samples(_configure(tmp_path, snap), index=3)
    assert reading["clock_sm_mhz"] == snap.gpus[3].clock_sm_mhz
    assert reading["ecc_volatile_uncorrected"] == 0 and reading["clock_event_reasons"] == ["gpu_idle"]
    assert reading["power_limit_w"] == snap.gpus[3].power_enforced_limit_w == 700.0 and "failure" not in reading
    assert reading["max_sm_clock_mhz"] == 1980 and reading["pci_bus_id"] == snap.gpus[3].pci_bus_id


def test_sampler_finds_a_gpu_by_cudas_uuid_and_a_mig_instance_by_its_parent(tmp_path):
    snap = import_files([corpus("a100-sxm4-80gb-mig.nvidia-smi-q.xml")])
    migs = nvml_stub.mig_uuids_of(MIG_LIST)[0]
    parent = snap.gpus[0].uuid
    assert parent == MIG_LIST.read_text().split("UUID: ")[1].split(")")[0]     # the same GPU in both captures
    config = _configure(tmp_path, snap, mig_uuids={0: migs})
    (plain,) = nvml_stub.samples(config, uuid=parent[len("GPU-"):])          # torch prints UUIDs without a prefix
    (mig,) = nvml_stub.samples(config, uuid=migs[1][len("MIG-"):])
    assert plain["pci_bus_id"] == snap.gpus[0].pci_bus_id
    assert mig == plain and mig["power_limit_w"] == snap.gpus[0].power_enforced_limit_w


def _reason_timeline(tmp_path, snap, index, timeline):
    """The stand-in's configuration with GPU `index`'s clock event reasons following `timeline`, one value a reading."""
    bits = {"gpu_idle": 0x1, "sw_power_cap": 0x4, "hw_slowdown": 0x8}        # nvml.h's nvmlClocksEventReason* bits
    path = _configure(tmp_path, snap)
    lines = [line for line in path.read_text().splitlines() if not line.startswith(f"gpu {index} reasons ")]
    lines.append(f"gpu {index} reasons " + ";".join(hex(sum(bits[r] for r in step)) for step in timeline))
    path.write_text("\n".join(lines) + "\n")
    return path


def test_hw_slowdown_in_one_reading_of_a_p_state_change_warns_and_a_held_one_fails(tmp_path):
    """nvml.h: HW Slowdown "may be reported during PState or clock change". The sampler reads a timeline from the
    stand-in; the worker counts the readings per reason; one reading of it warns, two fail the rank."""
    from gpuprep.burnin import RunResult
    from gpuprep.burnin.judge import judge
    from gpuprep.burnin.worker import _reason_counts, _reasons
    snap = import_files([corpus(H100)])
    verdicts = []
    for timeline in ([["gpu_idle"], ["hw_slowdown"], [], [], ["sw_power_cap"]],
                     [[], ["hw_slowdown"], ["hw_slowdown"], [], []]):
        readings = nvml_stub.samples(_reason_timeline(tmp_path, snap, 0, timeline), index=0, count=len(timeline))
        assert [r["clock_event_reasons"] for r in readings] == timeline
        rank = {"rank": 0, "world_size": 1, "host": "n1", "backend": "nccl", "device": "cuda:0", "compute_ms": [5.0],
                "step_ms": [9.0], "steps": 1, "memory": {"ok": True},
                "gpu": {"samples": len(readings), "reasons_seen": _reasons(readings),
                        "reason_counts": _reason_counts(readings)}}
        found = judge(RunResult(ranks={0: rank}, world_size=1, exit_code=0, timed_out=False, wall_seconds=60))
        verdicts.append([f.severity for f in found if f.id == "burnin.throttle"])
    assert verdicts == [["warn"], ["fail"]]


def test_a_gpu_lost_in_the_middle_of_a_burn_in_is_reported(tmp_path):
    from gpuprep.burnin import RunResult
    from gpuprep.burnin.judge import judge
    snap = import_files([corpus(H100)])
    config = _configure(tmp_path, snap, errors=[(0, "nvmlDeviceGetPowerUsage", "GPU_IS_LOST", 3)])
    readings = nvml_stub.samples(config, index=0, count=4)
    assert [r.get("failure") for r in readings[:2]] == [None, None]
    assert readings[3]["failure"] == "NVML answered 'GPU is lost' to nvmlDeviceGetPowerUsage"
    rank = {"rank": 0, "world_size": 1, "host": "n1", "backend": "nccl", "device": "cuda:0", "compute_ms": [5.0],
            "step_ms": [9.0], "allreduce": [], "memory": {"ok": True},
            "gpu": {"before": readings[0], "after": readings[3], "reasons_seen": [], "samples": 4,
                    "failure": readings[3]["failure"]}}
    run = RunResult(ranks={0: rank}, world_size=1, exit_code=0, timed_out=False, wall_seconds=60)
    assert [(f.id, f.severity) for f in judge(run) if f.severity == "fail"] == [("burnin.gpu-lost", "fail")]


LIVE = """
import sys
from gpuprep.probe import collect
snap = collect(root=sys.argv[1], environ={"NCCL_SOCKET_IFNAME": "ib", "HOME": "/x"}, docker=False, commands=False)
print(snap.to_json())
"""


def test_live_probe_with_a_fake_root_and_the_nvml_stand_in(tmp_path):
    root = tmp_path / "root"
    (root / "proc/sys/kernel").mkdir(parents=True)
    (root / "proc/sys/kernel/hostname").write_text("gpu-node-7\n")
    (root / "proc/sys/kernel/numa_balancing").write_text("1\n")
    (root / "proc/modules").write_text("nvidia 1 0 - Live 0x0\nnouveau 2 0 - Live 0x0\n")
    (root / "proc/meminfo").write_text("MemTotal:       2113724416 kB\nSwapTotal:             0 kB\n")
    (root / "proc/driver/nvidia").mkdir(parents=True)
    (root / "proc/driver/nvidia/version").write_text(
        "NVRM version: NVIDIA UNIX x86_64 Kernel Module  565.57.01  Thu Oct 10 12:29:05 UTC 2024\n")
    node0 = root / "sys/devices/system/node/node0"
    node0.mkdir(parents=True)
    (node0 / "cpulist").write_text("0-55,112-167\n")
    for cpu in range(2):
        gov = root / f"sys/devices/system/cpu/cpu{cpu}/cpufreq"
        gov.mkdir(parents=True)
        gov.joinpath("scaling_governor").write_text("powersave\n")
    captured = import_files([corpus(H100)])
    done = nvml_stub.run(_configure(tmp_path, captured), [sys.executable, "-c", LIVE, str(root)])
    assert done.returncode == 0, done.stderr
    snap = Snapshot.from_json(done.stdout)
    assert snap.system.hostname == "gpu-node-7"
    assert snap.kernel_modules["nouveau"] is True and snap.kernel_modules["nvidia_peermem"] is False
    assert snap.settings.cpu_governors == ["powersave"] and snap.settings.numa_balancing == 1
    assert (snap.software.kernel_module_version, snap.software.kernel_module_flavor) == ("565.57.01", "proprietary")
    assert snap.numa_nodes[0].cpulist == "0-55,112-167"
    assert snap.env == {"NCCL_SOCKET_IFNAME": "ib"}
    assert len(snap.gpus) == 8 and snap.software.driver_version == "565.57.01"
    assert [g.uuid for g in snap.gpus] == [g.uuid for g in captured.gpus]
    assert Snapshot.from_json(snap.to_json()) == snap


def test_probe_without_the_library_says_so(tmp_path):
    done = nvml_stub.run(tmp_path / "none.conf", [sys.executable, "-c", LIVE, str(tmp_path)])
    assert done.returncode == 0, done.stderr
    snap = Snapshot.from_json(done.stdout)
    assert snap.nvml.available is False and snap.nvml.reason == "driver-not-loaded" and snap.gpus is None


# nvml.h: every error but these three means the GPU (or driver) failed to answer, not that a field is unknown
FAILING_CODES = ["TIMEOUT", "INSUFFICIENT_POWER", "DRIVER_NOT_LOADED", "IRQ_ISSUE", "MEMORY", "CORRUPTED_INFOROM",
                 "GPU_IS_LOST", "RESET_REQUIRED", "UNKNOWN", "OPERATING_SYSTEM", "LIB_RM_VERSION_MISMATCH",
                 "INVALID_ARGUMENT", "INSUFFICIENT_RESOURCES"]


@pytest.mark.parametrize("code", FAILING_CODES)
def test_a_gpu_answering_any_real_error_fails_and_npd_is_not_healthy(code, tmp_path):
    """A GPU that answers every query with TIMEOUT or INSUFFICIENT_POWER (its power cables) was read as 'every
    field unknown' and `npd` said healthy."""
    captured = import_files([corpus(H100)])
    config = _configure(tmp_path, captured, errors=[(4, fn, code, 1) for fn in (
        "nvmlDeviceGetName", "nvmlDeviceGetUUID", "nvmlDeviceGetPowerUsage", "nvmlDeviceGetTemperature",
        "nvmlDeviceGetMemoryInfo_v2", "nvmlDeviceGetPersistenceMode", "nvmlDeviceGetClockInfo")])
    gpus = _gpus(nvml_stub.probe_json(config))
    assert gpus[4].failure and "nvmlDeviceGet" in gpus[4].failure and gpus[5].failure is None
    failed = [(f.id, f.subject.split()[0]) for f in evaluate(Snapshot(gpus=gpus)) if f.severity == "fail"]
    assert ("gpu.unreachable", "GPU4") in failed


@pytest.mark.parametrize("code", ["NOT_SUPPORTED", "NO_PERMISSION", "FUNCTION_NOT_FOUND"])
def test_only_the_three_unknown_answers_leave_a_field_unknown(code, tmp_path):
    captured = import_files([corpus(H100)])
    config = _configure(tmp_path, captured, errors=[(4, "nvmlDeviceGetPowerUsage", code, 1)])
    gpu = _gpus(nvml_stub.probe_json(config))[4]
    assert gpu.power_draw_w is None and gpu.failure is None and gpu.name == captured.gpus[4].name


def test_a_gpu_nvml_enumerates_but_cannot_name_fails(tmp_path):
    captured = import_files([corpus(H100)])
    config = _configure(tmp_path, captured, errors=[(6, "nvmlDeviceGetName", "NOT_SUPPORTED", 1)])
    gpus = _gpus(nvml_stub.probe_json(config))
    assert gpus[6].failure == "NVML opened it but cannot name it"


def test_a_count_nvml_cannot_give_is_a_driver_failure(tmp_path):
    captured = import_files([corpus(H100)])
    config = _configure(tmp_path, captured, errors=[("*", "nvmlDeviceGetCount_v2", "UNKNOWN", 1)])
    facts = nvml_stub.probe_json(config)
    assert facts["status"]["available"] is False and "nvmlDeviceGetCount" in facts["status"]["message"]
    assert facts["gpus"] == []


def test_gpus_of_another_slurm_job_are_not_broken_and_get_no_burn_in_rank(tmp_path):
    """In a Slurm job with ConstrainDevices, NVML counts the node's 8 GPUs and answers NO_PERMISSION opening the
    6 the job was not given: each was gpu.unreachable FAIL with drain/RMA advice, and the burn-in started 8 ranks."""
    captured = import_files([corpus(H100)])
    config = _configure(tmp_path, captured, errors=[(i, "nvmlDeviceGetHandleByIndex_v2", "NO_PERMISSION", 1)
                                                    for i in range(2, 8)])
    facts = nvml_stub.probe_json(config)
    gpus = _gpus(facts)
    assert [g.not_permitted for g in gpus] == [None, None] + [True] * 6
    findings = evaluate(Snapshot(gpus=gpus))
    assert [f.id for f in findings if f.severity == "fail"] == []
    (hidden,) = [f for f in findings if f.id == "gpu.not-permitted"]
    assert hidden.severity == "info" and hidden.evidence["not_permitted"] == [2, 3, 4, 5, 6, 7]
    done = nvml_stub.run(config, [sys.executable, "-c", "from gpuprep.burnin import detect_gpus; print(detect_gpus())"])
    assert done.stdout.strip() == "2", done.stderr
    everything = _configure(tmp_path, captured, errors=[("*", "nvmlDeviceGetHandleByIndex_v2", "NO_PERMISSION", 1)])
    (none_opened,) = [f for f in evaluate(Snapshot(gpus=_gpus(nvml_stub.probe_json(everything))))
                      if f.id == "gpu.not-permitted"]
    assert none_opened.severity == "warn"


def test_a_gpu_burn_in_that_cannot_run_says_why_before_starting_ranks(tmp_path):
    """Through nvidia-ml-py and the stand-in: MIG GPUs, and this venv's +cpu torch beside NVIDIA GPUs, stop the
    burn-in with one line (exit 2) before torchrun, where every rank died and the report blamed the GPUs."""
    pytest.importorskip("torch")
    migs = nvml_stub.mig_uuids_of(MIG_LIST)
    config = _configure(tmp_path, import_files([corpus("a100-sxm4-80gb-mig.nvidia-smi-q.xml")]), mig_uuids=migs)
    done = nvml_stub.run(config, [sys.executable, "-m", "gpuprep", "burnin", "--duration", "5s"])
    assert done.returncode == 2 and "MIG is enabled on GPU 0" in done.stderr, done.stderr
    config = _configure(tmp_path, import_files([corpus(H100)]))
    done = nvml_stub.run(config, [sys.executable, "-m", "gpuprep", "burnin", "--duration", "5s"])
    assert done.returncode == 2 and "is a CPU build" in done.stderr, done.stderr


def test_a_gpu_name_that_is_not_utf8_fails_that_gpu_not_the_probe(tmp_path):
    """nvidia-ml-py decodes the name outside the probe's guard: one GPU's garbage name failed the whole probe."""
    captured = import_files([corpus(H100)])
    path = _configure(tmp_path, captured)
    lines = [line for line in path.read_bytes().split(b"\n") if not line.startswith(b"gpu 2 name ")]
    path.write_bytes(b"\n".join(lines) + b"\ngpu 2 name NVIDIA \xff\xfe H100\n")
    facts = nvml_stub.probe_json(path)
    gpus = _gpus(facts)
    assert len(gpus) == 8 and gpus[2].name is None and gpus[2].failure == "NVML opened it but cannot name it"
    assert gpus[3].name == captured.gpus[3].name


def test_the_power_limit_is_the_enforced_one_as_nvidia_smi_prints_it(tmp_path):
    """A GH200 asks for 900 W and is held to 700 W: its -q capture says Current Power Limit 700, the live probe
    read the requested 900 (a false drift between a node and its own capture)."""
    captured = import_files([corpus("gh200.nvidia-smi-q.txt")])
    assert captured.gpus[0].power_limit_w == 700.0
    path = _configure(tmp_path, captured)
    path.write_text(path.read_text().replace(f"gpu 0 power_limit {int(700 * 1000)}\n", f"gpu 0 power_limit {900 * 1000}\n"))
    assert "gpu 0 power_limit 900000" in path.read_text()
    gpu = _gpus(nvml_stub.probe_json(path))[0]
    assert gpu.power_limit_w == 700.0 and gpu.power_enforced_limit_w == 700.0


def test_a_hot_gpu_is_judged_by_its_t_limit_margin_where_the_driver_gives_no_absolute_threshold(tmp_path):
    """R550+ drivers report no slowdown temperature, only the margin to T.Limit (a real H200 capture: 59 C of margin,
    throttling below base at 0, slowdown at -2): a GPU 3 C from T.Limit warns, one past it fails; before, with no
    absolute threshold the rule passed any temperature."""
    captured = import_files([corpus("h200.nvidia-smi-q.txt")])
    (gpu,) = captured.gpus
    assert (gpu.temperature_slowdown_c, gpu.tlimit_margin_c, gpu.tlimit_slowdown_c, gpu.tlimit_max_operating_c) == \
        (None, 59, -2, 0)
    hot, past = dataclasses.replace(gpu, index=1), dataclasses.replace(gpu, index=2)
    hot.tlimit_margin_c, past.tlimit_margin_c = 3, -1
    captured.gpus = [gpu, hot, past]
    probed = _gpus(nvml_stub.probe_json(_configure(tmp_path, captured)))
    assert [g.tlimit_margin_c for g in probed] == [59, 3, -1] and probed[2].tlimit_slowdown_c == -2
    verdicts = {f.subject.split()[0]: f.severity for f in evaluate(Snapshot(gpus=probed)) if f.id == "gpu.temperature"}
    assert verdicts == {"GPU0": "pass", "GPU1": "warn", "GPU2": "fail"}
    assert [g.tlimit_margin_c for g in _gpus(nvml_stub.probe_json(_configure(tmp_path, captured), branch=535))] == \
        [None, None, None]                      # nvmlDeviceGetMarginTemperature is newer than R535: unknown


def _fabric_mask(**fields) -> int:
    """A health mask built from nvml.h's own constants (nvidia-ml-py): field=VALUE_NAME, e.g. route_unhealthy="TRUE"."""
    mask = 0
    for field, value in fields.items():
        name = field.upper()
        mask |= getattr(nvml_stub.pynvml, f"NVML_GPU_FABRIC_HEALTH_MASK_{name}_{value}") << \
            getattr(nvml_stub.pynvml, f"NVML_GPU_FABRIC_HEALTH_MASK_SHIFT_{name}")
    return mask


def test_blackwell_fabric_summary_configuration_and_global_manager_from_fabric_info_v3(tmp_path):
    """Fabric info v3 (nvml.h 13.x) adds the driver's health summary, and the mask's configuration and global fabric
    manager fields: an insufficient-NVLinks configuration or an Unhealthy summary fails, Limited Capacity or a
    disconnected global fabric manager warns, a Healthy summary with every field FALSE passes. A driver that knows
    only v2 refuses v3, and the probe falls back to the mask without a summary (R550-R565)."""
    healthy = dict(degraded_bw="FALSE", route_recovery="FALSE", route_unhealthy="FALSE",
                   access_timeout_recovery="FALSE", incorrect_configuration="NONE", gfm_state="CONNECTED")
    P = nvml_stub.pynvml
    gpus = [  # (mask, summary)
        (_fabric_mask(**healthy), P.NVML_GPU_FABRIC_HEALTH_SUMMARY_HEALTHY),
        (_fabric_mask(**{**healthy, "incorrect_configuration": "INSUFFICIENT_NVLINKS"}),
         P.NVML_GPU_FABRIC_HEALTH_SUMMARY_UNHEALTHY),
        (_fabric_mask(**healthy), P.NVML_GPU_FABRIC_HEALTH_SUMMARY_UNHEALTHY),
        (_fabric_mask(**healthy), P.NVML_GPU_FABRIC_HEALTH_SUMMARY_LIMITED_CAPACITY),
        (_fabric_mask(**{**healthy, "gfm_state": "DISCONNECTED"}), P.NVML_GPU_FABRIC_HEALTH_SUMMARY_HEALTHY),
    ]
    captured = import_files([corpus(H100)])
    captured.gpus = captured.gpus[:len(gpus)]
    for gpu in captured.gpus:
        gpu.fabric_state, gpu.fabric_status, gpu.fabric_bandwidth, gpu.fabric_health = "Completed", "Success", None, None
        gpu.fabric_health_flags = None
    text = nvml_stub.config_for(captured)
    text = "\n".join(line for line in text.splitlines() if " fabric " not in line) + "\n" + "".join(
        f"gpu {i} fabric 3 0 7 {mask} {summary}\n" for i, (mask, summary) in enumerate(gpus))
    config = tmp_path / "nvml.conf"
    config.write_text(text)

    probed = _gpus(nvml_stub.probe_json(config))
    assert [g.fabric_health for g in probed] == ["Healthy", "Unhealthy", "Unhealthy", "Limited Capacity", "Healthy"]
    assert probed[1].fabric_health_flags == ["incorrect configuration: insufficient NVLinks"]
    assert probed[4].fabric_health_flags == ["global fabric manager disconnected"]
    assert probed[0].fabric_health_flags == [] and probed[0].fabric_bandwidth == "Full"
    findings = {f.subject.split()[0]: f for f in evaluate(Snapshot(gpus=probed)) if f.id == "gpu.fabric"}
    assert {gpu: f.severity for gpu, f in findings.items()} == {
        "GPU0": "pass", "GPU1": "fail", "GPU2": "fail", "GPU3": "warn", "GPU4": "warn"}
    assert "insufficient NVLinks" in findings["GPU1"].title and "limited capacity" in findings["GPU3"].title

    older = _gpus(nvml_stub.probe_json(config, branch=550))   # v2 only: the mask, no summary
    assert [g.fabric_health for g in older] == [None] * len(gpus)
    assert older[1].fabric_health_flags == ["incorrect configuration: insufficient NVLinks"]


def test_check_opens_one_nvml_session(tmp_path):
    """Without persistence mode every NVML session start initialises every GPU (1-3 s each on a real node): `check`
    must bring the library up once, however many facts it reads. The stand-in logs each session's start."""
    import subprocess
    config = _configure(tmp_path, import_files([corpus(H100)]))
    sessions = tmp_path / "sessions"
    env = dict(nvml_stub.stub_env(config), GPUPREP_FAKE_NVML_SESSIONS=str(sessions))
    done = subprocess.run([sys.executable, "-m", "gpuprep", "check", "--no-docker", "--json"], capture_output=True,
                          text=True, timeout=180, cwd=str(REPO), env=env)
    assert done.stdout.startswith("{"), done.stderr[-2000:]
    assert len(json.loads(done.stdout)["snapshot"]["gpus"]) == 8
    started = sessions.read_text().splitlines()
    assert len(started) == 1, f"{len(started)} NVML sessions"
