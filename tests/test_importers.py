"""Every corpus capture imports, and the values read match what the capture says (checked by reading it)."""
import pytest

from conftest import CORPUS, capture_files, corpus
from gpuprep.errors import BadInput
from gpuprep.parsers import import_files, import_text, sniff, read_capture

NOT_CAPTURES = {"ctk-1.17.5-vm.nvidia-container-toolkit-version.txt"}


@pytest.mark.parametrize("name", capture_files())
def test_every_capture_imports(name):
    snap = import_files([corpus(name)])
    assert snap.sources == [name]
    assert any([snap.gpus, snap.topology, snap.numa_nodes, snap.xids, snap.software.container_toolkit_version])


# file, GPU count, first GPU name, driver, CUDA, persistence of GPU0, ECC current of GPU0
QUERY_CASES = [
    ("h100-sxm-x8.nvidia-smi-q.txt", 8, "NVIDIA H100 80GB HBM3", "565.57.01", "12.7", True, True),
    ("a100-sxm4-x4.nvidia-smi-q.txt", 4, "NVIDIA A100-SXM4-80GB", "555.42.02", "12.5", None, True),
    ("v100-sxm2-x8-vm.nvidia-smi-q.txt", 8, "Tesla V100-SXM2-16GB", "550.127.05", "12.4", True, True),
    ("rtx3090-x2.nvidia-smi-q.txt", 2, "NVIDIA GeForce RTX 3090", "560.35.03", "12.6", None, None),
    ("a100-sxm4-80gb-mig.nvidia-smi-q.xml", 1, "NVIDIA A100-SXM4-80GB", "535.54.03", "12.2", False, True),
    ("t4-aws.nvidia-smi-q.xml", 1, "Tesla T4", "515.105.01", "11.7", None, True),
    ("dual-rtx-a5000.nvidia-smi-q.xml", 2, "NVIDIA RTX A5000", "590.44.01", "13.1", None, False),
    ("tesla-p4.nvidia-smi-q.xml", 1, "GRID P4-1Q", "513.46", "11.6", None, None),
    ("h100-sxm-x8.nvidia-smi.txt", 8, "NVIDIA H100 80GB HBM3", "565.57.01", "12.7", True, True),
    ("th2k-4x-v100-sxm2.nvidia-smi.txt", 4, "Tesla V100-SXM2...", "418.67", "10.1", False, True),
    ("a100-sxm4-40gb-x8-mig.nvidia-smi.txt", 8, "A100-SXM4-40GB", "450.80.02", "11.0", False, True),
    ("inspur-nf5280m6-2x-a100-pcie.nvidia-smi.txt", 2, None, "455.32.00", "11.1", None, None),
    ("gb10-dgx-spark-load.nvidia-smi.txt", 1, "NVIDIA GB10", "580.95.05", "13.0", True, None),
    ("dgx-a100-mig-disabled-pending.nvidia-smi.txt", 8, "A100-SXM4-40GB", "450.102.04", "11.0", True, True),
    ("a800-8gpu-mig-enabled-pending.nvidia-smi.txt", 8, "NVIDIA A800 80G...", "525.125.06", "12.0", True, True),
    ("geforce-rtx3090-fan-err.nvidia-smi.txt", 1, "NVIDIA GeForce ...", "515.65.01", "11.7", True, False),
    ("geforce-gtx980-fan-and-power-err.commented.nvidia-smi.txt", 2, "GeForce GTX 980", "375.66", None, False, None),
    ("geforce-wsl-docker-fan-err.indented.nvidia-smi.txt", 1, "NVIDIA GeForce ...", "474.64", "11.4", False, None),
]


def test_real_tables_read_with_their_unknowns_and_pending_modes():
    """Read by hand from each capture: what the table says, and nothing it does not."""
    (gb10,) = import_files([corpus("gb10-dgx-spark-load.nvidia-smi.txt")]).gpus
    assert (gb10.power_draw_w, gb10.power_limit_w, gb10.memory_total_mib, gb10.temperature_c) == (105.0, None, None, 74)
    assert not gb10.unreadable           # Not Supported and N/A are no value, not an error
    dgx = import_files([corpus("dgx-a100-mig-disabled-pending.nvidia-smi.txt")]).gpus
    assert [(g.mig_mode_current, g.mig_mode_pending) for g in dgx] == [(False, None)] * 7 + [(True, False)]
    a800 = import_files([corpus("a800-8gpu-mig-enabled-pending.nvidia-smi.txt")]).gpus
    assert (a800[7].mig_mode_current, a800[7].mig_mode_pending, a800[7].power_draw_w) == (False, True, 308.0)
    (rtx,) = import_files([corpus("geforce-rtx3090-fan-err.nvidia-smi.txt")]).gpus
    assert rtx.unreadable == ["fan = ERR!"] and (rtx.temperature_c, rtx.power_limit_w) == (79, 480.0)
    gtx = import_files([corpus("geforce-gtx980-fan-and-power-err.commented.nvidia-smi.txt")]).gpus
    assert gtx[1].unreadable == ["fan = ERR!", "power draw = ERR!"] and not gtx[0].unreadable
    blackwell = import_files([corpus("rtx-pro-6000-driver610-kmd-header-unknown-error.nvidia-smi.txt")]).gpus
    assert [g.index for g in blackwell] == [0, 2, 3, None] and blackwell[-1].pci_bus_id == "0000:34:00.0"


