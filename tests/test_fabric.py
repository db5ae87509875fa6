"""Fabric Manager and DCGM from real captures (tests/corpus/fabric, provenance in its PROVENANCE.tsv): each with the
exact fabric.* / dcgm.* findings it must give; the live probes guarded (a missing tool is unknown or information,
never a crash or a wrong fail); DCGM's live path through a stand-in `dcgmi` that prints a real report; CUDA error
802 in a burn-in's output named as the Fabric Manager problem it is."""
import json
import os
import stat

import pytest

from conftest import CORPUS, run_cli
from gpuprep import api
from gpuprep.parsers import import_files
from gpuprep.rules import evaluate

FABRIC = CORPUS / "fabric"

EXPECTED = {   # capture -> its findings of the fabric and dcgm areas, as (id, severity, subject)
    "bottlerocket-pr3873-p4d-a100-fm-active-running.systemctl-status.txt": [("fabric.manager", "pass", "host")],
    "bottlerocket-kernel-kit-pr142-blackwell-fm-active-running-nvlsm.systemctl-status.txt": [
        ("fabric.manager", "pass", "host")],
    "akash-website-pr632-fm-version-mismatch-550.systemctl-status.txt": [("fabric.manager", "fail", "host"),
                                                                        ("fabric.manager-version", "fail", "host")],
    "gpu-operator-issue-544-fm-version-mismatch-530.fabricmanager-journal.txt": [
        ("fabric.manager-version", "fail", "host")],
    "gpu-driver-container-issue-735-fm-590-vs-driver-580-mismatch.fabricmanager-log.txt": [
        ("fabric.manager-version", "fail", "host")],
    "nvtrust-issue-128-h20-fm-healthy-start-then-restart.journalctl.txt": [("fabric.manager", "fail", "host")],
    "cube-studio-issue-29-fm-nv-warn-nothing-to-do.journalctl.txt": [("fabric.manager", "warn", "host")],
    # its one error is an NVSwitch SXid: judged as gpu.sxid (tests/test_broken_captures.py), not twice
    "gpud-testdata-8gpu-nvswitch-fm-runtime-nonfatal-error.fabricmanager-log.txt": [],
    "jear-median-nv-fabricmanager-version-450.nv-fabricmanager-version.txt": [],     # a version alone judges nothing
    "nccl-tests-issue-264-h100-diag-r3-failed-cuinit-802.dcgmi-diag.txt": [("dcgm.diag", "fail", "DCGM GPU Memory (GPUs All)")],
    "dcgm-issue-253-l40s-diag-4.2.3-pcie-fail.dcgmi-diag.txt": [("dcgm.diag", "fail", "DCGM pcie")],
    "dcgm-issue-253-b200-diag-r2-4.4.1-pcie-fail.dcgmi-diag.txt": [("dcgm.diag", "fail", "DCGM pcie")],
    "virtualclient-t4-diag-r3-pass.dcgmi-diag.json": [("dcgm.diag", "pass", "host")],
    # DCGM 4.x's document ("DCGM Diagnostic", a result per entity, a test_summary): GB10, persistence mode off
    "glimmer-burnin-gb10-level1-dcgm423.dcgmi-diag.json": [("dcgm.diag", "fail", "DCGM software (GPUs 0)")],
    "glimmer-burnin-gb10-level2-plugins-allowed-dcgm452.dcgmi-diag.json": [("dcgm.diag", "fail", "DCGM software (GPUs 0)")],
    "virtualclient-health-check-healthy.dcgmi-health.json": [("dcgm.health", "pass", "host")],
    "dcgm-issue-263-8gpu-health-check-healthy-despite-recovery-reset.dcgmi-health.json": [("dcgm.health", "pass", "host")],
    "nvidia-dcgm-userguide-feature-overview-health-warning-pcie-inforom.dcgmi-health.txt": [("dcgm.health", "warn", "host")],
    # lspci says the host has NVSwitches; alone it says nothing of Fabric Manager (below, with its state)
    "nvidia-fm-guide-hgx-a100-6-nvswitches.lspci.txt": [],
    "nvidia-fm-guide-hgx-h100-4-nvswitches.lspci.txt": [],
    "nvidia-fm-guide-hgx-b200-cx7-bridge-no-pcie-nvswitch.lspci.txt": [],
}


