"""The live NVML probe, end to end against a fake NVML built from real captures:
capture -> snapshot -> fake NVML -> probe -> the same GPU facts."""
import dataclasses

import pytest

from conftest import corpus
from fake_nvml import FakeLostHandles, fake_for
from gpuprep.importers import import_files, import_text
from gpuprep.probe import collect
from gpuprep.probe.nvml import probe
from gpuprep.snapshot import Snapshot

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


def _comparable(gpu):
    data = dataclasses.asdict(gpu)
    data.pop("pcie_gen_host_max")   # nvidia-smi derives the host side; NVML has no query for it
    for link in data.get("nvlinks") or []:
        link.pop("speed_gbps")      # NVML has no plain per-link speed query; nvlink --status prints one
    return data


@pytest.mark.parametrize("machine", MACHINES)
def test_round_trip(machine):
    captured = import_files([corpus(f) for f in MACHINES[machine]])
    facts = probe(fake_for(captured))
    assert facts.status.available is True
    assert facts.driver_version == captured.software.driver_version
    assert facts.cuda_driver_version == captured.software.cuda_driver_version
    assert len(facts.gpus) == len(captured.gpus)
    for probed, original in zip(facts.gpus, captured.gpus):
        assert _comparable(probed) == _comparable(original)


@pytest.mark.parametrize("reason", ["driver-not-loaded", "library-not-found", "version-mismatch", "no-permission"])
def test_init_failures_are_recorded_not_raised(reason):
    snap = Snapshot()
    snap.nvml.available, snap.nvml.reason = False, reason
    facts = probe(fake_for(snap))
    assert facts.status.available is False and facts.status.reason == reason
    assert facts.gpus == []


def test_init_failure_from_a_real_nvidia_smi_error():
    snap = import_text("Failed to initialize NVML: Driver/library version mismatch\n", "smi.txt")
    facts = probe(fake_for(snap))
    assert facts.status.reason == "version-mismatch"
    assert "mismatch" in facts.status.message.lower()


def test_a_lost_gpu_leaves_its_fields_unknown_and_the_others_intact():
    captured = import_files([corpus("h100-sxm-x8.nvidia-smi-q.txt")])
    facts = probe(fake_for(captured, lost=(3,)))
    assert len(facts.gpus) == 8
    assert facts.gpus[3].name is None and facts.gpus[3].persistence_mode is None
    assert facts.gpus[4].uuid == captured.gpus[4].uuid


def test_a_gpu_nvml_cannot_open_is_named_and_fails_the_check():
    from gpuprep.rules import evaluate
    captured = import_files([corpus("h100-sxm-x8.nvidia-smi-q.txt")])
    lost = FakeLostHandles(captured, lost_handles=(5,))
    facts = probe(lost)
    assert len(facts.gpus) == 8 and facts.gpus[5].failure == "NVML cannot open it: GPU is lost"
    snap = Snapshot(gpus=facts.gpus)
    (finding,) = [f for f in evaluate(snap) if f.id == "gpu.unreachable"]
    assert finding.severity == "fail" and finding.subject == "GPU5" and "reboot" in finding.remedy


def test_fabric_registration_is_read_as_nvidia_smi_words_it():
    captured = import_files([corpus("h100-sxm-x8.nvidia-smi-q.txt")])
    assert captured.gpus[0].fabric_state == "Completed" and captured.gpus[0].fabric_status == "Success"
    captured.gpus[2].fabric_status = "Insufficient Resources"      # the status of azhpc-images PR 506's capture
    gpus = probe(fake_for(captured)).gpus
    assert (gpus[0].fabric_state, gpus[0].fabric_status) == ("Completed", "Success")
    assert gpus[2].fabric_status == "Insufficient Resources"


def test_unsupported_fields_are_unknown_not_zero():
    captured = import_files([corpus("rtx3090-x2.nvidia-smi-q.txt")])
    gpu = probe(fake_for(captured)).gpus[0]
    assert gpu.ecc_mode_current is None and gpu.ecc_volatile_uncorrected is None
    assert gpu.retired_pages_pending is None and gpu.remapped_rows_pending is None   # both N/A in the capture


def test_probe_without_the_binding_says_so():
    snap = collect(docker=False, commands=False)
    assert snap.nvml.available is False
    assert snap.nvml.reason in ("not-installed", "driver-not-loaded", "library-not-found")
    assert snap.gpus is None


def test_live_probe_with_a_fake_root_and_fake_nvml(tmp_path):
    root = tmp_path
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
    captured = import_files([corpus("h100-sxm-x8.nvidia-smi-q.txt")])
    snap = collect(root=str(root), nvml=fake_for(captured), environ={"NCCL_SOCKET_IFNAME": "ib", "HOME": "/x"},
                   docker=False, commands=False)
    assert snap.system.hostname == "gpu-node-7"
    assert snap.kernel_modules["nouveau"] is True and snap.kernel_modules["nvidia_peermem"] is False
    assert snap.settings.cpu_governors == ["powersave"] and snap.settings.numa_balancing == 1
    assert snap.software.kernel_module_version == "565.57.01"
    assert snap.numa_nodes[0].cpulist == "0-55,112-167"
    assert snap.env == {"NCCL_SOCKET_IFNAME": "ib"}
    assert len(snap.gpus) == 8 and snap.software.driver_version == "565.57.01"
    round_trip = Snapshot.from_json(snap.to_json())
    assert round_trip == snap
