"""InfiniBand and RoCE ports: real ibstat, ibstatus, ibv_devinfo and ibdev2netdev captures (tests/corpus/rdma, with
PROVENANCE.tsv) judged with exact expected findings; the live probe on a /sys tree written with the words the
kernel prints there; NCCL_IB_HCA; NIC drift across a fleet of edited real snapshots."""
import copy

import pytest

from conftest import CORPUS, run_cli
from gpuprep import api
from gpuprep.parsers import import_files
from gpuprep.rules.drift import fleet_drift

RDMA = CORPUS / "rdma"

# capture -> the net.* findings it must give, as (id, severity, subject)
EXPECTED = {
    "gpud-h100-ndr-all-active.ibstat.txt": [("net.ib-port-down", "pass", "host"), ("net.ib-rate", "pass", "host")],
    "deepep-397-ndr-8x-all-active.ibv_devinfo.txt": [("net.ib-port-down", "pass", "host")],
    "gpud-a100-hdr-all-active.ibstatus.txt": [("net.ib-port-down", "pass", "host"), ("net.ib-rate", "pass", "host")],
    "gpud-pr482-ndr-port-polling.redacted.ibstat.txt": [("net.ib-port-down", "fail", "mlx5_10 port 1")],
    "network-operator-249-vf-down-linkup-hdr.ibstat.txt": [("net.ib-port-down", "fail", "mlx5_7 port 1")],
    "azhpc-diagnostics-59-hdr-vf-initializing.noindent.ibstat.txt": [("net.ib-port-down", "fail", "mlx5_ib0 port 1")],
    "deepep-38-ndr-ib-port-down.partial.ibv_devinfo.txt": [("net.ib-port-down", "fail", "mlx5_0 port 1")],
    "ucx-9908-hdr-active-and-disabled.ibv_devinfo-vv.txt": [("net.ib-port-down", "fail", "mlx5_1 port 1"),
                                                            ("net.ib-rate", "pass", "host")],
    "nccl-tests-128-hdr-one-port-disabled.partial.ibstat.txt": [("net.ib-port-down", "fail", "mlx5_1 port 1"),
                                                                ("net.ib-rate", "pass", "host")],
    "linux-rdma-ml-20200221-mlx4-ib-polling-eth-disabled.ibstat.txt": [
        ("net.ib-port-down", "fail", "mlx4_0 port 1"), ("net.ib-port-down", "warn", "mlx4_0 port 2")],
    # RoCE/Ethernet ports that are down only warn while NCCL_IB_HCA does not name them
    "gpud-h100-roce-two-ports-disabled.ibstat.txt": [("net.ib-port-down", "warn", "mlx5_11 port 1"),
                                                     ("net.ib-port-down", "warn", "mlx5_5 port 1"),
                                                     ("net.ib-rate", "pass", "host")],
    "gpud-h100-ndr-ib-active-eth-disabled.ibstat.txt": [("net.ib-port-down", "warn", "mlx5_2 port 1"),
                                                        ("net.ib-port-down", "warn", "mlx5_7 port 1"),
                                                        ("net.ib-port-down", "warn", "mlx5_8 port 1"),
                                                        ("net.ib-rate", "pass", "host")],
    "ib-sriov-cni-readme-cx4-ib0up-ib1down.ibdev2netdev.txt": [("net.ib-port-down", "warn", "mlx5_1 port 1 (ib1)")],
    "gpud-testdata-ibstat.47.0.h100.some.down.with.polling.1.ibstat.txt": [("net.ib-port-down", "warn", "mlx5_11 port 1"),
                                                                         ("net.ib-port-down", "warn", "mlx5_5 port 1"),
                                                                         ("net.ib-rate", "pass", "host")],
    "nccl-issue489-mlx5_1-down-disabled.ibstatus.txt": [("net.ib-port-down", "fail", "mlx5_1 port 1"),
                                                        ("net.ib-rate", "pass", "host")],
    # a ConnectX-7 InfiniBand port at 200 (NDR-capable): only a profile that asks for 400 calls it slow (below)
    "ucx-issue10868-partial-cx7-ib-rate200-cx6lx-down.ibstat.txt": [("net.ib-port-down", "warn", "mlx5_1 port 1"),
                                                                    ("net.ib-rate", "pass", "host")],
}


def net_findings(snap):
    return sorted((f.id, f.severity, f.subject) for f in api.check(facts=snap).findings if f.area == "net")


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_each_capture_gives_exactly_its_findings(name):
    assert net_findings(import_files([str(RDMA / name)])) == sorted(EXPECTED[name])