def judged(snap, areas=("fabric", "dcgm")):
    return sorted((f.id, f.severity, f.subject) for f in api.check(facts=snap).findings if f.area in areas)


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_each_capture_gives_exactly_its_findings(name):
    assert judged(import_files([str(FABRIC / name)])) == sorted(EXPECTED[name])


def test_the_version_mismatch_is_read_from_fabric_managers_own_words():
    fm = import_files([str(FABRIC / "akash-website-pr632-fm-version-mismatch-550.systemctl-status.txt")]).fabric_manager
    assert (fm.state, fm.mismatch) == ("failed", ["550.127.05", "550.120"])


def test_fabric_manager_errors_other_than_sxids_warn():
    from gpuprep.parsers.fabricmanager import read_fabric_manager
    from gpuprep.snapshot import Snapshot
    log = (FABRIC / "gpud-testdata-8gpu-nvswitch-fm-runtime-nonfatal-error.fabricmanager-log.txt").read_text()
    assert judged(import_files([str(FABRIC / "gpud-testdata-8gpu-nvswitch-fm-runtime-nonfatal-error."
                                            "fabricmanager-log.txt")]), ("gpu",)) == [("gpu.sxid", "warn", "PCI 0000:86:00")]
    # the same log with its SXid line made a FATAL of another kind: that one is Fabric Manager's own
    edited = log.replace("[ERROR] [tid 12727] detected NVSwitch non-fatal error 12028",
                         "[FATAL] [tid 12727] failed to open NVSwitch device")
    snap = Snapshot(fabric_manager=read_fabric_manager(edited))
    assert judged(snap) == [("fabric.manager-errors", "fail", "host")]


def test_nv_fabricmanager_version_is_compared_with_the_driver():
    snap = import_files([str(FABRIC / "jear-median-nv-fabricmanager-version-450.nv-fabricmanager-version.txt")])
    assert snap.fabric_manager.version == "450.102.04"
    snap.software.driver_version = "450.102.04"
    assert judged(snap) == [("fabric.manager-version", "pass", "host")]
    snap.software.driver_version = "450.119.04"
    assert judged(snap) == [("fabric.manager-version", "fail", "host")]


def test_an_nvswitch_system_whose_gpus_wait_for_the_fabric_and_has_no_fabric_manager_fails(tmp_path):
    snap = import_files([str(FABRIC / "gpu-operator-issue-2511-fabric-in-progress-580.nvidia-smi-q-fabric.txt")])
    assert ("fabric.manager", "fail", "host") not in judged(snap)        # unknown is not absent
    snap.fabric_manager.installed = False                                # systemd said: no such unit
    assert ("fabric.manager", "fail", "host") in judged(snap)


def test_dcgm_messages_are_dcgms_own_words_unwrapped():
    snap = import_files([str(FABRIC / "nccl-tests-issue-264-h100-diag-r3-failed-cuinit-802.dcgmi-diag.txt")])
    (failed,) = [t for t in snap.dcgm.tests if t.status == "Fail"]
    assert snap.dcgm.version == "3.3.8" and failed.name == "GPU Memory"
    assert "Unable to initialize CUDA library: 'system not yet initialized'" in failed.messages[0]


def _stand_in(directory, name, script):
    path = directory / name
    path.write_text("#!/bin/sh\n" + script)
    path.chmod(path.stat().st_mode | stat.S_IEXEC)


def test_check_deep_runs_dcgmi_where_it_is_installed(tmp_path, monkeypatch):
    """A stand-in dcgmi (a true boundary: DCGM's CLI) answers with a real `dcgmi diag -r 3 -j` report."""
    from gpuprep.probe.dcgm import probe_dcgm
    report = FABRIC / "virtualclient-t4-diag-r3-pass.dcgmi-diag.json"
    health = FABRIC / "virtualclient-health-check-healthy.dcgmi-health.json"
    _stand_in(tmp_path, "dcgmi", f'case "$1" in diag) cat "{report}";; health) cat "{health}";; esac\n')
    monkeypatch.setenv("PATH", f"{tmp_path}{os.pathsep}{os.environ['PATH']}")
    dcgm = probe_dcgm(level=1)
    assert dcgm.level == 1 and len(dcgm.tests) == 16 and dcgm.health == "Healthy" and dcgm.missing is None


