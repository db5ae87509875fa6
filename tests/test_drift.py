"""Drift rules on snapshots made from a real capture: what counts as different, and what does not."""
import copy

import pytest

from conftest import corpus
from gpuprep.parsers import import_files
from gpuprep.rules.drift import drift_findings, fleet_drift


@pytest.fixture(scope="module")
def h100():
    return import_files([corpus("h100-sxm-x8.nvidia-smi-q.txt")])


def fleet(base, count=4, **edits):
    """`count` copies of one host; edits: host index -> function changing that copy."""
    out = {}
    for i in range(count):
        snap = copy.deepcopy(base)
        snap.system.hostname = f"n{i}"
        snap.system.kernel_cmdline = f"BOOT_IMAGE=/vmlinuz-6.8 root=UUID=000{i} ro iommu=pt"
        snap.env = {"NCCL_IB_HCA": "mlx5", "OMP_NUM_THREADS": "8"}
        edits.get(f"n{i}", lambda s: None)(snap)
        out[f"n{i}"] = snap
    return out


def drifting(snapshots, baseline=None):
    return {d.fact.id: d.odd for d in fleet_drift(snapshots, baseline)}


def test_identical_hosts_do_not_drift_even_with_their_own_root_disk(h100):
    assert drifting(fleet(h100)) == {}


def test_a_kernel_parameter_that_matters_drifts(h100):
    def no_iommu(snap):
        snap.system.kernel_cmdline = "BOOT_IMAGE=/vmlinuz-6.8 root=UUID=0003 ro"
    assert drifting(fleet(h100, n3=no_iommu)) == {"drift.kernel-cmdline": ["n3"]}


def test_unknown_is_not_drift(h100):
    def unknown(snap):
        snap.software.driver_version = None
        snap.gpus[0].vbios_version = None           # the other seven still tell
        snap.env = None
    assert drifting(fleet(h100, n1=unknown)) == {}


def test_nccl_variable_fails_and_omp_warns(h100):
    def other_hca(snap):
        snap.env["NCCL_IB_HCA"] = "mlx5_0"
    def more_threads(snap):
        snap.env["OMP_NUM_THREADS"] = "16"
    found = {f.id: (f.severity, f.subject) for f in drift_findings(fleet_drift(fleet(h100, n1=other_hca, n2=more_threads)))}
    assert found == {"drift.nccl-env": ("fail", "n1"), "drift.omp-env": ("warn", "n2")}


def test_memory_a_few_mib_apart_is_the_same_and_a_missing_dimm_is_not(h100):
    def few_mib(snap):
        snap.system.memory_total_mib = 2063000 + 40
    def missing_dimm(snap):
        snap.system.memory_total_mib = 2063000 - 65536
    def base(snap):
        snap.system.memory_total_mib = 2063000
    snaps = fleet(h100, n0=base, n1=few_mib, n2=base, n3=missing_dimm)
    assert drifting(snaps) == {"drift.memory": ["n3"]}


def test_an_even_split_names_every_group_without_a_majority(h100):
    def other(snap):
        snap.software.nccl_version = "2.21.5"
    def same(snap):
        snap.software.nccl_version = "2.23.4"
    snaps = fleet(h100, n0=same, n1=same, n2=other, n3=other)
    [finding] = drift_findings(fleet_drift(snaps))
    assert finding.subject == "fleet" and finding.severity == "fail"
    assert finding.evidence["groups"] == {"2.21.5": ["n2", "n3"], "2.23.4": ["n0", "n1"]}


def test_a_baseline_outside_the_fleet_makes_every_different_host_odd(h100):
    golden = copy.deepcopy(h100)
    golden.software.driver_version = "570.86.15"
    golden.env = {"NCCL_IB_HCA": "mlx5", "OMP_NUM_THREADS": "8"}
    assert drifting(fleet(h100), golden)["drift.driver"] == ["n0", "n1", "n2", "n3"]


