"""Each rule fires on a real capture (edited only in the field under test) and stays quiet on the original."""

import pytest

from conftest import REPO, corpus
from gpuprep.parsers import import_files, import_text
from gpuprep.rules import Context, evaluate
from gpuprep.snapshot import RdmaDevice, Snapshot, Toolkit, TorchInfo


def load(*names):
    return import_files([corpus(n) for n in names])


def verdicts(snap, rule_id, **ctx):
    return sorted({f.severity for f in evaluate(snap, Context(**ctx)) if f.id == rule_id})


H100 = "h100-sxm-x8.nvidia-smi-q.txt"
A100 = "a100-sxm4-x4.nvidia-smi-q.txt"
V100 = "v100-sxm2-x8-vm.nvidia-smi-q.txt"


def test_persistence_off():
    snap = load(H100)
    assert verdicts(snap, "gpu.persistence-off") == ["pass"]
    snap.gpus[2].persistence_mode = False
    found = [f for f in evaluate(snap) if f.id == "gpu.persistence-off" and f.severity == "warn"]
    assert [f.subject for f in found] == ["GPU2 (00000000:3A:00.0)"]


def test_app_clocks_below_max_only_where_supported():
    # 1275 of 1410 MHz, and 1275 is this board's factory default: said (info), never a warning on every GPU
    snap = load("a100-sxm4-80gb-mig.nvidia-smi-q.xml")
    assert verdicts(snap, "gpu.app-clocks-below-max") == ["info"]
    snap.gpus[0].app_clock_graphics_mhz = 1110                           # someone lowered it below the default
    assert verdicts(snap, "gpu.app-clocks-below-max") == ["warn"]
    assert verdicts(load(H100), "gpu.app-clocks-below-max") == ["pass"]
    assert verdicts(load("rtx3090-x2.nvidia-smi-q.txt"), "gpu.app-clocks-below-max") == []


@pytest.mark.parametrize("reasons,expected", [
    (["gpu_idle"], ["pass"]), (["hw_slowdown", "hw_thermal_slowdown"], ["fail"]),
    (["hw_power_brake_slowdown"], ["fail"]), (["gpu_idle", "sw_power_cap"], ["info"]),
])
def test_clock_throttle(reasons, expected):
    snap = load(H100)
    for gpu in snap.gpus:
        gpu.clock_event_reasons = reasons
    assert verdicts(snap, "gpu.clock-throttle") == expected


def test_sw_power_cap_under_load_warns():
    snap = load(H100)
    snap.gpus[0].clock_event_reasons = ["sw_power_cap"]
    snap.gpus[0].power_draw_w = 690.0
    assert "warn" in verdicts(snap, "gpu.clock-throttle")


def test_ecc_disabled_and_uncorrectable():
    a5000 = load("dual-rtx-a5000.nvidia-smi-q.xml")
    assert verdicts(a5000, "gpu.ecc-disabled") == ["info"]          # workstation board: informational
    assert verdicts(a5000, "gpu.ecc-disabled", profile={"require_ecc": True}) == ["warn"]
    assert verdicts(load("rtx3090-x2.nvidia-smi-q.txt"), "gpu.ecc-disabled") == []   # N/A: not supported
    snap = load(H100)
    assert verdicts(snap, "gpu.ecc-uncorrectable") == ["pass"]
    snap.gpus[5].ecc_volatile_uncorrected = 2
    assert "fail" in verdicts(snap, "gpu.ecc-uncorrectable")


def test_row_remap():
    snap = load(A100)      # the capture's GPU1 really has a pending remap (Correctable 1, Pending Yes)
    failing = [f.subject for f in evaluate(snap) if f.id == "gpu.row-remap" and f.severity == "fail"]
    assert failing == ["GPU1 (00000000:9E:00.0)"]
    snap.gpus[1].remapped_rows_pending = False
    assert verdicts(snap, "gpu.row-remap") == ["pass"]
    snap = load(A100)
    snap.gpus[0].remapped_rows_failure = True
    found = [f for f in evaluate(snap) if f.id == "gpu.row-remap" and f.severity == "fail"]
    assert "RMA" in found[0].remedy


def test_retired_pages():
    snap = load(V100)
    assert verdicts(snap, "gpu.retired-pages") == ["pass"]
    snap.gpus[0].retired_pages_pending = True
    assert "fail" in verdicts(snap, "gpu.retired-pages")
    snap = load(V100)
    snap.gpus[1].retired_pages_double_bit = 62
    assert "fail" in verdicts(snap, "gpu.retired-pages")
    assert verdicts(load(H100), "gpu.retired-pages") == []      # Hopper: N/A, remaps rows instead