@pytest.mark.parametrize("name,count,gpu_name,driver,cuda,persistence,ecc", QUERY_CASES)
def test_gpu_values(name, count, gpu_name, driver, cuda, persistence, ecc):
    snap = import_files([corpus(name)])
    assert len(snap.gpus) == count
    gpu = snap.gpus[0]
    if gpu_name:
        assert gpu.name == gpu_name
    assert snap.software.driver_version == driver
    assert snap.software.cuda_driver_version == cuda
    if persistence is not None:
        assert gpu.persistence_mode is persistence
    if ecc is not None:
        assert gpu.ecc_mode_current is ecc
    assert [g.index for g in snap.gpus] == list(range(count))


def test_h100_details():
    gpu = import_files([corpus("h100-sxm-x8.nvidia-smi-q.txt")]).gpus[0]
    assert gpu.pci_bus_id == "00000000:18:00.0"
    assert gpu.uuid == "GPU-b42dd28e-ffdd-8720-1df0-98bd8cdc05b1"
    assert (gpu.pcie_gen_max, gpu.pcie_width_max, gpu.pcie_gen_host_max) == (5, 16, 5)
    assert (gpu.max_clock_graphics_mhz, gpu.app_clock_graphics_mhz, gpu.max_clock_mem_mhz) == (1980, 1980, 2619)
    assert (gpu.power_limit_w, gpu.power_min_limit_w, gpu.power_draw_w) == (700.0, 200.0, 100.89)
    assert gpu.remapped_rows_pending is False and gpu.remapped_rows_correctable == 0
    assert gpu.retired_pages_pending is None       # N/A on Hopper: unknown, not "no"
    assert gpu.clock_event_reasons == ["gpu_idle"]
    assert gpu.memory_total_mib == 81559


def test_v100_retired_pages_and_old_ecc_layout():
    gpu = import_files([corpus("v100-sxm2-x8-vm.nvidia-smi-q.txt")]).gpus[0]
    assert (gpu.retired_pages_single_bit, gpu.retired_pages_double_bit, gpu.retired_pages_pending) == (0, 0, False)
    assert gpu.remapped_rows_pending is None
    assert gpu.ecc_volatile_uncorrected == 0 and gpu.ecc_aggregate_corrected == 0
    assert gpu.temperature_slowdown_c == 87 and gpu.temperature_shutdown_c == 90


def test_consumer_gpu_unknowns_stay_unknown():
    gpu = import_files([corpus("rtx3090-x2.nvidia-smi-q.txt")]).gpus[0]
    assert gpu.ecc_mode_current is None
    assert gpu.app_clock_graphics_mhz is None and gpu.default_app_clock_graphics_mhz is None
    assert gpu.max_clock_graphics_mhz == 2100


def test_xml_mig_and_supported_clocks():
    gpu = import_files([corpus("a100-sxm4-80gb-mig.nvidia-smi-q.xml")]).gpus[0]
    assert gpu.mig_mode_current is True and gpu.mig_devices == 4
    assert gpu.supported_clocks[0].mem_mhz == 1593
    assert gpu.supported_clocks[0].graphics_mhz[0] == 1410
    assert gpu.clock_event_reasons == []
    a5000 = import_files([corpus("dual-rtx-a5000.nvidia-smi-q.xml")]).gpus[0]
    assert a5000.remapped_rows_pending is False and a5000.remapped_rows_failure is False
    assert len(a5000.supported_clocks) > 1


def test_throttle_reasons_old_xml_name():
    gpu = import_files([corpus("t4-aws.nvidia-smi-q.xml")]).gpus[0]
    assert gpu.clock_event_reasons is not None    # <clocks_throttle_reasons> (v11 DTD)
    p4 = import_files([corpus("tesla-p4.nvidia-smi-q.xml")]).gpus[0]
    assert p4.clock_event_reasons is None         # "N/A" in the vGPU guest


