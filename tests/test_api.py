"""gpuprep.api, the library core a Python user calls: typed results, gpuprep's own exceptions worded without
command-line flags, and the same verdicts the commands print (they call it too)."""
import json

import pytest

from conftest import corpus, run_cli
from gpuprep import api
from gpuprep.errors import BadInput
from gpuprep.rules import Finding
from gpuprep.snapshot import Snapshot

A100 = "a100-sxm4-x4.nvidia-smi-q.txt"
H100 = ["h100-sxm-x8.nvidia-smi-q.txt", "h100-x8-stas.topo-m.txt", "xid119-dell-xe9680.dmesg.txt"]


def test_check_returns_typed_findings_and_the_commands_verdict():
    result = api.check([corpus(n) for n in H100])
    assert isinstance(result.snapshot, Snapshot) and all(isinstance(f, Finding) for f in result.findings)
    assert result.verdict == "fail" and {f.id for f in result.failed} >= {"gpu.xid"}
    printed = json.loads(run_cli("check", "--json", *[a for n in H100 for a in ("--from", corpus(n))]).stdout)
    assert result.document()["verdict"] == printed["verdict"]
    assert [(f.id, f.severity, f.subject) for f in result.findings] == \
        [(f["id"], f["severity"], f["subject"]) for f in printed["findings"]]


def test_skip_moves_findings_to_waived_never_drops_them():
    everything = api.check([corpus(A100)])
    waived = api.check(facts=everything.snapshot, skip=["gpu"])
    assert not any(f.id.startswith("gpu.") for f in waived.findings)
    assert {f.id for f in waived.waived} == {f.id for f in everything.findings if f.id.startswith("gpu.")}


def test_errors_are_gpupreps_own_and_worded_without_flags():
    with pytest.raises(BadInput) as caught:
        api.check([corpus(A100)], skip=["gpu.no-such-check"])
    assert "gpu.no-such-check" in str(caught.value) and "--" not in str(caught.value)
    with pytest.raises(BadInput, match="not with captures"):
        api.snapshot([corpus(A100)], deep=True)


def test_plan_and_compat():
    layout = api.plan(sources=[corpus("asus-esc8000a-e12-4x-rtx6000ada.topo-m.txt"),
                               corpus("asus-esc8000a-e12-4x-rtx6000ada.lscpu.txt")], visible="2,3")
    assert [(r.local_rank, r.gpu) for r in layout.ranks] == [(0, 2), (1, 3)]
    (finding,) = [f for f in api.compat("470.57.02", torch="2.5.1+cu124") if f.id == "compat.torch-driver"]
    assert finding.severity == "fail"
