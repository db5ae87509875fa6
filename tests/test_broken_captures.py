"""The regression table of real captures of broken (and one healthy) GPU nodes, tests/data/broken, each with
its provenance in PROVENANCE.tsv. For every capture: the exact set of fail and warn ids `gpuprep check` raises,
and for a failing one, that a fail names the component the capture names (bus id, index, or the host when
the capture names no GPU). Verdicts were read off each capture and its source thread (NVIDIA's Xid catalog,
memory error management and Fabric Manager guides for the actions)."""
import csv
import json
from pathlib import Path

import pytest

from conftest import CORPUS, run_cli
from gpuprep.parsers import import_files

DATA = Path(__file__).parent / "data" / "broken"
HOST = "host"          # the capture names no GPU: the finding is the host's (or an unnamed GPU's)
UNNAMED = "GPU (not named in the capture)"

# name: (fail ids, warn ids, what a fail must name, extra check arguments)
CAPTURES = {
    # nvidia-smi one-line failures: the GPU or the driver named
    "akash-support-209-device-handle-unknown-error.nvidia-smi-error": ({"gpu.unreachable"}, set(), "0000:A1:00.0"),
    "owod-81-gpu-is-lost.nvidia-smi-error": ({"gpu.unreachable"}, set(), "0000:02:00.0"),
    "returnn-1486-device-handle-unknown-error.nvidia-smi-error": ({"gpu.unreachable"}, set(), "0000:03:00.0"),
    "xxd3vin-19-device-handle-unknown.nvidia-smi-error": ({"gpu.unreachable"}, set(), "0000:0B:00.0"),
    "mattshma-108-couldnt-communicate.nvidia-smi-error": ({"driver.nvml-unavailable"}, set(), HOST),
    "ogkm-862-no-devices-were-found.nvidia-smi-error": ({"driver.nvml-unavailable"}, set(), HOST),
    "shine-cluster-30-driver-lib-mismatch.nvidia-smi-error": ({"driver.nvml-unavailable"}, set(), HOST),
    "tinygrad-ogkm-47-driver-lib-mismatch-nvml-version.nvidia-smi-error": ({"driver.nvml-unavailable"}, set(), HOST),
    # nvidia-smi tables with ERR!: a GPU that stopped answering fails; one unreadable sensor warns
    "gpu-operator-559-a40-err.nvidia-smi": ({"gpu.unreachable"}, set(), "00000000:19:00.0"),
    # cut after GPU 1's rows: GPU 0's ERR! row is a failure seen, and the cut is said (issue 47)
    "dcgm-exporter-313-a10g-err.nvidia-smi": ({"gpu.unreachable"}, {"gpu.capture-incomplete"}, "00000000:00:16.0"),
    "nvgpu-exporter-393-rtx4000ada-fan-err.nvidia-smi": (set(), {"gpu.sensor-unreadable", "gpu.ecc-disabled"}, None),
    "azhpc-diag-77-v100-power-err-transient.nvidia-smi": (set(), {"gpu.sensor-unreadable"}, None),   # transient
    # a GPU missing from the table: only the expected count can tell
    "cbio-cluster-39-gtx-titan-one-gpu-missing.nvidia-smi": ({"gpu.count"}, {"gpu.persistence-off"}, HOST),
    # nvidia-smi -q excerpts, with and without the report's header
    "dcgm-exporter-319-a10g-product-brand-unknown-error.nvidia-smi-q-excerpt":
        ({"gpu.unreachable"}, {"gpu.capture-incomplete"}, "00000000:00:16.0"),
    "gpud-pr80-remapped-rows-uncorrectable-pending.nvidia-smi-q-excerpt": ({"gpu.row-remap"}, set(), UNNAMED),
    "mleng-a100-xid63-remap-pending.nvidia-smi-q-excerpt":
        ({"gpu.row-remap"}, {"gpu.capture-incomplete"}, "00000000:10:1C.0"),
    "thamada-a100x4-remap-pending-9e.nvidia-smi-q-excerpt":
        ({"gpu.row-remap"}, {"gpu.capture-incomplete"}, "00000000:9E:00.0"),    # app clocks at the factory default
    "mleng-sram-uncorrectable.nvidia-smi-q-excerpt": ({"gpu.ecc-uncorrectable"}, set(), UNNAMED),
    "l4rz-c4130-v100-power-brake.nvidia-smi-q-excerpt": ({"gpu.clock-throttle"}, set(), UNNAMED),
    "azhpc-images-506-fabric-insufficient-resources.nvidia-smi-q-excerpt": ({"gpu.fabric"}, set(), UNNAMED),
    "dcgm-232-a10g-link-width-x8-of-x16.nvidia-smi-q-excerpt": (set(), {"gpu.pcie-width"}, None),    # not idle-marked
    "healthy-thamada-a100x4-gpu68.nvidia-smi-q-excerpt":
        (set(), {"gpu.capture-incomplete"}, None),             # healthy GPU; app clocks at the factory default
    # nvlink --status
    "azhpc-diag-73-v100-nvlink-inactive.nvlink-status": ({"topo.nvlink-inactive"}, set(), "GPU3"),
    "gpud-1085-b200-all-links-inactive.nvlink-status": ({"topo.nvlink-inactive"}, set(), "GPU2"),
    # kernel logs of every shape
    "akash-support-209-xid79-fallen-off-bus.dmesg": ({"gpu.xid"}, set(), "0000:a1:00"),
    "illinois-scicomp-mshop-80-titanv-xid79-serial.dmesg": ({"gpu.xid"}, set(), "0000:02:00"),
    "nvsentinel-155-fallen-off-bus-no-xid.dmesg": ({"gpu.xid"}, set(), "0000:b3:00"),
    "chia-gigahorse-301-xid31-62-45.dmesg": ({"gpu.xid"}, {"gpu.xid"}, "0000:0a:00"),
    "dcgm-144-a40-xid119-gsp-rpc-timeout.dmesg": ({"gpu.xid"}, set(), "0000:07:00"),
    "gpud-xid119-gsp-timeout-xe9680.dmesg": ({"gpu.xid"}, set(), "0000:9b:00"),
    "ogkm-829-xid120-gsp-crashcat-journal.dmesg": ({"gpu.xid"}, set(), "0000:02:00"),
    "ogkm-446-talos-xid154-gsp-timeout-reset-required.dmesg": ({"gpu.xid"}, set(), "0000:0b:00"),
    "gpu-operator-1146-xid48-dbe-xid64-rminit-failed.dmesg": ({"gpu.xid", "gpu.init-failed"}, set(), "0000:0a:00"),
    "ogkm-862-rminitadapter-failed-syslog.dmesg": ({"gpu.init-failed"}, set(), "0000:01:00"),
    "gpud-pr1174-nvlink-xid149-145.dmesg": ({"gpu.xid"}, {"gpu.xid"}, "0019:01:00"),    # 149 Fatal, 145 Nonfatal
    "ogkm-1150-xid45-after-xid149-145.dmesg": ({"gpu.xid"}, set(), "0000:dc:00"),      # caused by Xid 149/145
    "gpud-pr46-xid13-xid109.dmesg": ({"gpu.xid"}, {"gpu.xid"}, "0000:cb:00"),
    "sichek-51-nv-err-reset-required.dmesg": ({"gpu.reset-required"}, set(), HOST),
    "mattshma-133-no-adapter-probed.dmesg": ({"driver.not-probed"}, set(), HOST),
    # degraded or application faults: a warning, not a failed node
    "gpud-pr117-xid45.dmesg": (set(), {"gpu.xid"}, None),
    "ogkm-363-xid31-no-timestamp.dmesg": (set(), {"gpu.xid"}, None),
    "dxvk-1799-xid31-journalctl-k.dmesg": (set(), {"gpu.xid"}, None),
    "mleng-a100-xid63-row-remapper.dmesg": (set(), {"gpu.xid"}, None),                  # "reset gpu to activate"
    "returnn-1486-pcie-aer-dmesg-H.dmesg": (set(), {"sys.pcie-aer"}, None),             # corrected errors only
    "gpud-fabricmanager-nvswitch-nonfatal.fabricmanager-log": (set(), {"gpu.sxid"}, None),   # FM: non-fatal
}
ARGS = {"cbio-cluster-39-gtx-titan-one-gpu-missing.nvidia-smi": "min_gpus = 4\n"}      # the node has four GPUs