def test_every_capture_in_the_rdma_corpus_is_covered():
    assert {p.name for p in RDMA.glob("*.txt")} - set(EXPECTED) - set(PLACEMENT) == {
        "azhpc-diagnostics-59-ibpanic-accelnet-device.ibstat.txt", "ib-sriov-cni-readme-cx4-pf-active-vfs-down.ibdev2netdev-v.txt"}


def test_ibstat_failing_with_ibpanic_is_a_clear_bad_input():
    done = run_cli("check", "--from", str(RDMA / "azhpc-diagnostics-59-ibpanic-accelnet-device.ibstat.txt"))
    assert done.returncode == 2 and "unrecognised file" in done.stderr and "Traceback" not in done.stderr


def test_the_ports_are_read_with_their_part_firmware_and_rate():
    snap = import_files([str(RDMA / "gpud-h100-ndr-ib-active-eth-disabled.ibstat.txt")])
    ports = {(p.name, p.port): p for p in snap.rdma_devices}
    assert len(ports) == 12
    cx7 = ports[("mlx5_0", 1)]
    assert (cx7.model, cx7.firmware, cx7.rate_gbps, cx7.link_layer, cx7.state, cx7.phys_state) == \
        ("MT4129", "28.39.1002", 400.0, "InfiniBand", "Active", "LinkUp")
    verbose = import_files([str(RDMA / "ucx-9908-hdr-active-and-disabled.ibv_devinfo-vv.txt")])
    assert [(p.name, p.rate_gbps) for p in verbose.rdma_devices] == [("mlx5_0", 200.0), ("mlx5_1", None)]


def _all_active():
    return import_files([str(RDMA / "gpud-h100-ndr-all-active.ibstat.txt")])


def test_a_port_that_trained_slower_than_its_siblings_warns_and_the_profile_floor_fails():
    snap = _all_active()
    slow = next(p for p in snap.rdma_devices if p.name == "mlx5_4")
    slow.rate_gbps = 200.0
    assert ("net.ib-rate", "warn", "mlx5_4 port 1") in net_findings(snap)
    assert api.check(facts=snap).verdict != "fail"
    from gpuprep.rules import Context, judge_all
    strict = [f for f in judge_all(snap, Context(profile={"min_rdma_gbps": 400})) if f.id == "net.ib-rate"]
    assert [(f.severity, f.subject) for f in strict] == [("fail", "mlx5_4 port 1")]


@pytest.mark.parametrize("value, severity", [("mlx5", "pass"), ("=mlx5_0,mlx5_1", "pass"), ("mlx5_0:1,mlx5_2:1", "fail"),
                                             ("=mlx5", "fail"), ("^mlx5_3", None)])
def test_nccl_ib_hca_as_nccl_reads_it(value, severity):
    snap = _all_active()
    snap.env = {"NCCL_IB_HCA": value}
    found = [f.severity for f in api.check(facts=snap).findings if f.id == "net.nccl-ib-hca"]
    assert found == ([severity] if severity else [])


def test_a_down_port_that_nccl_ib_hca_names_fails_even_on_ethernet():
    snap = import_files([str(RDMA / "gpud-h100-roce-two-ports-disabled.ibstat.txt")])
    snap.env = {"NCCL_IB_HCA": "=mlx5_5"}
    assert ("net.ib-port-down", "fail", "mlx5_5 port 1") in net_findings(snap)


SYSFS = {   # what the kernel prints there (tests/corpus/rdma: ibstatus shows these words; rate and fw_ver are real files)
    "ports/1/state": "4: ACTIVE", "ports/1/phys_state": "5: LinkUp", "ports/1/link_layer": "Ethernet",
    "ports/1/gids/0": "0000:0000:0000:0000:0000:0000:0000:0000", "hca_type": "MT4129",
    "device/current_link_speed": "16.0 GT/s PCIe", "device/max_link_speed": "32.0 GT/s PCIe",
    "device/current_link_width": "16", "device/max_link_width": "16", "device/numa_node": "1",
}


def test_the_live_probe_reads_every_port_from_sys(tmp_path):
    from gpuprep.probe.system import Root, probe_rdma
    base = tmp_path / "sys/class/infiniband/mlx5_bond_0"
    files = dict(SYSFS, **{"ports/1/rate": (RDMA / "sysfs/gpud-h100-mlx5_bond_0-port1.sysfs-rate.txt").read_text(),
                           "fw_ver": (RDMA / "sysfs/gpud-h100-mlx5_bond_0.sysfs-fw_ver.txt").read_text()})
    for rel, text in files.items():
        (base / rel).parent.mkdir(parents=True, exist_ok=True)
        (base / rel).write_text(text if text.endswith("\n") else text + "\n")
    (port,) = probe_rdma(Root(str(tmp_path)))
    assert (port.name, port.port, port.rate_gbps, port.firmware, port.model, port.numa_node) == \
        ("mlx5_bond_0", 1, 200.0, "32.38.3056", "MT4129", 1)
    from gpuprep.snapshot import Snapshot
    found = net_findings(Snapshot(rdma_devices=[port]))
    assert ("net.nic-pcie", "warn", "mlx5_bond_0") in found and ("net.roce-gid", "warn", "mlx5_bond_0 port 1") in found