def test_dcgm_health_with_no_watches_enabled_is_unknown_never_healthy(tmp_path, monkeypatch):
    """Where no health watch was ever set, `dcgmi health -c` watches nothing: dcgmi prints DCGM's own error (dcgmi
    Health.cpp CheckWatches; quoted in NVIDIA/DCGM issue 176) on stdout, even with -j, and exits 253
    (DCGM_ST_GENERIC_ERROR). It was dropped silently, and a clean diag read as a healthy node."""
    from gpuprep.probe.dcgm import probe_dcgm
    from gpuprep.snapshot import Snapshot
    report = FABRIC / "virtualclient-t4-diag-r3-pass.dcgmi-diag.json"
    _stand_in(tmp_path, "dcgmi", f'case "$1 $2" in "diag -r") cat "{report}";;\n'
                                 '"health -c") echo "Error: Health watches not enabled. Please enable watches. "; exit 253;;\n'
                                 '*) echo "unexpected arguments: $*" >&2; exit 254;; esac\n')
    monkeypatch.setenv("PATH", f"{tmp_path}{os.pathsep}{os.environ['PATH']}")
    snap = Snapshot(dcgm=probe_dcgm(level=1))
    assert snap.dcgm.health is None and "Health watches not enabled" in snap.dcgm.health_failed
    (finding,) = [f for f in evaluate(snap) if f.id == "dcgm.health"]
    assert finding.severity == "warn" and "dcgmi health -s a" in finding.remedy


def test_a_host_without_dcgm_is_information_never_a_failure(tmp_path, monkeypatch):
    from gpuprep.probe.dcgm import probe_dcgm
    from gpuprep.snapshot import Snapshot
    monkeypatch.setenv("PATH", str(tmp_path))
    snap = Snapshot(dcgm=probe_dcgm(level=1))
    assert judged(snap) == [("dcgm.diag", "info", "host")]
    _stand_in(tmp_path, "dcgmi", 'echo "Error: unable to establish a connection to the specified host: localhost" >&2\n'
                                 'exit 255\n')
    snap = Snapshot(dcgm=probe_dcgm(level=1))      # installed, and failing: a warning, not "nothing found"
    assert "unable to establish a connection" in snap.dcgm.failed and judged(snap) == [("dcgm.diag", "warn", "host")]


@pytest.mark.parametrize("script, words", [
    # DCGM_ST_NVVS_ERROR with a partial report whose two tests passed: it read "2 tests passed"
    ('cat "{partial}"; exit 226\n', "exited 226 (DCGM_ST_NVVS_ERROR"),
    ('exit 226\n', "answered no report (exit 226)"),
    ('echo "Segmentation fault"; echo "%%%%garbage" >&2; exit 139\n', "answered no report (%%%%garbage)"),
])
def test_a_dcgmi_that_fails_is_a_warning_never_a_pass(tmp_path, monkeypatch, script, words):
    from gpuprep.probe.dcgm import probe_dcgm
    from gpuprep.snapshot import Snapshot
    partial = tmp_path / "partial.json"
    report = json.loads((FABRIC / "virtualclient-t4-diag-r3-pass.dcgmi-diag.json").read_text())
    partial.write_text(json.dumps(report))
    _stand_in(tmp_path, "dcgmi", script.format(partial=partial))
    monkeypatch.setenv("PATH", f"{tmp_path}{os.pathsep}{os.environ['PATH']}")
    snap = Snapshot(dcgm=probe_dcgm(level=1))
    assert words in snap.dcgm.failed
    found = judged(snap)
    assert ("dcgm.diag", "warn", "host") in found and not [f for f in found if f[1] == "pass"]