def test_pcie_degraded_uses_max_not_idle_current():
    snap = load("l4.nvidia-smi-q.txt")
    gpu = snap.gpus[0]
    assert (gpu.pcie_width_current, gpu.pcie_width_max) == (8, 16)     # the capture: x8 of x16
    snap = load(H100)
    snap.gpus[0].pcie_gen_current = 1        # idle down-training: not a fault
    assert verdicts(snap, "gpu.pcie-degraded") == ["pass"]
    snap.gpus[0].pcie_gen_max = 3
    assert "warn" in verdicts(snap, "gpu.pcie-degraded")


def test_temperature():
    snap = load(V100)
    assert verdicts(snap, "gpu.temperature") == ["pass"]
    snap.gpus[0].temperature_c = 88
    assert "fail" in verdicts(snap, "gpu.temperature")


def test_mixed_models_mig_compute_mode():
    snap = load(H100)
    assert verdicts(snap, "gpu.mixed-models") == []
    snap.gpus[7].name = "NVIDIA H100 PCIe"
    assert verdicts(snap, "gpu.mixed-models") == ["warn"]
    assert verdicts(load("a100-sxm4-40gb-x8-mig.nvidia-smi.txt"), "gpu.mig-enabled") == ["info"]
    snap = load(H100)
    snap.gpus[0].compute_mode = "Prohibited"
    assert verdicts(snap, "gpu.compute-mode") == ["warn"]


@pytest.mark.parametrize("log,code,severity", [
    ("xid119-dell-xe9680.dmesg.txt", 119, "fail"),     # GSP timeout: reset the GPU
    ("xid63-a100-sxm4-80gb.syslog-line.txt", 63, "warn"),   # "reset gpu to activate": a remap may wait for it
    ("xid13-xid43.dmesg-iso.txt", 13, "warn"),         # graphics exception: restart the app
    ("xid13-xid43.dmesg-iso.txt", 43, "info"),
    ("xid64-xid94-imbue-h100.dmesg-lines.txt", 64, "fail"),
    ("xid64-xid94-imbue-h100.dmesg-lines.txt", 94, "warn"),
    ("xid149-xid154-gb200.kmsg-lines.txt", 149, "fail"),
    ("xid149-xid154-gb200.kmsg-lines.txt", 154, "fail"),    # the lines ask for Drain and Reset / GPU Reset
])
def test_xid_follows_the_catalog(log, code, severity):
    found = [f for f in evaluate(load(log)) if f.id == "gpu.xid" and f.evidence["code"] == code]
    assert {f.severity for f in found} == {severity}


def test_xid_names_the_gpu_when_the_bus_id_is_known():
    snap = load(H100)
    snap = import_files([corpus(H100)])
    from gpuprep.parsers.kernel_log import parse_events
    snap.xids = parse_events(["[2397166.9] NVRM: Xid (PCI:0000:5d:00): 79, pid=1, GPU has fallen off the bus."])
    found = [f for f in evaluate(snap) if f.id == "gpu.xid"]
    assert found[0].subject == "GPU3 (00000000:5D:00.0)" and found[0].severity == "fail"
    assert "reboot" in found[0].remedy


def test_topology_rules():
    assert verdicts(load("asus-esc8000a-e12-4x-rtx6000ada.topo-m.txt"), "topo.p2p-path") == ["warn"]
    assert verdicts(load("h100-x8-stas.topo-m.txt"), "topo.p2p-path") == ["pass"]
    assert "fail" in verdicts(load("dual-gpu-pcie-phb.topo-m.txt"), "topo.p2p-path", profile={"require_nvlink": True})
    penny = [f for f in evaluate(load("h100-sxm-x8-ib-penny.topo-m.txt")) if f.id == "topo.gpu-nic-affinity"]
    assert {f.severity for f in penny} == {"pass"} and len(penny) == 8
    asus = verdicts(load("asus-esc8000a-e12-4x-rtx6000ada.topo-m.txt"), "topo.gpu-nic-affinity")
    assert asus == ["info"]


def test_nvlink_inactive():
    snap = load("a100-sxm4-80gb-x8.nvlink-status.txt")
    assert verdicts(snap, "topo.nvlink-inactive") == ["pass"]
    snap.gpus[4].nvlinks[3].active = False
    assert "fail" in verdicts(snap, "topo.nvlink-inactive")


