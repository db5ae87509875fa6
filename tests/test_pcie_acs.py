"""topo.pcie-acs from `lspci -vvv` (tests/data/pci/PROVENANCE.md): the switch port above a GPU with ACS redirect
on warns, with it off passes, a redirecting port with no GPU below says nothing."""
import json

from conftest import REPO, run_cli
from gpuprep.importers import import_files
from gpuprep.module_utils.gpuprep_lspci import bridges_above, parse_lspci_vvv, redirecting
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
    assert found.evidence == {"bridges": {"0000:03:08.0": "ReqRedir+ CmpltRedir+"}}
    assert "ECAP_ACS+0x6.w=0000" in found.remedy


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