def test_a_dcgmi_that_hangs_is_a_warning(tmp_path, monkeypatch):
    import gpuprep.probe.dcgm as probe
    from gpuprep.snapshot import Snapshot
    _stand_in(tmp_path, "dcgmi", "sleep 30\n")
    monkeypatch.setenv("PATH", f"{tmp_path}{os.pathsep}{os.environ['PATH']}")
    monkeypatch.setitem(probe.LEVEL_SECONDS, 1, 1)
    snap = Snapshot(dcgm=probe.probe_dcgm(level=1))
    assert "did not finish in 1 s" in snap.dcgm.failed and judged(snap) == [("dcgm.diag", "warn", "host")]


def test_a_dcgmi_diag_table_cut_before_its_last_block_is_never_a_pass(tmp_path):
    """A real failing table (NCCL tests issue 264: GPU Memory fails) cut before its Hardware block showed only
    passing tests, and read as "11 tests passed"."""
    from gpuprep.parsers import import_files
    from gpuprep.rules import evaluate
    whole = FABRIC / "nccl-tests-issue-264-h100-diag-r3-failed-cuinit-802.dcgmi-diag.txt"
    lines = whole.read_text().splitlines(keepends=True)
    assert "fail" in [f.severity for f in evaluate(import_files([str(whole)])) if f.id == "dcgm.diag"]
    hardware = next(i for i, line in enumerate(lines) if "Hardware" in line)
    for keep in (hardware - 5, hardware, hardware + 1):
        cut = tmp_path / f"cut{keep}.txt"
        cut.write_text("".join(lines[:keep]))
        severities = [f.severity for f in evaluate(import_files([str(cut)])) if f.id == "dcgm.diag"]
        assert "pass" not in severities and "warn" in severities, keep


def test_the_fabric_manager_probe_without_systemd_or_fabric_manager_knows_nothing(tmp_path, monkeypatch):
    from gpuprep.probe.fabric import probe_fabric_manager
    monkeypatch.setenv("PATH", str(tmp_path))
    fm = probe_fabric_manager(root=str(tmp_path))
    assert (fm.nvswitch, fm.installed, fm.state, fm.version, fm.mismatch) == (None, None, None, None, None)


@pytest.mark.parametrize("name", ["gpu-burn-issue-133-h200-couldnt-init-cuda.gpu-burn.txt",
                                  "gpu-burn-issue-92-h100-hbm3-system-not-yet-initialized.gpu-burn.txt",
                                  "nccl-tests-issue-264-h100-cuda-802.nccl-tests.txt",
                                  "pytorch-issue-35710-cuda-802-bandwidthtest.cuda-error.txt",
                                  "pytorch-issue-35710-torch-802-traceback.cuda-error.txt"])
def test_cuda_error_802_in_a_burnins_output_names_fabric_manager(name):
    from gpuprep.burnin import setup_errors
    (meaning,) = setup_errors((FABRIC / name).read_text())
    assert meaning.startswith("CUDA error 802") and "fabricmanager" in meaning


def test_dcgm_level_is_checked():
    done = run_cli("check", "--deep", "--dcgm-level", "5")
    assert done.returncode == 2 and "--dcgm-level" in done.stderr


@pytest.mark.parametrize("name, title", [
    ("dra-driver-nvidia-gpu-issue-626-fabric-completed-health-unhealthy.nvidia-smi-q-fabric.txt", "health is Unhealthy"),
    ("azhpc-images-pr506-fabric-completed-insufficient-resources.nvidia-smi-q-fabric.txt", "Insufficient Resources"),
    ("gpu-operator-issue-2511-fabric-in-progress-580.nvidia-smi-q-fabric.txt", "state In Progress"),
])
def test_each_gpus_fabric_registration_and_health_from_nvidia_smi(name, title):
    """`nvidia-smi -q` Fabric sections, one pasted as a `grep -C3` of it (its command line and '--' kept)."""
    (finding,) = [f for f in api.check([str(FABRIC / name)]).findings if f.id == "gpu.fabric"]
    assert finding.severity == "fail" and title in finding.title