def test_page_retirement_subset():
    snap = import_files([corpus("azure-8gpu.nvidia-smi-q-d-PAGE_RETIREMENT.txt")])
    assert len(snap.gpus) == 8
    assert snap.gpus[0].pci_bus_id == "00000001:00:00.0"
    assert all(g.retired_pages_pending is False for g in snap.gpus)
    assert snap.gpus[0].name is None


def test_table_mig_and_ecc_column():
    snap = import_files([corpus("a100-sxm4-40gb-x8-mig.nvidia-smi.txt")])
    assert snap.gpus[0].mig_mode_current is False and snap.gpus[1].mig_mode_current is True
    assert snap.gpus[0].ecc_volatile_uncorrected == 0
    assert snap.gpus[1].ecc_mode_current is True and snap.gpus[1].ecc_volatile_uncorrected is None
    assert snap.gpus[0].memory_total_mib == 40537 and snap.gpus[0].power_limit_w == 400.0


def test_topology_new_format_with_nic_legend():
    topo = import_files([corpus("h100-sxm-x8-ib-penny.topo-m.txt")]).topology
    assert topo.gpus() == [f"GPU{i}" for i in range(8)]
    assert topo.matrix["GPU0"]["GPU7"] == "NV18"
    assert topo.matrix["GPU0"]["NIC0"] == "PIX" and topo.matrix["GPU0"]["NIC4"] == "SYS"
    assert topo.nic_names["NIC0"] == "mlx5_ib0" and topo.nic_names["NIC12"] == "mlx5_eth4"
    assert topo.cpu_affinity["GPU4"] == "56-111,168-223"
    assert topo.numa_affinity["GPU0"] == 0 and topo.numa_affinity["GPU7"] == 1


def test_topology_old_format_names_nics_in_header():
    topo = import_files([corpus("th2k-4x-v100-sxm2.topo-m.txt")]).topology
    assert topo.nics() == ["mlx5_0", "mlx5_1", "mlx5_2", "mlx5_3"]
    assert topo.matrix["GPU0"]["GPU1"] == "NV2" and topo.matrix["GPU0"]["GPU3"] == "NODE"
    assert topo.numa_affinity == {}
    assert topo.cpu_affinity["GPU0"] == "14-27"


def test_topology_matrix_only():
    topo = import_files([corpus("dual-gpu-pcie-phb.topo-m.txt")]).topology
    assert topo.matrix["GPU0"]["GPU1"] == "PHB"
    assert topo.numa_affinity["GPU0"] is None


def test_numactl_and_lscpu():
    numa = import_files([corpus("asus-esc8000a-e12-4x-rtx6000ada.numactl-H.txt")]).numa_nodes
    assert [(n.node, n.cpulist, n.memory_mib) for n in numa] == [(0, "0-31", 193129), (1, "32-63", 193477)]
    inspur = import_files([corpus("inspur-nf5280m3-2socket.numactl-H.txt")]).numa_nodes
    assert inspur[0].cpulist == "0-11,24-35"
    cpu = import_files([corpus("asus-esc8000a-e12-4x-rtx6000ada.lscpu.txt")]).system
    assert (cpu.cpu_model, cpu.sockets, cpu.cores, cpu.threads) == ("AMD EPYC 9374F 32-Core Processor", 2, 64, 64)
    power = import_files([corpus("princeton-traverse-ac922-4x-v100.lscpu.txt")])
    assert [n.node for n in power.numa_nodes] == [0, 8, 252, 253, 254, 255]
    assert power.numa_nodes[2].cpulist == ""


def test_nvlink_status():
    snap = import_files([corpus("a100-sxm4-80gb-x8.nvlink-status.txt")])
    assert len(snap.gpus) == 8 and len(snap.gpus[0].nvlinks) == 12
    assert all(l.active and l.speed_gbps == 25.0 for l in snap.gpus[0].nvlinks)
    single = import_files([corpus("azure-a100-sxm4-80gb.nvlink-status.txt")])   # tab-indented
    assert single.gpus[0].index == 7 and len(single.gpus[0].nvlinks) == 12


@pytest.mark.parametrize("name,codes,pci,time", [
    ("xid119-dell-xe9680.dmesg.txt", [119] * 5, "0000:9b:00", "Sun Feb 23 16:24:18 2025"),
    ("xid13-xid43.dmesg-iso.txt", [13] * 16 + [43], "0000:38:00", "2025-01-21T04:41:44,283302+00:00"),
    ("xid63-a100-sxm4-80gb.syslog-line.txt", [63], "0000:10:1c", None),
    ("xid64-xid94-imbue-h100.dmesg-lines.txt", [94, 64], "0000:0f:00", "2397166.983093"),
])
def test_kernel_logs(name, codes, pci, time):
    xids = import_files([corpus(name)]).xids
    assert [x.code for x in xids] == codes
    assert xids[0].pci == pci and xids[0].time == time