def test_every_capture_has_a_verdict_and_a_source():
    files = {p.name[:-len(".txt")] for p in DATA.glob("*.txt")}
    assert files == set(CAPTURES)
    with open(DATA / "PROVENANCE.tsv") as fh:
        rows = {row["file"]: row for row in csv.DictReader(fh, delimiter="\t")}
    for name in files:
        row = rows[name + ".txt"]
        assert row["url"].startswith("https://") and row["licence_note"], name
    failing = [name for name, (fails, _, _) in CAPTURES.items() if fails]
    assert len(failing) >= 34 and len(CAPTURES) >= 45


@pytest.mark.parametrize("name", sorted(CAPTURES))
def test_capture_gets_its_verdict(name, tmp_path):
    fails, warns, named = CAPTURES[name]
    args = ["check", "--json", "--from", str(DATA / f"{name}.txt")]
    if name in ARGS:
        profile = tmp_path / "profile.toml"
        profile.write_text(ARGS[name])
        args += ["--profile", str(profile)]
    done = run_cli(*args)
    assert "Traceback" not in done.stderr and done.returncode == (1 if fails else 0), done.stderr
    doc = json.loads(done.stdout)
    raised = {sev: {f["id"] for f in doc["findings"] if f["severity"] == sev} for sev in ("fail", "warn")}
    assert (raised["fail"], raised["warn"]) == (fails, warns)
    if named:
        subjects = [f["subject"] for f in doc["findings"] if f["severity"] == "fail"]
        assert any(named in subject for subject in subjects), subjects


