"""The GPU acceptance kit (bench/gpu_acceptance.py). Its comparison of the live probe with nvidia-smi -q is tested
here on every machine, through the real nvidia-ml-py and the C stand-in of libnvidia-ml built from the same
captures, and against a second reader of a capture's text; the tests marked `gpu` run on a machine with NVIDIA GPUs (pytest -m gpu) and skip elsewhere."""
import importlib.util
import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

import nvml_stub
from conftest import REPO, corpus, run_cli
from gpuprep.parsers import import_files

spec = importlib.util.spec_from_file_location("gpu_acceptance", REPO / "bench" / "gpu_acceptance.py")
kit = importlib.util.module_from_spec(spec)
spec.loader.exec_module(kit)


@pytest.mark.parametrize("capture", ["h100-sxm-x8.nvidia-smi-q.txt", "a100-sxm4-x4.nvidia-smi-q.txt",
                                     "rtx3090-x2.nvidia-smi-q.txt"])
def test_the_probe_agrees_with_nvidia_smi_field_by_field(capture, tmp_path):
    reported = import_files([corpus(capture)])
    config = tmp_path / "nvml.conf"
    config.write_text(nvml_stub.config_for(reported))
    done = nvml_stub.run(config, [sys.executable, "-m", "gpuprep", "snapshot", "--no-docker"])
    assert done.returncode == 0, done.stderr
    rows = kit.compare(json.loads(done.stdout)["gpus"], [g.__dict__ for g in reported.gpus])
    assert len(rows) >= 10 * len(reported.gpus)
    assert [r for r in rows if not r["agree"]] == []


# `nvidia-smi -q`'s top-level lines of a GPU, read by this test alone (not gpuprep's parser): label -> field
_RAW_FIELDS = {"Product Name": "name", "GPU UUID": "uuid", "Serial Number": "serial", "VBIOS Version": "vbios_version",
               "Persistence Mode": "persistence_mode", "Compute Mode": "compute_mode"}


def _raw_gpus(text: str) -> list:
    """Each GPU block's fields straight from the text: a second reader, so that a parser mistake that the stand-in
    (built through the parser) would carry into the probe is still caught."""
    gpus = []
    for line in text.splitlines():
        header = re.match(r"^GPU ([0-9A-Fa-f]{8}:[0-9A-Fa-f]{2}:[0-9A-Fa-f]{2}\.\d)$", line)
        if header:
            gpus.append({"pci_bus_id": header.group(1)})
            continue
        field = re.match(r"^    (\S[^:]*?)\s+: (.*)$", line)
        if gpus and field and field.group(1) in _RAW_FIELDS:
            value = field.group(2).strip()
            gpus[-1][_RAW_FIELDS[field.group(1)]] = {"Enabled": True, "Disabled": False}.get(value, value)
    return gpus


def test_the_probe_agrees_with_a_second_reader_of_the_capture(tmp_path):
    """The probe (through the stand-in) against the capture read by this test's own reader, not the parser the
    stand-in was built with."""
    capture = corpus("h100-sxm-x8.nvidia-smi-q.txt")
    config = tmp_path / "nvml.conf"
    config.write_text(nvml_stub.config_for(import_files([capture])))
    done = nvml_stub.run(config, [sys.executable, "-m", "gpuprep", "snapshot", "--no-docker"])
    assert done.returncode == 0, done.stderr
    raw = _raw_gpus(Path(capture).read_text())
    rows = kit.compare(json.loads(done.stdout)["gpus"], raw)
    assert len(raw) == 8 and len(rows) == 8 * len(_RAW_FIELDS), rows
    assert [r for r in rows if not r["agree"]] == []


def test_a_field_the_probe_reads_differently_is_named(tmp_path):
    reported = import_files([corpus("h100-sxm-x8.nvidia-smi-q.txt")])
    probed = [dict(g.__dict__) for g in reported.gpus]
    probed[3]["power_limit_w"] = 350.0
    probed[5]["fabric_state"] = None                 # the probe missed what nvidia-smi shows
    del probed[7]
    bad = [(r["gpu"], r["field"]) for r in kit.compare(probed, [g.__dict__ for g in reported.gpus]) if not r["agree"]]
    bus = [kit._bus(g.pci_bus_id) for g in reported.gpus]
    assert bad == [(bus[3], "power_limit_w"), (bus[5], "fabric_state"), (bus[7], "present")]