def test_a_nic_firmware_or_rate_unlike_the_fleets_drifts():
    base = _all_active()
    fleet = {}
    for i in range(4):
        snap = copy.deepcopy(base)
        snap.system.hostname = f"n{i}"
        fleet[f"n{i}"] = snap
    for port in fleet["n2"].rdma_devices:
        port.firmware = "28.39.1002"
    fleet["n3"].rdma_devices[0].rate_gbps = 200.0
    fleet["n1"].rdma_devices[1].model = "MT4123"                  # a ConnectX-6 where the others have a ConnectX-7
    drift = {d.fact.id: d.odd for d in fleet_drift(fleet)}
    assert drift == {"drift.nic-firmware": ["n2"], "drift.nic-rate": ["n3"], "drift.nic-model": ["n1"]}


def test_a_real_port_at_half_its_nics_rate_fails_the_profiles_floor():
    """ucx#10868: a ConnectX-7 (MT4129, NDR 400) InfiniBand port active at 200; a fleet that expects NDR says 400."""
    from gpuprep.rules import Context, judge_all
    snap = import_files([str(RDMA / "ucx-issue10868-partial-cx7-ib-rate200-cx6lx-down.ibstat.txt")])
    port = next(p for p in snap.rdma_devices if p.name == "mlx5_2")
    assert (port.model, port.rate_gbps, port.link_layer) == ("MT4129", 200.0, "InfiniBand")
    strict = [(f.severity, f.subject) for f in judge_all(snap, Context(profile={"min_rdma_gbps": 400}))
              if f.id == "net.ib-rate"]
    assert strict == [("fail", "mlx5_2 port 1")]


def _on_numa_nodes(gpu_nodes, nic_nodes, env=None):
    """The real ibstat of an 8-port NDR host (gpud), its ports placed on NUMA nodes as /sys would say, beside GPUs."""
    from gpuprep.snapshot import Gpu
    snap = import_files([str(RDMA / "gpud-h100-ndr-all-active.ibstat.txt")])
    for port in snap.rdma_devices:
        port.numa_node = nic_nodes.get(port.name, 0)
    snap.gpus = [Gpu(index=i, numa_node=n) for i, n in enumerate(gpu_nodes)]
    snap.env = env or {}
    return [f for f in net_findings(snap) if f[0] == "net.nic-placement"]


def test_a_nic_on_a_numa_node_without_gpus_is_named_from_sys():
    assert _on_numa_nodes([0] * 8, {}) == [("net.nic-placement", "pass", "host")]
    assert _on_numa_nodes([0] * 4 + [1] * 4, {"mlx5_4": 1}) == [("net.nic-placement", "pass", "host")]
    # NCCL picks the NICs near each GPU: a far one is information (a storage NIC) ...
    assert _on_numa_nodes([0] * 8, {"mlx5_4": 1}) == [("net.nic-placement", "info", "mlx5_4")]
    assert _on_numa_nodes([0] * 8, {"mlx5_4": 1}, {"NCCL_IB_HCA": "=mlx5_0,mlx5_1"}) == \
        [("net.nic-placement", "info", "mlx5_4")]
    # ... and a warning once NCCL will use it: NCCL_IB_HCA names it, or a GPU has no NIC on its NUMA node
    assert _on_numa_nodes([0] * 8, {"mlx5_4": 1}, {"NCCL_IB_HCA": "mlx5"}) == \
        [("net.nic-placement", "warn", "mlx5_4")]
    every_nic_far = {name: 1 for name in ("mlx5_0", "mlx5_1", "mlx5_4", "mlx5_5", "mlx5_6", "mlx5_7", "mlx5_8",
                                          "mlx5_9", "mlx5_bond_0")}
    assert {f[1] for f in _on_numa_nodes([0] * 8, every_nic_far)} == {"warn"}


