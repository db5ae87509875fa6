"""Every command of the CLI has its library function, called here directly with no CLI in between: the CLI only
parses, calls gpuprep.api, renders and maps errors to exit codes. A new command without an API function fails the
first test; each API function does its command's work on real inputs (captures, a trace, a stand-in scontrol)."""
import os
import sys
from pathlib import Path

import pytest

from conftest import REPO, corpus
from gpuprep import api
from gpuprep.cli import cli
from gpuprep.errors import BadInput

HEALTHY = "a100-sxm4-x4.nvidia-smi-q.txt"      # gpu.row-remap fails on it (a remap is pending)
SLURM = REPO / "tests" / "data" / "slurm"
TRACE = next((REPO / "tests" / "traces" / "kineto-resnet50").rglob("*.json*"))

# command -> the api function it calls
COMMANDS = {"snapshot": (api.snapshot, api.gather_fleet, api.save_fleet), "check": (api.check, api.check_fleet),
            "diagnose": (api.diagnose, api.compare), "watch": (api.watch, api.watch_slurm_job, api.watch_inventory_job, api.node_problems), "fleet": (api.fleet_report,), "compat": (api.compat,), "plan": (api.plan,),
            "launch": (api.launch,), "nccl-env": (api.nccl_env,), "apply": (api.apply,), "revert": (api.revert,),
            "burnin": (api.burnin, api.ready_store, api.store_burnin, api.compare_with_fleet), "slurm": (api.slurm_hook,), "npd": (api.npd,), "nagios": (api.nagios,),
            "zipapp": (api.zipapp,)}


def test_every_command_has_its_api_function():
    assert set(cli.commands) == set(COMMANDS)
    assert all(callable(f) and f.__module__ == "gpuprep.api" for functions in COMMANDS.values() for f in functions)


def test_snapshot_check_and_a_saved_fleet(tmp_path):
    snap = api.snapshot([corpus(HEALTHY)])
    assert len(snap.gpus) == 4
    result = api.check([corpus(HEALTHY)])
    assert result.verdict == "fail" and "gpu.row-remap" in {f.id for f in result.failed}
    other = api.snapshot([corpus("h100-sxm-x8.nvidia-smi-q.txt")])
    for name, facts in (("a", snap), ("b", other)):
        facts.system.hostname = name
        (tmp_path / f"{name}.json").write_text(facts.to_json())
    members = api.saved_fleet([str(tmp_path)])
    fleet = api.check_fleet(members)
    assert {m.name for m in fleet.fleet.members} == {"a", "b"} and fleet.document()["verdict"] == "fail"
    saved = tmp_path / "saved"
    saved.mkdir()
    assert len(api.save_fleet(members, str(saved))) == 2
    with pytest.raises(BadInput):
        api.check_fleet(members, inventory="hosts")


def test_diagnose_compat_plan_and_nccl_env():
    assert api.diagnose([str(TRACE)]).document()["schema"].startswith("gpuprep.diagnose/")
    assert {f.id for f in api.compat("535.104.05", cuda="12.8")} == {"compat.toolkit-driver"}     # CUDA 12.8 needs driver 570+
    plan = api.plan(sources=[corpus("h100-sxm-x8-ib-penny.topo-m.txt")], ranks=2)
    assert len(plan.ranks) == 2
    env = api.nccl_env([corpus(HEALTHY)], default_interface="eth0", overrides={"NCCL_DEBUG": "INFO"})
    assert env["NCCL_DEBUG"] == "INFO" and env["NCCL_SOCKET_IFNAME"]


def test_the_node_hooks(tmp_path):
    code, line = api.npd([corpus(HEALTHY)])
    assert code == 1 and line.startswith("gpu.row-remap")
    code, line = api.nagios([corpus(HEALTHY)])
    assert code == 2 and line.startswith("GPUPREP CRITICAL")
    scontrol, log = tmp_path / "scontrol", tmp_path / "scontrol.log"
    scontrol.write_text(f"#!/bin/sh\nif [ \"$1\" = show ]; then cat {SLURM / 'scontrol-show-node-idle.txt'}; exit 0; fi\n"
                        f"printf '%s\\n' \"$*\" >> {log}\n")
    scontrol.chmod(0o755)
    code, line = api.slurm_hook("healthcheck", sources=[corpus(HEALTHY)], scontrol=str(scontrol), node="node1",
                                baseline_dir=str(tmp_path / "state"))
    assert code == 1 and "drain" in line and "State=DRAIN" in log.read_text()
    with pytest.raises(BadInput):
        api.slurm_hook("teardown", sources=[corpus(HEALTHY)])


def test_the_probe_zipapp_and_watch(tmp_path):
    written = api.zipapp(str(tmp_path / "probe.pyz"))
    assert Path(written).stat().st_size > 100_000
    result = api.watch(command=[sys.executable, "-c", "import time; time.sleep(1.5)"], seconds=5, interval=0.5,
                       job_stdout=open(os.devnull, "w"))
    assert result.document()["schema"].startswith("gpuprep.watch/")


@pytest.mark.parametrize("call", [
    lambda: api.apply("hosts", local=True),              # an inventory and --local: refused before Ansible runs
    lambda: api.revert("hosts", local=True),
    lambda: api.burnin(-1),
    lambda: api.launch([]),
    lambda: api.watch(os.getpid(), until="soon"),                       # warn or fail
    lambda: api.watch(command=[sys.executable, "-c", "pass"], until="warn"),  # would stop the watch, not the job
])
def test_the_commands_that_change_a_host_refuse_bad_arguments_before_acting(call):
    """apply, revert, burnin and launch run for real in their own tests (containers, torchrun); here: callable
    without the CLI, and they refuse bad input as BadInput before touching anything."""
    with pytest.raises(BadInput):
        call()