def test_one_host_against_its_own_known_good_snapshot(tmp_path):
    """NHC's nhc-genconf idea: `snapshot -o baseline.json` on a good node, later `check --baseline baseline.json`
    says what changed on this host since, with the fleet drift's ids."""
    import json
    from conftest import corpus, run_cli
    good = run_cli("snapshot", "--from", corpus("h100-sxm-x8.nvidia-smi-q.txt"))
    baseline = tmp_path / "baseline.json"
    baseline.write_text(good.stdout)
    now = json.loads(good.stdout)
    now["software"]["driver_version"] = "550.54.15"           # the driver moved since
    now["gpus"][3]["pcie_width_max"] = 8                       # and a GPU's link trained narrower
    now["gpus"] = now["gpus"][:7]                               # and a GPU is gone
    changed = tmp_path / "now.json"
    changed.write_text(json.dumps(now))
    done = run_cli("check", "--from", str(changed), "--baseline", str(baseline), "--json")
    doc = json.loads(done.stdout)
    drift = {f["id"]: f for f in doc["findings"] if f["id"].startswith("drift.")}
    assert {"drift.driver", "drift.gpu-count"} <= set(drift), sorted(drift)
    assert "differs from the baseline's 565.57.01" in drift["drift.driver"]["title"]
    same = json.loads(run_cli("check", "--from", str(baseline), "--baseline", str(baseline), "--json").stdout)
    assert not [f for f in same["findings"] if f["id"].startswith("drift.")]


def test_what_the_hardware_defines_is_compared_among_hosts_of_the_same_gpu_model(h100):
    """Issue 46: three 8-GPU SXM hosts and two 2-GPU H100 NVL (PCIe) hosts of one fleet. Their GPU counts, power
    limits and PCIe links differ by SKU: no drift within either model. An SXM host that lost a GPU differs from
    the other SXM hosts, and is named with its peers' count; the NVL hosts are not compared with the SXM ones."""
    nvl = import_files([corpus("h100-nvl-x2.nvidia-smi-q.txt")])

    def lost_a_gpu(snap):
        snap.gpus = snap.gpus[:7]
    mixed = {**fleet(h100, 3, n2=lost_a_gpu), **{f"p{i}": s for i, s in enumerate(fleet(nvl, 2).values())}}
    for name, snap in mixed.items():
        snap.system.hostname = name
        snap.software = copy.deepcopy(h100.software)      # one driver fleet-wide: the captures' two differ
    found = {d.fact.id: (d.sku, d.odd) for d in fleet_drift(mixed)}
    assert found.pop("drift.gpu-count") == ("NVIDIA H100 80GB HBM3", ["n2"])
    assert set(found) == {"drift.gpu-model"} and found["drift.gpu-model"][1] == ["p0", "p1"]
    (count,) = [f for f in drift_findings(fleet_drift(mixed)) if f.id == "drift.gpu-count"]
    assert count.subject == "n2" and "differs from the fleet's 8 (2 of 3 NVIDIA H100 80GB HBM3 host(s))" in count.title


def test_an_sxm_host_with_a_link_down_drifts_from_its_peers_and_a_pcie_host_without_links_does_not(h100):
    from gpuprep.snapshot import NvLink
    nvl = import_files([corpus("h100-nvl-x2.nvidia-smi-q.txt")])

    def links(up):
        def edit(snap):
            for gpu in snap.gpus:
                gpu.nvlinks = [NvLink(link=i, active=i < up) for i in range(18)]
        return edit

    def one_down(snap):
        links(18)(snap)
        snap.gpus[3].nvlinks[5].active = False
    sxm = fleet(h100, 3, n0=links(18), n1=links(18), n2=one_down)
    pcie = {f"p{i}": s for i, s in enumerate(fleet(nvl, 2, n0=lambda s: None).values())}
    for name, snap in pcie.items():
        snap.system.hostname = name
        for gpu in snap.gpus:
            gpu.nvlinks = []          # no bridge: what the SKU allows, not a fault
    found = {d.fact.id: (d.sku, d.odd) for d in fleet_drift({**sxm, **pcie})}
    assert found["drift.nvlink"] == ("NVIDIA H100 80GB HBM3", ["n2"])


