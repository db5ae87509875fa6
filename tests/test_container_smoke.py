"""container.gpu-smoke and container.nccl-limits (`check --deep`): judged on real `nvidia-smi -L` listings and real
failure outputs (tests/data/container/PROVENANCE.md), and run for real against this machine's Docker engine, which
has no GPU and no NVIDIA toolkit, so its own refusal is the failure a toolkit-less node shows."""
import json
import shutil
import subprocess

import pytest

from conftest import REPO, needs_no_gpu, run_cli
from gpuprep.parsers import import_files
from gpuprep.common.container_smoke import (
    judge_limits, parse_gpu_list, parse_ldd, parse_limits, smoke,
)
from gpuprep.rules import judge_all
from gpuprep.snapshot import CommandRun, Smoke, Snapshot
from containers import CORPUS, docker_ready

DATA = REPO / "tests" / "data" / "container"
ARGV = ["docker", "run", "--rm", "--network", "none", "--gpus", "all", "gpuprep/gpu-smoke:x", "nvidia-smi", "-L"]


def text(name):
    return (DATA / name).read_text()


def host_with_gpus(capture):
    return import_files([str(CORPUS / capture)])


def smoke_finding(snap, run):
    snap.container.docker_reachable = True
    snap.container.smoke = Smoke(image="gpuprep/gpu-smoke:x", gpu=run)
    found = [f for f in judge_all(snap) if f.id == "container.gpu-smoke"]
    assert len(found) == 1
    return found[0]


@pytest.mark.parametrize("name, gpus", [("a100-pcie-x2.docker-run.nvidia-smi-L.txt", 2),
                                        ("a100-sxm4-80gb-x4-mig.nvidia-smi-L.txt", 4),
                                        ("a10-t4-mixed-x4.nvidia-smi-L.txt", 4)])
def test_gpu_lines_are_counted_and_mig_devices_are_not(name, gpus):
    listed = parse_gpu_list(text(name))
    assert [i for i, _, _ in listed] == list(range(gpus))
    assert all(uuid.startswith("GPU-") for _, _, uuid in listed)


def test_a_container_that_sees_every_gpu_passes_and_one_that_sees_fewer_fails():
    two = host_with_gpus("dual-rtx-a5000.nvidia-smi-q.xml")                 # NVML-like facts: 2 GPUs
    seen = smoke_finding(two, CommandRun(ARGV, 0, text("a100-pcie-x2.docker-run.nvidia-smi-L.txt"), ""))
    assert seen.severity == "pass" and len(seen.evidence["listed"]) == 2
    eight = host_with_gpus("h100-sxm-x8.nvidia-smi-q.txt")
    short = smoke_finding(eight, CommandRun(ARGV, 0, text("a100-sxm4-80gb-x4-mig.nvidia-smi-L.txt"), ""))
    assert short.severity == "fail" and short.title == "a GPU container sees 4 GPU(s), the host has 8"


@pytest.mark.parametrize("name, stream, cause", [
    ("docker20.10-no-toolkit.gpus-all.stderr.txt", "stderr", "no GPU device driver"),
    ("docker20.10-no-runtime.runtime-nvidia.stderr.txt", "stderr", "no nvidia runtime"),
    ("issue-unknown-runtime.stderr.txt", "stderr", "no nvidia runtime"),
    ("issue-nvml-unknown-error.stdout.txt", "stdout", "lost access to the GPU device nodes"),
    ("issue-hook-libnvidia-ml.stderr.txt", "stderr", "cannot load the driver's libraries"),
    ("issue-hook-driver-not-loaded.stderr.txt", "stderr", "module is not loaded"),
    ("issue-driver-mismatch.stdout.txt", "stdout", "kernel module and the driver libraries differ"),
    ("issue-hook-driver-mismatch.stderr.txt", "stderr", "kernel module and the driver libraries differ"),
])
@pytest.mark.parametrize("rc", [0, 125])       # the sources do not show the exit code; either must fail
def test_each_real_failure_fails_with_its_cause(name, stream, cause, rc):
    output = {"stdout": "", "stderr": ""}
    output[stream] = text(name)
    found = smoke_finding(host_with_gpus("dual-rtx-a5000.nvidia-smi-q.xml"), CommandRun(ARGV, rc, **output))
    assert found.severity == "fail"
    assert cause in found.evidence["cause"]