def test_dcgm_health_as_a_table_keeps_each_incident_whole():
    """The user guide's `dcgmi health -c` table: each incident's message joined across the rows it wraps over."""
    dcgm = import_files([str(FABRIC / "nvidia-dcgm-userguide-feature-overview-health-warning-pcie-inforom."
                                      "dcgmi-health.txt")]).dcgm
    assert dcgm.health == "Warning"
    assert dcgm.incidents == ["PCIe system: Warning - Detected more than 8 PCIe replays per minute for GPU 0: 13",
                              "InfoROM system: Warning - A corrupt InfoROM has been detected in GPU 1."]


def test_dcgm_4_reports_each_test_in_its_own_words_once():
    dcgm = import_files([str(FABRIC / "glimmer-burnin-gb10-level2-plugins-allowed-dcgm452.dcgmi-diag.json")]).dcgm
    assert dcgm.version == "4.5.2"
    assert [(t.name, t.status, t.category) for t in dcgm.tests] == [
        ("software", "Fail", "Deployment"), ("memory", "Pass", "Hardware"), ("pcie", "Pass", "Integration")]
    (software,) = [t for t in dcgm.tests if t.status == "Fail"]
    assert len(software.messages) == len(set(software.messages)) and "Persistence mode for GPU 0 is disabled" in \
        software.messages[0]


def test_check_deep_reads_dcgm_4s_report(tmp_path, monkeypatch):
    """dcgmi exits non-zero when a test fails (226 here) and still prints its report: the report is judged."""
    from gpuprep.probe.dcgm import probe_dcgm
    from gpuprep.snapshot import Snapshot
    report = FABRIC / "glimmer-burnin-gb10-level1-dcgm423.dcgmi-diag.json"
    _stand_in(tmp_path, "dcgmi", f'case "$1" in diag) cat "{report}"; exit 226;; health) exit 255;; esac\n')
    monkeypatch.setenv("PATH", f"{tmp_path}{os.pathsep}{os.environ['PATH']}")
    snap = Snapshot(dcgm=probe_dcgm(level=1))
    assert (snap.dcgm.version, snap.dcgm.missing) == ("4.2.3", None)
    # and a health check that answered nothing is unknown, said as such
    assert judged(snap) == [("dcgm.diag", "fail", "DCGM software (GPUs 0)"), ("dcgm.health", "warn", "host")]


def test_dcgm_health_json_incidents_are_read_from_their_wrapped_lines():
    """`dcgmi health -c -j` keeps an incident only as its wrapped lines ('overflow'; DCGM's Health.cpp wraps at 54
    characters): the document's shape as DCGM's source writes it, the words of the user guide's PCIe incident
    (tests/corpus/fabric, the table form of the same report)."""
    from gpuprep.parsers.dcgm import health_from_json
    report = {"header": ["Health Monitor Report"],
              "body": {"GPU": {"children": {"0": {"value": "Warning", "children": {"Errors": {"children": {
                  "PCIe system": {"value": "Warning", "overflow": [
                      "Detected more than 8 PCIe replays per minute for GPU", "0: 13"]}}}}}}},
                  "Overall Health": {"value": "Warning"}}}
    dcgm = health_from_json(report)
    assert dcgm.health == "Warning"
    assert dcgm.incidents == ["PCIe system: Detected more than 8 PCIe replays per minute for GPU 0: 13"]


@pytest.mark.parametrize("name, switches", [
    ("nvidia-fm-guide-hgx-a100-6-nvswitches.lspci.txt", 6),
    ("nvidia-fm-guide-hgx-h100-4-nvswitches.lspci.txt", 4),
    # fourth-generation NVSwitches hang off a ConnectX-7 bridge: no PCIe devices of the host
    ("nvidia-fm-guide-hgx-b200-cx7-bridge-no-pcie-nvswitch.lspci.txt", 0),
])
def test_nvswitches_are_counted_from_plain_lspci(name, switches):
    from gpuprep.parsers.lspci_vvv import is_nvswitch
    pci = import_files([str(FABRIC / name)]).pci
    assert sum(is_nvswitch({"class": d.kind, "name": d.name}) for d in pci) == switches
    assert sum(d.kind == "3D controller" for d in pci) == 8


