"""No wrong "healthy", as a property: every monitor entry point (check's verdict, npd, nagios, the Slurm hook's
decision) over a table of broken-or-unknown inputs: every NVML error code on one GPU (through nvidia-ml-py and the
C stand-in), captures of healthy nodes cut at several points, and a DCGM that fails. None may be healthy, and no
Slurm decision may resume or leave open a node it cannot vouch for."""
import dataclasses
import os

import pytest

import nvml_stub
from conftest import CORPUS
from gpuprep import adapters
from gpuprep.errors import BadInput
from gpuprep.parsers import import_files
from gpuprep.rules import evaluate
from gpuprep.slurm import NodeState, decide
from gpuprep.snapshot import Gpu, Snapshot

H100 = "h100-sxm-x8.nvidia-smi-q.txt"
OPEN = NodeState("node1", ["IDLE"], "")
OURS = NodeState("node1", ["IDLE", "DRAIN"], "gpu.xid GPU3 (gpuprep)")


def monitors(snap):
    """What each entry point says of a snapshot: (check verdict, npd exit, nagios exit, Slurm action on an open
    node, on a node gpuprep drained)."""
    findings = evaluate(snap)
    found = adapters.problems(findings, {})
    verdict = min((f.severity for f in findings), key=("fail", "warn", "info", "pass").index, default="pass")
    return (verdict, adapters.npd(found)[0], adapters.nagios(findings, found)[0], decide(OPEN, found).kind,
            decide(OURS, found).kind)


def unknown():
    """What every entry point says of input it could not read (BadInput): unknown, never healthy."""
    return ("unknown", adapters.npd_unknown("x")[0], adapters.nagios_unknown("x")[0], "none", "keep")


def not_healthy(said, acted_on=True):
    verdict, npd, nagios, on_open, on_ours = said
    assert verdict != "pass" and nagios != 0, said
    if acted_on:        # a failure: npd reports it (or unknown), Slurm drains or keeps, never resumes
        assert npd != 0 and on_open in ("drain", "none") and on_ours in ("drain", "keep"), said


# -- every NVML error code on one GPU -------------------------------------------------------------------------

_UNKNOWN = {"NOT_SUPPORTED", "NO_PERMISSION", "FUNCTION_NOT_FOUND"}
CODES = sorted(name[len("NVML_ERROR_"):] for name in dir(__import__("pynvml"))
               if name.startswith("NVML_ERROR_") and isinstance(getattr(__import__("pynvml"), name), int)
               and name[len("NVML_ERROR_"):] not in _UNKNOWN and not name.endswith("UNINITIALIZED"))
QUERIES = ("nvmlDeviceGetName", "nvmlDeviceGetUUID", "nvmlDeviceGetPowerUsage", "nvmlDeviceGetTemperature",
           "nvmlDeviceGetMemoryInfo_v2", "nvmlDeviceGetPersistenceMode", "nvmlDeviceGetClockInfo",
           "nvmlDeviceGetPciInfo_v3", "nvmlDeviceGetEccMode", "nvmlDeviceGetRemappedRows")


def _probed(tmp_path, errors):
    config = tmp_path / "nvml.conf"
    config.write_text(nvml_stub.config_for(import_files([str(CORPUS / H100)]), errors=errors))
    facts = nvml_stub.probe_json(config)
    gpus = [Gpu(**{**g, "nvlinks": None, "supported_clocks": None}) for g in facts["gpus"]]
    return Snapshot(gpus=gpus)


@pytest.mark.skipif(not nvml_stub.compiler_available(), reason="needs a C compiler for the NVML stand-in")
def test_every_nvml_error_on_one_gpu_is_never_healthy(tmp_path):
    baseline = monitors(_probed(tmp_path, []))
    assert baseline[1] == 0 and baseline[3] == "none", baseline       # the same GPUs with no error: healthy
    failed = []
    for code in CODES:
        said = monitors(_probed(tmp_path, [(3, fn, code, 1) for fn in QUERIES]))
        if said[1] == 0 or said[0] == "pass":
            failed.append((code, said))
        else:
            not_healthy(said)
    assert not failed, failed
    for code in ("GPU_IS_LOST", "UNKNOWN", "NO_PERMISSION", "TIMEOUT"):     # cannot even open the GPU
        said = monitors(_probed(tmp_path, [(3, "nvmlDeviceGetHandleByIndex_v2", code, 1)]))
        if code == "NO_PERMISSION":     # another job's GPU (Slurm cgroups): not judged, and said so
            assert said[1] == 0 and said[0] == "info", said
        else:
            not_healthy(said)