def test_numa_rules():
    snap = load(H100, "h100-x8-stas.topo-m.txt", "asus-esc8000a-e12-4x-rtx6000ada.numactl-H.txt")
    assert verdicts(snap, "numa.gpu-balance") == ["pass"]
    snap.topology.numa_affinity["GPU7"] = 0
    assert verdicts(snap, "numa.gpu-balance") == ["warn"]
    snap = load(H100, "asus-esc8000a-e12-4x-rtx6000ada.lscpu.txt")     # 64 cores / 8 GPUs
    assert verdicts(snap, "numa.cores-per-gpu", profile={"min_cores_per_gpu": 8}) == ["pass"]
    assert verdicts(snap, "numa.cores-per-gpu", profile={"min_cores_per_gpu": 12}) == ["warn"]
    snap.system.memory_total_mib = 386606
    assert verdicts(snap, "numa.memory-per-gpu", profile={"min_memory_per_gpu_ratio": 1.5}) == ["warn"]


def test_driver_rules():
    mismatch = import_text("Failed to initialize NVML: Driver/library version mismatch\nNVML library version: 535.129\n", "x")
    found = [f for f in evaluate(mismatch) if f.id == "driver.nvml-unavailable"]
    assert found[0].severity == "fail" and "reboot" in found[0].remedy.lower()
    # nvidia-smi is there and printed this: the driver does not answer, a broken node
    silent = import_text("NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver.\n", "x")
    assert verdicts(silent, "driver.nvml-unavailable") == ["fail"]
    absent = Snapshot()                                      # no NVIDIA userspace at all: a host without GPUs
    absent.nvml.available, absent.nvml.reason = False, "not-installed"
    assert verdicts(absent, "driver.nvml-unavailable") == ["info"]
    assert verdicts(absent, "driver.nvml-unavailable", require_gpu=True) == ["fail"]
    snap = load(H100)
    snap.software.kernel_module_version = "560.35.03"
    assert verdicts(snap, "driver.mixed") == ["fail"]


def test_system_rules_on_edited_live_style_facts():
    snap = load(H100)
    snap.kernel_modules = {"nvidia": True, "nouveau": True, "nvidia_peermem": False}
    snap.rdma_devices = [RdmaDevice(name="mlx5_0", link_layer="InfiniBand", state="4: ACTIVE")]
    snap.settings.cpu_governors = ["powersave"]
    snap.settings.memlock_soft = "8388608"
    snap.settings.shm_size_mib = 64
    snap.system.kernel_cmdline = "BOOT_IMAGE=/vmlinuz intel_iommu=on"
    got = {f.id: f.severity for f in evaluate(snap) if f.area == "sys"}
    assert got == {"sys.nouveau-loaded": "fail", "sys.peermem-missing": "warn", "sys.cpu-governor": "warn",
                   "sys.memlock": "warn", "sys.shm-size": "warn", "sys.iommu": "warn"}
    snap.system.kernel_cmdline += " iommu=pt"
    snap.settings.cpu_governors = ["performance"]
    assert verdicts(snap, "sys.iommu") == ["pass"] and verdicts(snap, "sys.cpu-governor") == ["pass"]


def test_gpudirect_rdma_through_dma_buf_needs_no_peermem():
    """The open kernel modules (named so in the driver's own banner: a real kernel log in tests/data/broken) export
    GPU memory as dma-buf on Linux 5.12+: GPUDirect RDMA without nvidia_peermem. The proprietary ones need it."""
    log = import_files([str(REPO / "tests/data/broken/ogkm-829-xid120-gsp-crashcat-journal.dmesg.txt")])
    assert (log.software.kernel_module_flavor, log.software.kernel_module_version) == ("open", "575.51.02")
    snap = load(H100)
    snap.kernel_modules = {"nvidia": True, "nvidia_peermem": False}
    snap.rdma_devices = [RdmaDevice(name="mlx5_0", link_layer="InfiniBand", state="4: ACTIVE")]
    snap.software.kernel_module_flavor, snap.system.kernel = "open", "6.8.0-45-generic"
    assert verdicts(snap, "sys.peermem-missing") == ["pass"]
    snap.system.kernel = "5.4.0-216-generic"                         # before dma-buf export of GPU memory
    assert verdicts(snap, "sys.peermem-missing") == ["warn"]
    snap.software.kernel_module_flavor, snap.system.kernel = "proprietary", "6.8.0-45-generic"
    assert verdicts(snap, "sys.peermem-missing") == ["warn"]


def test_container_rules():
    snap = load(H100)
    snap.container.docker_reachable, snap.container.runtimes = True, ["runc"]
    assert verdicts(snap, "container.nvidia-runtime-missing") == ["fail"]
    snap.container.runtimes = ["nvidia", "runc"]
    assert verdicts(snap, "container.nvidia-runtime-missing") == ["pass"]
    ctk = load("ctk-1.17.5-vm.nvidia-container-toolkit-version.txt")
    assert verdicts(ctk, "container.toolkit-old") == ["warn"]