def test_burnin_figures_and_goals_from_a_report():
    document = {"verdict": "pass", "ranks": [
        {"rank": 0, "gpu_uuid": "b42dd28e", "memory": {"bytes": 72 << 30},
         "gpu": {"training_max_power_w": 690.0, "power_limit_w": 700.0}, "allreduce": [{"busbw_gbs": 351.0}]},
        {"rank": 1, "gpu_uuid": "7c3cadbd", "memory": {"bytes": 72 << 30},
         "gpu": {"training_max_power_w": 560.0, "power_limit_w": 700.0}, "allreduce": [{"busbw_gbs": 349.0}]}]}
    figures = kit.burnin_figures(document, {"b42dd28e": 81000.0, "7c3cadbd": 81000.0})
    assert [r["power_share"] for r in figures["ranks"]] == [0.986, 0.8]
    assert figures["ranks"][0]["memory_coverage"] == round((72 << 30) / (81000 << 20), 3)
    assert figures["peak_busbw_gbs"] == 351.0
    result = {"steps": {"burnin": figures, "probe_vs_nvidia_smi": {"fields": 40, "disagree": []},
                        "nccl_tests": {"burnin_share": 0.95}}}
    assert kit.goals(result) == {"probe_agrees_with_nvidia_smi": True, "power_at_least_90pct": False,
                                 "busbw_at_least_90pct_of_nccl_tests": True, "burnin_passed": True}


# ---------------------------------------------------------------------------- on a machine with NVIDIA GPUs
@pytest.mark.gpu
def test_gpu_check_sees_every_gpu_nvidia_smi_lists():
    listed = subprocess.run(["nvidia-smi", "-L"], capture_output=True, text=True, timeout=60).stdout
    count = sum(1 for line in listed.splitlines() if line.startswith("GPU "))
    done = run_cli("check", "--json", "--no-docker", timeout=300)
    assert done.returncode in (0, 1), done.stderr
    doc = json.loads(done.stdout)
    assert doc["snapshot"]["nvml"]["available"] is True and len(doc["snapshot"]["gpus"]) == count


@pytest.mark.gpu
def test_gpu_probe_agrees_with_nvidia_smi_on_this_host():
    from gpuprep.parsers import import_text
    snap = run_cli("snapshot", "--no-docker", timeout=300)
    smi = subprocess.run(["nvidia-smi", "-q"], capture_output=True, text=True, timeout=120).stdout
    rows = kit.compare(json.loads(snap.stdout)["gpus"], [g.__dict__ for g in import_text(smi, "q.txt").gpus])
    assert rows and [r for r in rows if not r["agree"]] == []


@pytest.mark.gpu
@pytest.mark.slow
def test_gpu_short_burnin_passes_and_loads_the_gpu():
    pytest.importorskip("torch")
    done = run_cli("burnin", "--duration", "30s", "--nproc", "1", "--json", timeout=600)
    doc = json.loads(done.stdout)
    assert done.returncode == 0 and doc["verdict"] == "pass", done.stdout[-3000:]
    (rank,) = doc["ranks"]
    assert rank["backend"] == "nccl" and rank["memory"]["ok"] and rank["memory"]["bytes"] > 1 << 30


NCCL = REPO / "tests" / "data" / "nccl-tests"       # real all_reduce_perf outputs, provenance in PROVENANCE.md


def test_all_reduce_perf_outputs_of_real_machines_parse():
    h100 = kit.parse_all_reduce_perf((NCCL / "h100x8-nvls.all_reduce_perf.txt").read_text())
    assert h100["avg_busbw_gbs"] == 123.961 and h100["peak_busbw_gbs"] == 368.69
    assert h100["rows"][0]["bytes"] == 8 and h100["rows"][-1]["bytes"] == 8 << 30 and len(h100["rows"]) == 31
    pcie = kit.parse_all_reduce_perf((NCCL / "rtx2080tix2-pcie.all_reduce_perf.txt").read_text())
    assert pcie["avg_busbw_gbs"] == 2.05774 and pcie["peak_busbw_gbs"] == 4.0 and pcie["rows"][-1]["bytes"] == 1 << 30


def test_the_h100_expectation_matches_a_real_8_gpu_run_at_the_sweeps_largest_size():
    """On a real 8x H100 all-reduce the burn-in's largest message (4 GiB) reaches 99% of the expected ring figure,
    its old one (256 MiB) 94%: the expectation is judged where the curve has levelled off."""
    from gpuprep import knowledge as kb
    from gpuprep.burnin import NCCL_SWEEP_MAX_MIB
    rows = {r["bytes"]: r["busbw_out_of_place"]
            for r in kit.parse_all_reduce_perf((NCCL / "h100x8-nvls.all_reduce_perf.txt").read_text())["rows"]}
    expected = float(next(r for r in kb.expected_busbw() if r["product"] == "H100 SXM5")["expected_busbw_gbs"])
    assert rows[NCCL_SWEEP_MAX_MIB << 20] / expected >= 0.99
    assert rows[256 << 20] / expected < 0.95