# -- captures of healthy nodes, cut short --------------------------------------------------------------------

CUT = ["h100-sxm-x8.nvidia-smi-q.txt", "rtx4090-x8.nvidia-smi-q.txt", "a40-x10.nvidia-smi-q.txt",
       "h100-sxm-x8.nvidia-smi.txt", "rdma/gpud-h100-ndr-all-active.ibstat.txt",
       "fabric/virtualclient-t4-diag-r3-pass.dcgmi-diag.json", "dual-rtx-a5000.nvidia-smi-q.xml",
       "t4-aws.nvidia-smi-q.xml"]


@pytest.mark.parametrize("name", CUT)
def test_a_healthy_capture_cut_short_is_never_healthy(name, tmp_path):
    text = (CORPUS / name).read_text()
    whole = monitors(import_files([str(CORPUS / name)]))
    assert whole[1] == 0, whole                      # the whole capture is healthy: a cut must not stay so
    gpu_start = text.find("GPU ") if "nvidia-smi" in name else 0
    for share in (0.3, 0.5, 0.7, 0.9, 0.97):
        at = gpu_start + int((len(text) - gpu_start) * share)
        for cut_at in (at, text.rfind("\n", 0, at) + 1):          # mid-line, and at a line's start
            cut = tmp_path / f"cut-{cut_at}-{os.path.basename(name)}"
            cut.write_text(text[:cut_at])
            try:
                said = monitors(import_files([str(cut)]))
            except BadInput:
                said = unknown()
            assert said[0] != "pass" and said[2] != 0, (share, cut_at, said)


# -- a DCGM that fails -------------------------------------------------------------------------------------

@pytest.mark.parametrize("failed", ["dcgmi diag exited 226 (DCGM_ST_NVVS_ERROR)", "dcgmi diag did not finish in 300 s",
                                    "dcgmi diag answered no report (%%%garbage)"])
def test_a_dcgm_that_failed_is_never_healthy(failed):
    from gpuprep.snapshot import Dcgm, DcgmTest
    partial = Dcgm(failed=failed, tests=[DcgmTest(name="software", status="Pass"),
                                          DcgmTest(name="pcie", status="Pass")])
    not_healthy(monitors(Snapshot(dcgm=partial)), acted_on=False)
    not_healthy(monitors(Snapshot(dcgm=dataclasses.replace(partial, tests=None))), acted_on=False)


# -- the other way: a healthy node with any one fact unknown never fails --------------------------------------

HEALTHY = ["h100-sxm-x8.nvidia-smi-q.txt", "a10.nvidia-smi-q.txt", "h200.nvidia-smi-q.txt", "l40s.nvidia-smi-q.txt",
           "rtx4090-x8.nvidia-smi-q.txt", "dual-rtx-a5000.nvidia-smi-q.xml", "gh200.nvidia-smi-q.txt",
           "gb10-dgx-spark-load.nvidia-smi.txt", "h100-sxm-x8.nvidia-smi.txt"]


def _unknowns(snap):
    """(what, a copy of snap with that one fact unknown): every field of the first GPU, of the software and the
    system sections, and NVML's own status."""
    for section, owner in (("gpu", lambda s: s.gpus[0]), ("software", lambda s: s.software),
                           ("system", lambda s: s.system), ("nvml", lambda s: s.nvml)):
        for field in dataclasses.fields(owner(snap)):
            if field.name == "index" or getattr(owner(snap), field.name) is None:
                continue
            copy = Snapshot.from_dict(snap.to_dict())
            setattr(owner(copy), field.name, None)
            yield f"{section}.{field.name}", copy


@pytest.mark.parametrize("name", HEALTHY)
def test_a_healthy_capture_with_any_one_fact_unknown_never_fails(name):
    snap = import_files([str(CORPUS / name)])
    assert not [f for f in evaluate(snap) if f.severity == "fail"], name          # healthy as captured
    wrong = [(what, [(f.id, f.title) for f in evaluate(copy) if f.severity == "fail"])
             for what, copy in _unknowns(snap)]
    assert not [w for w in wrong if w[1]], [w for w in wrong if w[1]]
