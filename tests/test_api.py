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


@pytest.mark.parametrize("call, argument, flag", [
    (lambda: api.compat("not-a-driver", cuda="12.4"), "driver", "--driver"),
    (lambda: api.compat("535.104.05", cudnn="9.1.0"), "cudnn", "--cudnn"),
    (lambda: api.burnin(30, nnodes=2, node_rank=2, master="127.0.0.1:29500"), "node_rank", "--node-rank"),
    (lambda: api.burnin(30, nnodes=2), "nnodes", "--nnodes"),
    (lambda: api.burnin(30, ranks=0, backend="gloo"), "ranks", "--nproc"),
    (lambda: api.revert("localhost,", tags=["no_such_role"]), "tags", "--tags"),
])
def test_argument_errors_name_the_argument_and_the_cli_names_its_flag(call, argument, flag):
    """The library words an error after its own argument; the CLI's one error table shows the flag instead."""
    from gpuprep.cli import EXITS, FLAGS
    from gpuprep.errors import EXIT_BAD_INPUT, exit_for
    with pytest.raises(BadInput) as caught:
        call()
    error = caught.value
    assert error.argument == argument and "--" not in str(error) and str(error).startswith(argument + " ")
    code, message, _ = exit_for(error, FLAGS, EXITS)
    assert code == EXIT_BAD_INPUT and message.startswith(flag + " ")


def test_a_message_that_names_other_arguments_names_them_the_callers_way():
    from gpuprep.cli import EXITS, FLAGS
    from gpuprep.errors import exit_for
    with pytest.raises(BadInput) as caught:
        api.burnin(30, nnodes=2, node_rank=2, master="127.0.0.1:29500")
    assert str(caught.value) == "node_rank 2 must be below nnodes 2"
    assert exit_for(caught.value, FLAGS, EXITS)[1] == "--node-rank 2 must be below --nnodes 2"


def test_the_exit_table_maps_every_ending_once():
    """The CLI's one table from what ended a command to its exit code: gpuprep's errors, click's usage errors,
    interrupts and bugs (one line, exit 1: never a traceback unless GPUPREP_DEBUG=1)."""
    import click

    from gpuprep.cli import EXITS, FLAGS
    from gpuprep.errors import GpuprepError, exit_for
    assert exit_for(click.UsageError("no such option"), FLAGS, EXITS)[:2] == (2, "no such option")
    assert exit_for(GpuprepError("host h1 failed"), FLAGS, EXITS)[:2] == (1, "host h1 failed")
    assert exit_for(KeyboardInterrupt(), FLAGS, EXITS)[:2] == (130, "interrupted")
    code, message, debug = exit_for(ZeroDivisionError("x"), FLAGS, EXITS)
    assert code == 1 and message.startswith("internal error: ZeroDivisionError") and debug


@pytest.mark.parametrize("call, argument", [
    (lambda: api.check(sources="nvidia-smi.txt"), "sources"),           # one string: split into letters before
    (lambda: api.check(sources=[0]), "sources"),                         # read the caller's stdin and closed it
    (lambda: api.check(skip="gpu"), "skip"),
    (lambda: api.check(require_gpu="yes"), "require_gpu"),
    (lambda: api.snapshot(sources=[b"x"]), "sources"),
    (lambda: api.snapshot(dcgm_level=True), "dcgm_level"),
    (lambda: api.plan(ranks=0), "ranks"),
    (lambda: api.plan(mode="fast"), "mode"),
    (lambda: api.apply(tags="nccl_env"), "tags"),
    (lambda: api.apply(forks="ten"), "forks"),
    (lambda: api.apply(timeout=-5), "timeout"),
    (lambda: api.apply(verbosity="vv"), "verbosity"),
    (lambda: api.apply(variables=["a"]), "variables"),
    (lambda: api.revert(tags="nccl_env"), "tags"),
    (lambda: api.burnin(-1), "seconds"),
    (lambda: api.burnin(float("inf")), "seconds"),
    (lambda: api.burnin(5, backend="mpi"), "backend"),                   # started workers it left running
    (lambda: api.burnin(5, ranks=0), "ranks"),
    (lambda: api.diagnose("trace.json"), "paths"),
])
def test_the_api_names_the_wrong_argument_before_anything_starts(call, argument):
    """Checked at the entry, before torch is looked for, a file read or a run started (these pass on a machine
    without torch: the old burn-in checked torch first)."""
    with pytest.raises(BadInput) as caught:
        call()
    assert caught.value.argument == argument, caught.value
