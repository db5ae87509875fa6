"""gpuprep as a user gets it: the wheel in a fresh venv with only its runtime dependencies (no test extras,
no `ansible` bundle, nothing from this venv). Every command runs from there, every shipped playbook passes
`ansible-playbook --syntax-check`, and `apply` then `revert` work against a real systemd container.

The test's only addition is its transport to the container: the community.docker collection, alone in a
collections path (a user's real nodes are reached over SSH, which ansible-core has built in)."""
import importlib.util
import json
import os
import shutil
import subprocess
import sys
import venv
from pathlib import Path

import pytest

from conftest import REPO, corpus
from containers import docker_ready, node_exec, prepare, remove_nodes, start_nodes, write_inventory

pytestmark = [pytest.mark.slow]

NAME = f"gpuprep-user-{os.getpid()}"


@pytest.fixture(scope="module")
def user_venv(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("user")
    dist = tmp / "dist"
    subprocess.run([sys.executable, "-m", "build", "--wheel", "--no-isolation", "--outdir", str(dist), str(REPO)],
                   check=True, capture_output=True, timeout=600)
    (wheel,) = dist.glob("gpuprep-*.whl")
    env_dir = tmp / "venv"
    venv.EnvBuilder(with_pip=True, system_site_packages=False).create(env_dir)
    done = subprocess.run([str(env_dir / "bin" / "python"), "-m", "pip", "install", "-q", str(wheel)],
                          capture_output=True, text=True, timeout=1200)
    assert done.returncode == 0, done.stderr[-3000:]
    return env_dir


def user_env(tmp: Path, collections: Path = None) -> dict:
    """Nothing of the test venv: its bin/ is not on PATH, and the only collections are the given ones."""
    test_bin = os.path.dirname(sys.executable)
    path = os.pathsep.join(p for p in os.environ["PATH"].split(os.pathsep) if os.path.realpath(p) != os.path.realpath(test_bin))
    env = {k: v for k, v in os.environ.items() if not k.startswith(("ANSIBLE_", "VIRTUAL_ENV", "PYTHON"))}
    env.update(PATH=path, HOME=str(tmp), ANSIBLE_COLLECTIONS_PATH=str(collections or tmp / "no-collections"),
               ANSIBLE_NOCOLOR="1")
    return env


def run(venv_dir: Path, env: dict, *args, timeout=900):
    return subprocess.run([str(venv_dir / "bin" / "gpuprep"), *args], capture_output=True, text=True, env=env,
                          timeout=timeout, cwd=env["HOME"])


def test_the_install_has_its_runtime_dependencies_only(user_venv):
    listed = subprocess.run([str(user_venv / "bin" / "python"), "-m", "pip", "list", "--format", "json"],
                            capture_output=True, text=True, check=True, timeout=120, cwd=user_venv)
    names = {p["name"].lower() for p in json.loads(listed.stdout)}
    assert {"gpuprep", "ansible-core", "ansible-runner"} <= names
    assert not names & {"ansible", "pytest", "molecule", "torch"}


def test_every_shipped_playbook_passes_syntax_check(user_venv, tmp_path):
    env = user_env(tmp_path)
    where = subprocess.run([str(user_venv / "bin" / "python"), "-c",
                            "import gpuprep.ansible.runner as r; print(r.ansible_settings()['ANSIBLE_COLLECTIONS_PATH'])"],
                           capture_output=True, text=True, env=env, check=True, timeout=60, cwd=tmp_path).stdout.strip()
    collections = where.split(os.pathsep)[0]
    assert collections.startswith(str(user_venv))           # the installed copy of the collection, not the checkout
    playbooks = sorted((Path(collections) / "ansible_collections" / "gpuprep" / "node" / "playbooks").glob("*.yml"))
    assert {p.name for p in playbooks} >= {"apply.yml", "revert.yml", "burnin.yml", "check.yml"}
    for playbook in playbooks:
        # by the collection playbook's name, as a user of the collection runs it
        done = subprocess.run([str(user_venv / "bin" / "ansible-playbook"), "--syntax-check", "-i", "localhost,",
                               f"gpuprep.node.{playbook.stem}"], capture_output=True, text=True,
                              env=dict(env, ANSIBLE_COLLECTIONS_PATH=where), timeout=300, cwd=tmp_path)
        assert done.returncode == 0, f"{playbook.name}: {done.stdout[-1500:]}{done.stderr[-1500:]}"


@pytest.mark.skipif(importlib.util.find_spec("torch") is None, reason="the watched job is a PyTorch loop")
def test_watch_from_the_plain_install_names_a_starved_job(user_venv, tmp_path):
    """`pip install gpuprep` brings py-spy: watch of a data-starved loop (the job runs on its own interpreter, which
    has torch; gpuprep from the user's install) names the DataLoader, never OK."""
    assert (user_venv / "bin" / "py-spy").exists()
    env = dict(user_env(tmp_path), TRAIN_STEPS="150")
    done = run(user_venv, env, "watch", "--json", "--", sys.executable, str(REPO / "tests" / "data" / "jobs" / "train.py"),
               "data-bound", str(tmp_path), timeout=600)
    doc = json.loads(done.stdout)
    assert done.returncode == 0 and doc["exit_code"] == 0, done.stderr[-2000:]
    assert "job.dataloader" in {f["id"] for f in doc["findings"] if f["severity"] in ("warn", "fail")}, doc["findings"]


def test_offline_commands_run(user_venv, tmp_path):
    env = user_env(tmp_path)
    check = run(user_venv, env, "check", "--from", corpus("h100-sxm-x8.nvidia-smi.txt"))
    assert check.returncode == 0 and "GPUs (8)" in check.stdout, check.stderr
    snap = tmp_path / "snap.json"
    assert run(user_venv, env, "snapshot", "--no-docker", "-o", str(snap)).returncode == 0
    assert json.loads(snap.read_text())["schema"].startswith("gpuprep.snapshot/")
    compat = run(user_venv, env, "compat", "--driver", "535.104.05", "--cuda", "12.2", "--json")
    assert compat.returncode == 0 and json.loads(compat.stdout)["verdict"] in ("pass", "info")
    nccl = run(user_venv, env, "nccl-env", "--from", corpus("h100-sxm-x8.nvidia-smi-q.txt"), "--json")
    assert nccl.returncode == 0 and "NCCL_IB_DISABLE" not in json.loads(nccl.stdout)     # no NIC facts: not known
    plan = run(user_venv, env, "plan", "--from", corpus("h100-sxm-x8-ib-penny.topo-m.txt"), "--json")
    assert plan.returncode == 0 and json.loads(plan.stdout)["ranks"][0]["nic"] == "mlx5_ib0", plan.stderr
    local = run(user_venv, env, "plan", "--nproc-per-node", "1")           # this host's CPUs, no GPU
    assert local.returncode == 0 and "Launch plan" in local.stdout, local.stderr
    launched = subprocess.run([str(user_venv / "bin" / "gpuprep"), "launch", "--", "true"], capture_output=True,
                              text=True, env=dict(env, LOCAL_RANK="0", LOCAL_WORLD_SIZE="1"), timeout=120)
    assert launched.returncode == 0, launched.stderr
    burnin = run(user_venv, env, "burnin", "--duration", "10s")
    assert burnin.returncode == 2 and "pip install 'gpuprep[burnin]'" in burnin.stderr
    assert "Traceback" not in burnin.stderr
    page = tmp_path / "report.html"        # the HTML template ships in the wheel
    assert run(user_venv, env, "check", "--from", corpus("h100-sxm-x8.nvidia-smi.txt"), "-o", str(page)).returncode == 0
    assert "<svg" in page.read_text()
    pyz = tmp_path / "probe.pyz"           # the node probe, built from the installed package alone
    assert run(user_venv, env, "zipapp", "-o", str(pyz)).returncode == 0
    probe = subprocess.run(["/usr/bin/python3", str(pyz), "snapshot"], capture_output=True, text=True, timeout=120,
                           env={"PATH": "/usr/bin:/bin"}, cwd=tmp_path)
    assert probe.returncode == 0 and json.loads(probe.stdout)["schema"].startswith("gpuprep.snapshot/"), probe.stderr


@pytest.mark.docker
def test_apply_and_revert_a_container_from_the_user_install(user_venv, tmp_path):
    if not docker_ready():
        pytest.fail("Docker engine or base image missing: run .ci/docker-setup.sh", pytrace=False)
    import ansible_collections.community.docker as docker_collection     # the test venv's, copied alone
    collections = tmp_path / "collections" / "ansible_collections" / "community"
    shutil.copytree(Path(docker_collection.__file__).parent if docker_collection.__file__
                    else Path(list(docker_collection.__path__)[0]), collections / "docker")
    env = user_env(tmp_path, tmp_path / "collections")
    start_nodes([NAME])
    try:
        node_exec(NAME, "systemctl", "is-system-running", "--wait")
        # the PCIe ACS concern too: fake lspci/setpci answer from a capture with ACS on above a GPU and a ConnectX
        inventory = write_inventory(tmp_path / "inventory.yml", [NAME], group_vars={
            "system_tuning_acs_enabled": True, "fake_pci_capture": "pex8747-titanx-cx6-acs-redirect.lspci-vvv.txt"})
        prepare(inventory)                          # the fake GPU tools: the test's own harness

        def acs_registers():
            return [node_exec(NAME, "setpci", "-s", bdf, "ECAP_ACS+0x6.w").stdout.strip()
                    for bdf in ("0000:03:08.0", "0000:03:10.0")]
        assert node_exec(NAME, "test", "-e", "/etc/gpuprep/env").returncode != 0
        applied = run(user_venv, env, "apply", "-i", str(inventory), "--json")
        assert "Traceback" not in applied.stderr, applied.stderr
        doc = json.loads(applied.stdout)
        assert applied.returncode == 0 and doc["ok"], json.dumps(doc["hosts"], indent=1)[-3000:]
        assert doc["hosts"][NAME]["changed"] > 0
        assert 'NCCL_SOCKET_IFNAME="=eth0"' in node_exec(NAME, "cat", "/etc/gpuprep/env").stdout
        assert node_exec(NAME, "systemctl", "is-active", "nvidia-persistenced").stdout.strip() == "active"
        assert acs_registers() == ["0000", "0000"]

        fleet = run(user_venv, env, "check", "-i", str(inventory), "--format", "prometheus")
        assert f'gpuprep_host_checked{{host="{NAME}"}} 1.0' in fleet.stdout, fleet.stderr[-2000:]

        reverted = run(user_venv, env, "revert", "-i", str(inventory), "--json")
        assert reverted.returncode == 0 and json.loads(reverted.stdout)["ok"], reverted.stdout[-3000:]
        assert node_exec(NAME, "test", "-e", "/etc/gpuprep/env").returncode != 0
        assert node_exec(NAME, "test", "-e", "/etc/systemd/system/gpuprep-clocks.service").returncode != 0
        assert acs_registers() == ["001d", "001d"]
    finally:
        remove_nodes([NAME])