def test_env_rules():
    snap = load(H100)
    snap.interfaces = {"lo": "unknown", "eth0": "up", "ib0": "down"}
    snap.system.cores = 104
    snap.env = {"NCCL_SOCKET_IFNAME": "ens", "OMP_NUM_THREADS": "32", "CUDA_VISIBLE_DEVICES": "0,1,9"}
    got = {f.id: f.severity for f in evaluate(snap) if f.area == "env"}
    assert got == {"env.nccl-socket-ifname": "fail", "env.omp-threads": "warn", "env.cuda-visible-devices": "fail"}
    snap.env = {"NCCL_SOCKET_IFNAME": "=ib0"}
    assert verdicts(snap, "env.nccl-socket-ifname") == ["fail"]    # exists but down
    snap.env = {"NCCL_SOCKET_IFNAME": "eth", "OMP_NUM_THREADS": "8", "NCCL_IB_DISABLE": "1"}
    snap.rdma_devices = [RdmaDevice(name="mlx5_0", link_layer="InfiniBand")]
    got = {f.id: f.severity for f in evaluate(snap) if f.area == "env"}
    assert got == {"env.nccl-socket-ifname": "pass", "env.omp-threads": "pass", "env.nccl-ib-disabled": "warn"}


def test_compat_rules_on_a_snapshot():
    snap = load("rtx-pro6000-maxq-blackwell.nvidia-smi-q.xml")      # driver 590.44.01, sm_120
    snap.software.torch = TorchInfo(version="2.6.0+cu124", cuda="12.4")
    # the 2.6 row is inferred, but CUDA 12.4 predates sm_120 (CUDA 12.8): no kernel can be there, a certain fail
    assert verdicts(snap, "compat.torch-arch") == ["fail"]
    snap.software.torch = TorchInfo(version="2.5.1+cu124", cuda="12.4")
    assert verdicts(snap, "compat.torch-arch") == ["fail"]
    snap.software.torch = TorchInfo(version="2.7.1+cu128", cuda="12.8")
    assert verdicts(snap, "compat.torch-arch") == ["pass"] and verdicts(snap, "compat.torch-driver") == ["pass"]
    snap.software.torch = TorchInfo(version="2.13.0+cpu")
    assert verdicts(snap, "compat.torch-cpu-only") == ["fail"]
    snap.software.cuda_toolkits = [Toolkit(path="/usr/local/cuda-13.2", version="13.2.51")]
    assert verdicts(snap, "compat.toolkit-driver") == ["warn"]


def test_nccl_wheel_for_another_cuda_major():
    snap = load(H100)
    snap.software.torch = TorchInfo(version="2.9.0+cu130", cuda="13.0")
    snap.software.nccl_version, snap.software.nccl_cuda_major = "2.21.5", 12
    assert verdicts(snap, "compat.nccl-cuda") == ["fail"]
    snap.software.nccl_cuda_major = 13
    assert verdicts(snap, "compat.nccl-cuda") == ["pass"]


def test_profile_host_size_and_rdma_nics():
    snap = load(H100, "h100-sxm-x8-ib-penny.topo-m.txt", "asus-esc8000a-e12-4x-rtx6000ada.lscpu.txt")
    assert verdicts(snap, "topo.rdma-nics", profile={"require_rdma": True}) == ["pass"]     # 8 IB ports, 8 GPUs
    snap.topology.nic_names = {k: v for k, v in snap.topology.nic_names.items() if k in ("NIC0", "NIC1", "NIC8")}
    snap.topology.devices = ["GPU%d" % i for i in range(8)] + ["NIC0", "NIC1", "NIC8"]
    assert verdicts(snap, "topo.rdma-nics", profile={"require_rdma": True}) == ["fail"]   # 2 IB ports for 8 GPUs
    snap.system.memory_total_mib = 16 * 1024
    assert verdicts(snap, "numa.host-size", profile={"min_memory_gib": 32, "min_cpu_cores": 8}) == ["pass", "warn"]


def test_skip_and_only():
    snap = load("a100-sxm4-80gb-mig.nvidia-smi-q.xml")
    ids = {f.id for f in evaluate(snap, skip=["gpu.persistence-off"])}
    assert "gpu.persistence-off" not in ids and "gpu.mig-enabled" in ids
    assert {f.area for f in evaluate(snap, only=["gpu"])} == {"gpu"}
    assert all(f.area != "gpu" for f in evaluate(snap, skip=["gpu"]))