# -- counts judged by peers (issue 46): Xid events and corrected ECC errors per GPU model and inventory group -------

def _with_xids(h100, count_of):
    """Hosts n0..: the H100 capture with the kernel log of a real capture (Xid 13 sixteen times) where
    count_of(host) says so."""
    flood = import_files([corpus("h100-sxm-x8.nvidia-smi-q.txt"), corpus("xid13-xid43.dmesg-iso.txt")]).xids
    assert len([x for x in flood if x.code == 13]) >= 16
    out = {}
    for name, snap in fleet(h100, len(count_of)).items():
        snap.xids = copy.deepcopy(flood) if count_of[name] else []
        out[name] = snap
    return out


def test_a_host_logging_far_more_xids_than_its_peers_is_named():
    from gpuprep.rules.peers import Peer, peer_counts
    h100 = import_files([corpus("h100-sxm-x8.nvidia-smi-q.txt")])
    hosts = _with_xids(h100, {"n0": 0, "n1": 0, "n2": 1, "n3": 0, "n4": 0})
    found = peer_counts({h: Peer(s) for h, s in hosts.items()})
    assert [(f.id, f.subject) for f in found] == [("drift.xid-count", "n2")]
    assert found[0].evidence["peers_median"] == 0 and "NVIDIA H100 80GB HBM3 hosts of the fleet" in found[0].title
    assert peer_counts({h: Peer(s) for h, s in _with_xids(h100, {f"n{i}": 0 for i in range(5)}).items()}) == []


def test_a_flood_a_whole_rack_shares_is_usual_there_and_one_hosts_flood_in_another_rack_is_not():
    """NVSentinel#1748: Xid floods normal for one rack must not page for it; the same flood on one host of a quiet
    rack is named, against that rack's hosts."""
    from gpuprep.rules.peers import Peer, peer_counts
    h100 = import_files([corpus("h100-sxm-x8.nvidia-smi-q.txt")])
    counts = {"n0": 1, "n1": 1, "n2": 1, "n3": 1, "n4": 0, "n5": 0, "n6": 0, "n7": 1}
    hosts = _with_xids(h100, counts)
    racks = {h: ["rack_a"] if int(h[1]) < 4 else ["rack_b"] for h in hosts}
    found = peer_counts({h: Peer(s, racks[h]) for h, s in hosts.items()})
    assert [(f.subject, f.evidence["compared"]) for f in found] == \
        [("n7", "NVIDIA H100 80GB HBM3 hosts of group rack_b")]
    ungrouped = peer_counts({h: Peer(s) for h, s in hosts.items()})
    assert ungrouped == []            # fleet-wide, half the hosts flood: no host stands out


def test_too_few_peers_or_an_unknown_count_name_nothing():
    from gpuprep.rules.peers import Peer, peer_counts
    h100 = import_files([corpus("h100-sxm-x8.nvidia-smi-q.txt")])
    hosts = _with_xids(h100, {"n0": 0, "n1": 0, "n2": 1})
    assert peer_counts({h: Peer(s) for h, s in hosts.items()}) == []          # two peers cannot say what is usual
    hosts = _with_xids(h100, {"n0": 0, "n1": 0, "n2": 1, "n3": 0, "n4": 0})
    for name in ("n0", "n1", "n3"):
        hosts[name].xids = None                                              # no kernel log read: not a zero
    assert peer_counts({h: Peer(s) for h, s in hosts.items()}) == []


def test_the_inventory_gives_each_host_the_groups_that_list_it(tmp_path):
    from gpuprep.ansible.runner import read_inventory
    inventory = tmp_path / "hosts.ini"
    inventory.write_text("[rack_a]\nn1\nn2\n[rack_b]\nn3\n[h100:children]\nrack_a\nrack_b\n[spare]\nn2\n[solo]\n")
    hosts, groups = read_inventory(str(inventory), None)
    assert hosts == ["n1", "n2", "n3"]
    assert groups == {"n1": ["rack_a"], "n2": ["rack_a", "spare"], "n3": ["rack_b"]}