def test_a_pasted_excerpt_keeps_its_meaning_through_annotations_and_lost_indentation(tmp_path):
    """What people do to a paste: point at the line with an arrow, lose the report's base indentation."""
    text = (DATA / "mleng-a100-xid63-remap-pending.nvidia-smi-q-excerpt.txt").read_text()
    assert "        Pending                           : Yes\n" in text
    annotated = text.replace("        Pending                           : Yes\n",
                             "        Pending                           : Yes   <=== this one\n")
    flat = "\n".join(line[4:] if line.startswith("    ") else line for line in annotated.splitlines())
    for variant, content in (("annotated", annotated), ("de-indented", flat)):
        path = tmp_path / f"{variant}.txt"
        path.write_text(content)
        doc = json.loads(run_cli("check", "--json", "--from", str(path)).stdout)
        fails = [f for f in doc["findings"] if f["severity"] == "fail"]
        assert [(f["id"], f["evidence"]["pending"]) for f in fails] == [("gpu.row-remap", True)], variant


@pytest.mark.parametrize("prefix", ["", "[ 1234.567891] ", "Nov 26 21:00:01 node1 kernel: "])
def test_the_kernels_three_line_fallen_off_the_bus_message_alone_fails(prefix, tmp_path):
    """As monitoring tools' tests carry it (no Xid, often no timestamps): it was refused as an unrecognised file."""
    log = tmp_path / "kern.log"
    log.write_text(f"{prefix}NVRM: The NVIDIA GPU 0000:3b:00.0\n"
                   f"{prefix}NVRM: (PCI ID: 10de:2330) installed in this system has\n"
                   f"{prefix}NVRM: fallen off the bus and is not responding to commands.\n")
    (xid,) = import_files([str(log)]).xids
    assert (xid.code, xid.pci) == (79, "0000:3b:00")
    done = run_cli("npd", "--from", str(log))
    assert done.returncode == 1 and done.stdout.startswith("gpu.xid PCI 0000:3b:00"), done.stdout


def test_a_driver_610_table_header_gives_the_driver_version(tmp_path):
    """Driver 610 prints `KMD Version` and `CUDA UMD Version`: no driver version meant Fabric Manager's version was
    never compared with it."""
    table = tmp_path / "smi.txt"
    lines = (CORPUS / "h100-sxm-x8.nvidia-smi.txt").read_text().splitlines(keepends=True)
    lines[1] = "| NVIDIA-SMI 610.57.04              KMD Version: 610.57.04      CUDA UMD Version: 13.3  |\n"
    table.write_text("".join(lines))
    snap = import_files([str(table)])
    assert (snap.software.driver_version, snap.software.cuda_driver_version) == ("610.57.04", "13.3")


def test_err_in_the_fan_column_keeps_the_gpu_and_says_so(tmp_path):
    table = tmp_path / "smi.txt"
    text = (CORPUS / "h100-sxm-x8.nvidia-smi.txt").read_text()
    table.write_text(text.replace("| N/A   30C    P0            100W /  700W |", "| ERR!  30C    P0           ERR! /  700W |", 1))
    snap = import_files([str(table)])
    assert len(snap.gpus) == 8 and snap.gpus[0].unreadable == ["fan = ERR!", "power draw = ERR!"]