# real topo -m captures -> the NIC-side placement findings (the GPU side is topo.gpu-nic-affinity)
PLACEMENT = {
    "h100-sxm-x8-ib-penny.topo-m.txt": [("net.nic-placement", "pass", "host")],
    "asus-esc8000a-e12-4x-rtx6000ada.topo-m.txt": [("net.nic-placement", "pass", "host")],
    "th2k-4x-v100-sxm2.topo-m.txt": [("net.nic-placement", "pass", "host")],
    # DGX A100 layout: the storage card (mlx5_8/9) is SYS to every GPU, each GPU pair has its own NIC
    "oyanghd-8x-a100-epyc7742-storage-nics-sys.topo-m.txt": [("net.nic-placement", "info", "mlx5_8"),
                                                             ("net.nic-placement", "info", "mlx5_9")],
    # every GPU on one socket, the only NIC on the other: NCCL's traffic crosses the CPU interconnect
    "horovod-288-4x-v100-one-socket-mlx5-sys.partial.topo-m.txt": [("net.nic-placement", "warn", "mlx5_0")],
}


@pytest.mark.parametrize("name", sorted(PLACEMENT))
def test_nic_placement_from_real_topo_captures(name):
    path = RDMA / name if (RDMA / name).exists() else CORPUS / name
    found = [f for f in net_findings(import_files([str(path)])) if f[0] == "net.nic-placement"]
    assert found == sorted(PLACEMENT[name])


def test_nic_placement_is_unknown_without_numa_nodes_or_gpus():
    # a VM's GPUs (NUMA -1) and a capture without GPUs say nothing about GPUDirect placement
    assert _on_numa_nodes([-1] * 8, {"mlx5_4": 1}) == []
    snap = import_files([str(RDMA / "gpud-h100-ndr-all-active.ibstat.txt")])
    assert [f for f in net_findings(snap) if f[0] == "net.nic-placement"] == []


def test_the_html_report_summarises_each_hosts_rdma_ports_escaped():
    """Per host, the ports a fleet reader compares (link layer, rate, part, firmware, how many are down); a node's
    own words are escaped like every other fact."""
    from gpuprep.report import render
    snap = import_files([str(RDMA / "gpud-h100-ndr-ib-active-eth-disabled.ibstat.txt")])
    page = render(api.check(facts=snap).document(), "html")
    assert ("8 InfiniBand port(s) at 400 Gb/s (MT4129, fw 28.39.1002); 3 Ethernet port(s) at 40 Gb/s (MT4125, "
            "fw 22.38.1002); 1 Ethernet port(s) at 100 Gb/s (MT4125, fw 22.38.1002); 3 not active") in page
    snap.rdma_devices[0].firmware = "<script>alert(1)</script>"
    page = render(api.check(facts=snap).document(), "html")
    assert "<script>alert(1)" not in page and "&lt;script&gt;alert(1)" in page


def test_an_ibstat_cut_inside_a_port_is_refused_not_a_port_fewer(tmp_path):
    """Cut after a `Port 1:` line, the port vanished from judgement, and a node drained for it was resumed."""
    from gpuprep.errors import BadInput
    from gpuprep.parsers import import_files
    whole = RDMA / "gpud-h100-ndr-all-active.ibstat.txt"
    lines = whole.read_text().splitlines(keepends=True)
    assert len(import_files([str(whole)]).rdma_devices) > 1
    port = max(i for i, line in enumerate(lines) if line.strip() == "Port 1:")
    for keep in (port + 1, port + 3):
        cut = tmp_path / f"cut{keep}.ibstat.txt"
        cut.write_text("".join(lines[:keep]))
        with pytest.raises(BadInput, match="cut short in CA"):
            import_files([str(cut)])


def test_two_rdma_captures_of_one_host_combine_port_by_port():
    """ibstatus with ibdev2netdev: only the first file's ports were kept and the second's fields dropped."""
    from gpuprep.parsers import import_files
    status = str(RDMA / "gpud-a100-hdr-all-active.ibstatus.txt")
    netdevs = str(RDMA / "ib-sriov-cni-readme-cx4-ib0up-ib1down.ibdev2netdev.txt")
    alone = import_files([status]).rdma_devices
    for order in ([status, netdevs], [netdevs, status]):
        ports = {(p.name, p.port): p for p in import_files(order).rdma_devices}
        assert len(ports) == len(alone)
        assert (ports[("mlx5_0", 1)].netdev, ports[("mlx5_0", 1)].netdev_up) == ("ib0", True)
        assert (ports[("mlx5_1", 1)].netdev, ports[("mlx5_1", 1)].netdev_up) == ("ib1", False)
        assert ports[("mlx5_0", 1)].rate_gbps == 200 and ports[("mlx5_1", 1)].link_layer == "InfiniBand"