def test_lspci_nn_names_and_chipset_bridges():
    """`lspci -nn` puts the class code after the class ([0680]); NVIDIA's nForce chipsets had Bridge-class Ethernet
    (lspci -nnk of an MCP61 board) that is no NVSwitch. The -nn line is gpud's (fabric-manager tests)."""
    from gpuprep.parsers.lspci_vvv import is_nvswitch, parse_lspci_vvv
    (switch,) = parse_lspci_vvv("0005:00:00.0 Bridge [0680]: NVIDIA Corporation Device [10de:1af1] (rev a1)")
    (chipset,) = parse_lspci_vvv("00:07.0 Bridge [0680]: nVidia Corporation MCP61 Ethernet [10de:03ef] (rev a2)")
    assert (switch["class"], is_nvswitch(switch), is_nvswitch(chipset)) == ("Bridge", True, False)


def test_nvswitches_in_lspci_make_a_stopped_fabric_manager_fail():
    """Fabric Manager inactive (not failed) is only judged where the host needs it: lspci's NVSwitches say so."""
    from gpuprep.snapshot import FabricManager
    for name, severity in (("nvidia-fm-guide-hgx-h100-4-nvswitches.lspci.txt", "fail"),
                           ("nvidia-fm-guide-hgx-b200-cx7-bridge-no-pcie-nvswitch.lspci.txt", None)):
        snap = import_files([str(FABRIC / name)])
        snap.fabric_manager = FabricManager(installed=True, state="inactive")
        found = [f for f in api.check(facts=snap).findings if f.id == "fabric.manager"]
        assert [f.severity for f in found] == ([severity] if severity else [])
        if severity:
            assert found[0].evidence["nvswitch"] == "4 NVSwitch(es) on the PCIe bus (lspci)"
    snap = import_files([str(FABRIC / "nvidia-fm-guide-hgx-a100-6-nvswitches.lspci.txt"),
                         str(FABRIC / "bottlerocket-pr3873-p4d-a100-fm-active-running.systemctl-status.txt")])
    assert judged(snap, ("fabric",)) == [("fabric.manager", "pass", "host")]


def test_the_text_report_shows_fabric_manager_beside_each_gpus_registration():
    done = run_cli("check", "--from", str(FABRIC / "gpu-operator-issue-2511-fabric-in-progress-580.nvidia-smi-q-fabric.txt"),
                   "--from", str(FABRIC / "nvidia-fm-guide-hgx-h100-4-nvswitches.lspci.txt"),
                   "--from", str(FABRIC / "akash-website-pr632-fm-version-mismatch-550.systemctl-status.txt"),
                   "--from", str(CORPUS / "rdma" / "gpud-h100-ndr-ib-active-eth-disabled.ibstat.txt"))
    assert done.returncode == 1, done.stderr
    fabric = done.stdout.split("NVLink fabric\n", 1)[1].split("\n\n", 1)[0].splitlines()
    assert fabric[0].split() == ["Fabric", "Manager:", "failed", "version", "550.127.05", "driver", "?"]
    assert fabric[1] == "  NVSwitches on the PCIe bus (lspci): 4"
    assert fabric[3].split()[2:4] == ["In", "Progress"]
    ports = done.stdout.split("RDMA ports (12)\n", 1)[1].split("\n\n", 1)[0].splitlines()
    assert ports[1].split() == ["mlx5_0", "1", "-", "InfiniBand", "Active", "LinkUp", "400", "MT4129", "28.39.1002", "-"]


def _mutations(document, seed, count):
    """Damaged copies of a real report: a value somewhere swapped for another JSON type (a truncated, edited or
    foreign document, as a node or a saved capture may hold)."""
    import copy
    import random
    rng = random.Random(seed)
    kinds = (lambda: None, lambda: 1, lambda: "x", lambda: [], lambda: {}, lambda: [1], lambda: {"a": 1}, lambda: True)
    for _ in range(count):
        doc = copy.deepcopy(document)
        for _ in range(rng.randint(1, 3)):
            node = doc
            while True:
                keys = list(node) if isinstance(node, dict) else list(range(len(node))) if isinstance(node, list) else []
                if not keys:
                    break
                key = rng.choice(keys)
                if rng.random() < 0.4 or not isinstance(node[key], (dict, list)):
                    node[key] = rng.choice(kinds)()
                    break
                node = node[key]
        yield doc