def test_limits_from_real_containers():
    default = parse_limits(text("debian12-docker20.10-default.ulimit-l.txt")
                           + text("debian12-docker20.10-default.dev-shm.mountinfo.txt"))
    assert default == {"memlock_kib": 8192, "shm_bytes": 64 << 20, "shm_mounted": True}
    assert len(judge_limits(default)) == 2
    roomy = parse_limits("unlimited\n" + text("debian12-docker20.10-shm-1g.dev-shm.mountinfo.txt"))
    assert roomy == {"memlock_kib": None, "shm_bytes": 1 << 30, "shm_mounted": True}
    assert judge_limits(roomy) == []


def test_ldd_output_names_the_loader_and_libc():
    assert parse_ldd(text("debian12.ldd-bin-sh.txt")) == ["/lib/x86_64-linux-gnu/libc.so.6", "/lib64/ld-linux-x86-64.so.2"]


def test_a_snapshot_with_a_malformed_smoke_section_is_bad_input(tmp_path):
    snap = json.loads(Snapshot().to_json())
    snap["container"]["smoke"] = {"gpu": "nvidia-smi said ok"}
    path = tmp_path / "snap.json"
    path.write_text(json.dumps(snap))
    done = run_cli("check", "--from", str(path))
    assert done.returncode == 2 and "Traceback" not in done.stderr


def test_deep_needs_this_host():
    done = run_cli("check", "--deep", "--from", str(DATA / "debian12.ldd-bin-sh.txt"))
    assert done.returncode == 2 and "--deep" in done.stderr


@pytest.mark.docker
@pytest.mark.skipif(not docker_ready() or not shutil.which("ldd"), reason="needs Docker (.ci/docker-setup.sh)")
def test_real_docker_without_the_toolkit_fails_the_smoke_test_and_reports_its_limits():
    result = smoke("docker", runtimes=["runc"])
    assert result["error"] is None and result["image"].startswith("gpuprep/gpu-smoke:")
    snap = host_with_gpus("dual-rtx-a5000.nvidia-smi-q.xml")
    found = smoke_finding(snap, CommandRun(**result["gpu"]))
    assert found.severity == "fail" and "no GPU device driver" in found.evidence["cause"]
    assert result["limits"]["rc"] == 0
    limits = parse_limits(result["limits"]["stdout"])
    assert limits["shm_mounted"] and limits["shm_bytes"] > 0          # the host's /bin/sh ran in the image
    # the tag is the content's digest: the same host files give the same image; it is removed afterwards
    assert smoke("docker", runtimes=["runc"], with_gpus=False)["image"] == result["image"]
    left = subprocess.run(["docker", "image", "inspect", result["image"]], capture_output=True, text=True)
    assert left.returncode != 0


@pytest.mark.docker
@pytest.mark.skipif(not docker_ready(), reason="needs Docker (.ci/docker-setup.sh)")
@needs_no_gpu
def test_check_deep_on_this_host_reports_the_limits_and_no_smoke_pass_without_gpus():
    done = run_cli("check", "--deep", "--only", "container", "--json", "-v")
    document = json.loads(done.stdout)
    ids = {f["id"]: f for f in document["findings"]}
    assert ids["container.nccl-limits"]["severity"] in ("warn", "pass")
    assert "shm_bytes" in ids["container.nccl-limits"]["evidence"]
    assert "container.gpu-smoke" not in ids                          # no GPU here: nothing may pass