def test_gb200_kmsg_lines_keep_their_domains():
    xids = import_files([corpus("xid149-xid154-gb200.kmsg-lines.txt")]).xids
    assert {x.code for x in xids} == {149, 154}
    assert xids[0].pci == "0009:01:00"


def test_several_files_combine_into_one_host():
    snap = import_files([corpus("h100-sxm-x8.nvidia-smi.txt"), corpus("h100-sxm-x8.nvidia-smi-q.txt"),
                         corpus("h100-x8-stas.topo-m.txt"), corpus("xid119-dell-xe9680.dmesg.txt")])
    assert len(snap.gpus) == 8        # the table and -q describe the same GPUs: merged, not doubled
    assert snap.gpus[0].uuid == "GPU-b42dd28e-ffdd-8720-1df0-98bd8cdc05b1"
    assert snap.topology is not None and len(snap.xids) == 5
    assert len(snap.sources) == 4


NVML_FAILURES = [
    ("Failed to initialize NVML: Driver/library version mismatch\n", "version-mismatch", None),
    ("Failed to initialize NVML: Driver/library version mismatch\nNVML library version: 535.129\n",
     "version-mismatch", "535.129"),
    ("NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver. Make sure that the latest "
     "NVIDIA driver is installed and running.\n", "driver-not-loaded", None),
    ("Failed to initialize NVML: Insufficient Permissions\n", "no-permission", None),
    ("Failed to initialize NVML: Unknown Error\n", "error", None),
]


@pytest.mark.parametrize("text,reason,library", NVML_FAILURES)
def test_nvidia_smi_error_output(text, reason, library):
    snap = import_text(text, "smi.txt")
    assert snap.nvml.available is False and snap.nvml.reason == reason
    assert snap.nvml.library_version == library


def test_unknown_file_is_a_one_line_error(tmp_path):
    path = tmp_path / "notes.txt"
    path.write_text("hello\n")
    with pytest.raises(BadInput, match="notes.txt: unrecognised"):
        import_files([str(path)])


def test_truncated_xml_names_the_file(tmp_path):
    text = read_capture(corpus("t4-aws.nvidia-smi-q.xml"))
    path = tmp_path / "cut.xml"
    path.write_text(text[: len(text) // 2])
    with pytest.raises(BadInput, match="cut.xml: malformed nvidia-smi XML"):
        import_files([str(path)])


def test_sniffing_is_by_content_not_name(tmp_path):
    path = tmp_path / "whatever.log"
    path.write_text(read_capture(corpus("h100-x8-stas.topo-m.txt")))
    assert sniff(path.read_text()) == "nvidia-smi topo -m"


# Files in the corpus that are not captures gpuprep reads, each with why: an application's error output (the
# fabric tests read them as text), a single /sys value, and ibstat's own failure (refused by name: a tool that
# failed is not a tool that found nothing).
NOT_READ = {
    "gpu-burn-issue-133-h200-couldnt-init-cuda.gpu-burn.txt", "gpu-burn-issue-92-h100-hbm3-system-not-yet-initialized.gpu-burn.txt",
    "nccl-tests-issue-264-h100-cuda-802.nccl-tests.txt", "pytorch-issue-35710-cuda-802-bandwidthtest.cuda-error.txt",
    "pytorch-issue-35710-torch-802-traceback.cuda-error.txt", "azhpc-diagnostics-59-ibpanic-accelnet-device.ibstat.txt",
    "gpud-h100-mlx5_bond_0-port1.sysfs-rate.txt", "gpud-h100-mlx5_bond_0.sysfs-fw_ver.txt",
}
EVERY_CAPTURE = sorted(str(p.relative_to(CORPUS.parent)) for folder in (CORPUS, CORPUS.parent / "data" / "broken")
                       for p in folder.rglob("*") if p.suffix in (".txt", ".xml", ".json", ".log")
                       and p.name not in NOT_READ and p.name not in ("INDEX.md",) and "PROVENANCE" not in p.name)


@pytest.mark.parametrize("path", EVERY_CAPTURE)
def test_every_real_capture_in_the_repository_imports(path):
    """Nothing real is refused as a whole: a cut table is judged for what it shows (gpu.capture-incomplete)."""
    snap = import_files([str(CORPUS.parent / path)])
    assert snap.sources


def test_the_files_not_read_are_still_there():
    names = {p.name for p in CORPUS.rglob("*")}
    assert NOT_READ <= names