@pytest.mark.parametrize("name, read", [
    ("glimmer-burnin-gb10-level2-plugins-allowed-dcgm452.dcgmi-diag.json", "diag_from_json"),
    ("virtualclient-t4-diag-r3-pass.dcgmi-diag.json", "diag_from_json"),
    ("virtualclient-health-check-healthy.dcgmi-health.json", "health_from_json"),
])
def test_a_damaged_dcgm_report_is_refused_or_read_never_a_crash(name, read):
    """What check --deep reads from dcgmi, and a capture: a document of the wrong shape is a ValueError (the probe
    makes it information, --from a one-line error), never a TypeError that ends the check."""
    import json
    from gpuprep.parsers import dcgm as reader
    for doc in _mutations(json.loads((FABRIC / name).read_text()), seed=len(name), count=1500):
        try:
            getattr(reader, read)(doc)
        except ValueError:
            pass


def test_a_dcgm_status_gpuprep_does_not_know_warns_and_skips_alone_prove_nothing():
    import json
    from gpuprep.parsers.dcgm import diag_from_json
    from gpuprep.snapshot import Snapshot
    doc = json.loads((FABRIC / "virtualclient-t4-diag-r3-pass.dcgmi-diag.json").read_text())
    tests = [t for c in doc["DCGM GPU Diagnostic"]["test_categories"] for t in c["tests"]]
    tests[0]["results"][0]["status"] = "Error"
    assert judged(Snapshot(dcgm=diag_from_json(doc)), ("dcgm",)) == [("dcgm.diag", "warn", "DCGM Denylist")]
    for test in tests:
        for result in test["results"]:
            result["status"] = "Skip"
    assert judged(Snapshot(dcgm=diag_from_json(doc)), ("dcgm",)) == [("dcgm.diag", "info", "host")]


def test_check_deep_with_a_damaged_dcgm_report_says_so(tmp_path, monkeypatch):
    from gpuprep.probe.dcgm import probe_dcgm
    _stand_in(tmp_path, "dcgmi", 'case "$1" in diag) echo \'{"DCGM Diagnostic": {"test_categories": 5}}\';; '
                                 'health) echo "[[[[";; esac\n')
    monkeypatch.setenv("PATH", f"{tmp_path}{os.pathsep}{os.environ['PATH']}")
    dcgm = probe_dcgm(level=1)
    assert dcgm.tests is None and "could not be read" in dcgm.failed


@pytest.mark.parametrize("started, kept", [("Thu 2025-02-27 15:00:00 UTC", True),   # the error is of this run
                                           ("Thu 2025-02-27 15:20:00 UTC", False)])  # it was before the restart
def test_the_live_probe_reads_fabric_managers_log_of_its_current_run(tmp_path, monkeypatch, started, kept):
    """/var/log/fabricmanager.log is appended to across runs (gpud's real log here): only the lines since systemd last
    started the unit (systemctl show's InactiveExitTimestamp) are this host's state."""
    from gpuprep.probe.fabric import probe_fabric_manager
    log = tmp_path / "var/log/fabricmanager.log"
    log.parent.mkdir(parents=True)
    log.write_text((FABRIC / "gpud-testdata-8gpu-nvswitch-fm-runtime-nonfatal-error.fabricmanager-log.txt").read_text())
    _stand_in(tmp_path, "systemctl", f'printf "LoadState=loaded\\nActiveState=active\\nInactiveExitTimestamp={started}\\n"\n')
    monkeypatch.setenv("PATH", f"{tmp_path}{os.pathsep}/bin{os.pathsep}/usr/bin")
    fm = probe_fabric_manager(root=str(tmp_path))
    assert (fm.installed, fm.state, fm.nvswitch) == (True, "active", True if kept else None)
    errors = [e for e in fm.errors or [] if "[ERROR]" in e]
    assert errors == (["[Feb 27 2025 15:10:02] [ERROR] [tid 12727] detected NVSwitch non-fatal error 12028 on fid 0 "
                       "on NVSwitch pci bus id 00000000:86:00.0 physical id 3 port 61"] if kept else [])


