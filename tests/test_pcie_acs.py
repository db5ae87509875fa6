"""topo.pcie-acs from `lspci -vvv` (tests/data/pci/PROVENANCE.md): the switch port above a GPU with ACS redirect
on warns, with it off passes, a redirecting port with no GPU below says nothing."""
import json

from conftest import REPO, run_cli
from gpuprep.parsers import import_files
import pytest

from gpuprep.parsers.lspci_vvv import (
    acs_ctl_argv, acs_ctl_flags, acs_ctl_word, bridges_above, is_rdma_nic, parse_lspci_vvv, parse_setpci_word,
    redirecting, switch_ports_above,
)
from gpuprep.rules import judge_all

DATA = REPO / "tests" / "data" / "pci"


def acs(name):
    return [f for f in judge_all(import_files([str(DATA / name)])) if f.id == "topo.pcie-acs"]


def test_the_port_above_the_gpu_and_its_acs_bits_are_read():
    devices = parse_lspci_vvv((DATA / "pex8747-titanx.lspci-vvv.txt").read_text())
    bridge, gpu = devices
    assert (bridge["bdf"], bridge["port"], bridge["secondary"], bridge["subordinate"]) == \
        ("0000:03:08.0", "Downstream Port", 4, 4)
    assert bridge["acs_ctl"]["SrcValid"] is False and redirecting(bridge) == []
    assert gpu["bdf"] == "0000:04:00.0" and gpu["class"] == "VGA compatible controller"
    assert bridges_above(devices, gpu["bdf"]) == [bridge]


def test_acs_off_above_the_gpu_passes():
    (found,) = acs("pex8747-titanx.lspci-vvv.txt")
    assert found.severity == "pass" and found.evidence == {"bridges": ["0000:03:08.0"]}


def test_acs_redirect_above_the_gpu_warns_with_nccls_remedy():
    (found,) = acs("pex8747-titanx-acs-redirect.lspci-vvv.txt")
    assert found.severity == "warn"
    assert found.evidence == {"bridges": {"0000:03:08.0": "ReqRedir+ CmpltRedir+"},
                              "below": {"0000:03:08.0": ["0000:04:00.0"]}}
    assert "ECAP_ACS+0x6.w=0000" in found.remedy and "-e system_tuning_acs_enabled=true" in found.remedy


def test_a_redirecting_port_with_no_gpu_below_is_not_judged():
    devices = parse_lspci_vvv((DATA / "n1sdp-pex8749-port.lspci-vvv.txt").read_text())
    assert devices[0]["bdf"] == "0000:02:08.0" and devices[0]["port"] == "Downstream Port"
    assert redirecting(devices[0]) == ["ReqRedir", "CmpltRedir"]
    assert acs("n1sdp-pex8749-port.lspci-vvv.txt") == []


def test_cli_reads_the_capture_and_keeps_it_in_the_snapshot():
    done = run_cli("check", "--from", str(DATA / "pex8747-titanx-acs-redirect.lspci-vvv.txt"), "--json")
    ids = {f["id"]: f["severity"] for f in json.loads(done.stdout)["findings"]}
    assert ids["topo.pcie-acs"] == "warn"
    snap = run_cli("snapshot", "--from", str(DATA / "pex8747-titanx.lspci-vvv.txt"))
    assert [d["bdf"] for d in json.loads(snap.stdout)["pci"]] == ["0000:03:08.0", "0000:04:00.0"]


def test_the_port_above_a_connectx_counts_as_the_port_above_a_gpu():
    devices = parse_lspci_vvv((DATA / "pex8747-titanx-cx6-acs-redirect.lspci-vvv.txt").read_text())
    ports = switch_ports_above(devices)
    assert {bdf: p["below"] for bdf, p in ports.items()} == {"0000:03:08.0": ["0000:04:00.0"],
                                                           "0000:03:10.0": ["0000:05:00.0"]}
    (found,) = acs("pex8747-titanx-cx6-acs-redirect.lspci-vvv.txt")
    assert found.severity == "warn" and sorted(found.evidence["bridges"]) == ["0000:03:08.0", "0000:03:10.0"]


def test_rdma_nics_are_infiniband_or_mellanox_ethernet():
    def device(cls, name):
        return {"class": cls, "name": name}
    assert is_rdma_nic(device("Ethernet controller", "Mellanox Technologies MT2894 Family [ConnectX-6 Lx]"))
    assert is_rdma_nic(device("Infiniband controller", "Mellanox Technologies MT28908 Family [ConnectX-6]"))
    assert not is_rdma_nic(device("Ethernet controller", "Red Hat, Inc. Virtio 1.0 network device (rev 01)"))
    assert not is_rdma_nic(device("VGA compatible controller", "NVIDIA Corporation GP102 [TITAN X] (rev a1)"))


def test_lspci_without_root_leaves_acs_unknown():
    devices = parse_lspci_vvv((DATA / "pex8747-titanx-not-root.lspci-vvv.txt").read_text())
    assert [d["denied"] for d in devices] == [True, True] and devices[0]["acs_ctl"] is None
    (found,) = acs("pex8747-titanx-not-root.lspci-vvv.txt")
    assert found.severity == "info" and "as root" in found.remedy


def test_the_acs_control_word_is_lspcis_acsctl_flags():
    # NVIDIA/nccl#304's broken-state line: SrcValid+ ReqRedir+ CmpltRedir+ UpstreamFwd+ (bits 0, 2, 3, 4)
    (bridge, _gpu) = parse_lspci_vvv((DATA / "pex8747-titanx-acs-redirect.lspci-vvv.txt").read_text())
    assert acs_ctl_word(bridge["acs_ctl"]) == 0x1d
    assert acs_ctl_flags(0x1d) == bridge["acs_ctl"]
    assert acs_ctl_word(acs_ctl_flags(0)) == 0 and redirecting({"acs_ctl": acs_ctl_flags(0x1d)}) == [
        "ReqRedir", "CmpltRedir"]


def test_setpci_reads_are_four_hex_digits_and_nothing_else():
    assert parse_setpci_word("001d\n") == 0x1d and parse_setpci_word("8086") == 0x8086
    # pciutils 3.9.0: a device that is not there prints nothing and exits 0
    for said in ("", "setpci: Warning: No devices selected for operation group 1.", "12345"):
        with pytest.raises(ValueError):
            parse_setpci_word(said)


@pytest.mark.parametrize("bdf", ["03:08.0", "0000:03:08.0; reboot", "0000:03:08.0 -s 0000:00:00.0", "0000:3:8.0"])
def test_only_a_full_pci_address_reaches_setpci_or_the_unit(bdf):
    with pytest.raises(ValueError):
        acs_ctl_argv("setpci", bdf)
    assert acs_ctl_argv("setpci", "0000:03:08.0", 0) == ["setpci", "-s", "0000:03:08.0", "ECAP_ACS+0x6.w=0000"]