def test_without_a_start_time_the_log_is_not_read(tmp_path, monkeypatch):
    from gpuprep.probe.fabric import probe_fabric_manager
    log = tmp_path / "var/log/fabricmanager.log"
    log.parent.mkdir(parents=True)
    log.write_text((FABRIC / "gpud-testdata-8gpu-nvswitch-fm-runtime-nonfatal-error.fabricmanager-log.txt").read_text())
    _stand_in(tmp_path, "systemctl", 'printf "LoadState=loaded\\nActiveState=failed\\nInactiveExitTimestamp=\\n"\n')
    monkeypatch.setenv("PATH", f"{tmp_path}{os.pathsep}/bin{os.pathsep}/usr/bin")
    fm = probe_fabric_manager(root=str(tmp_path))
    assert (fm.state, fm.errors) == ("failed", None)


@pytest.mark.parametrize("capture, severity", [("h100-sxm-x8.nvidia-smi-q.txt", "fail"),
                                               # 8 V100 SXM2 (DGX-1's cube mesh): NVLink without NVSwitches
                                               ("v100-sxm2-x8-vm.nvidia-smi-q.txt", None)])
def test_no_fabric_manager_fails_only_on_an_nvswitch_board(capture, severity):
    from gpuprep.snapshot import FabricManager
    snap = import_files([str(CORPUS / capture)])
    snap.fabric_manager = FabricManager(installed=False)
    found = [f.severity for f in api.check(facts=snap).findings if f.id == "fabric.manager"]
    assert found == ([severity] if severity else [])


def test_a_fabric_manager_log_over_the_capture_limit_is_read_from_its_end_never_as_a_kernel_log(tmp_path):
    """Over 64 MiB a time-stamped file went down the large-kernel-log path, which keeps only kernel GPU lines: a
    Fabric Manager log ending in [FATAL] judged OK, and the Slurm hook resumed the node. Refusing it lost the fleet
    its answer (issue 47): it is read from its start and its end, and the [FATAL] at the end fails it."""
    from gpuprep.parsers import MAX_CAPTURE_BYTES, import_files
    real = (FABRIC / "gpud-testdata-8gpu-nvswitch-fm-runtime-nonfatal-error.fabricmanager-log.txt").read_text()
    big = tmp_path / "fabricmanager.log"
    with open(big, "w") as fh:
        while fh.tell() <= MAX_CAPTURE_BYTES:
            fh.write(real)
        fh.write("[Feb 25 2025 14:00:01] [FATAL] [tid 1803] NVSwitch fatal error detected\n")
    snap = import_files([str(big)])
    assert "NVSwitch fatal error detected" in snap.fabric_manager.errors[-1]
    done = run_cli("npd", "--from", str(big))
    assert done.returncode == 1 and done.stdout.startswith("fabric.manager-errors"), done.stdout


def test_a_pass_through_vm_whose_gpu_completed_registration_needs_no_fabric_manager():
    """A real single-H200 VM capture reports its fabric registration Completed/Success; with no Fabric Manager in
    the VM (the host manages the fabric), fabric.manager failed it."""
    from gpuprep.rules import evaluate
    snap = import_files([str(CORPUS / "h200.nvidia-smi-q.txt")])
    assert snap.gpus[0].fabric_state == "Completed" and snap.gpus[0].fabric_status == "Success"
    snap.fabric_manager.installed = False
    (finding,) = [f for f in evaluate(snap) if f.id == "fabric.manager"]
    assert finding.severity == "info"
    snap.gpus[0].fabric_state, snap.gpus[0].fabric_status = "In Progress", None      # not registered: it needs one
    assert [f.severity for f in evaluate(snap) if f.id == "fabric.manager"] == ["fail"]
