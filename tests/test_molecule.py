"""Every Molecule scenario, run for real: create, prepare, converge, idempotence, verify, revert, destroy."""
import os
import subprocess
import sys

import pytest

from conftest import REPO, isolated_ansible_env
from containers import docker_ready
from gpuprep.ansible.runner import mitogen_env

pytestmark = [pytest.mark.docker, pytest.mark.slow]
SCENARIOS = sorted(p.name for p in (REPO / "collection" / "molecule").iterdir() if (p / "molecule.yml").is_file())


@pytest.mark.parametrize("scenario", SCENARIOS)
def test_molecule_scenario(scenario, tmp_path):
    if not docker_ready():
        pytest.fail("Docker engine or base image missing: run .ci/docker-setup.sh")
    bindir = os.path.dirname(sys.executable)
    mitogen = mitogen_env()
    env = dict(isolated_ansible_env(tmp_path), PATH=bindir + os.pathsep + os.environ.get("PATH", ""), ANSIBLE_FORCE_COLOR="0",
               PY_COLORS="0", ANSIBLE_NOCOLOR="1", GPUPREP_MOLECULE_STRATEGY=mitogen.get("ANSIBLE_STRATEGY", "linear"),
               GPUPREP_MOLECULE_STRATEGY_PLUGINS=mitogen.get("ANSIBLE_STRATEGY_PLUGINS", ""))
    done = subprocess.run([os.path.join(bindir, "molecule"), "test", "-s", scenario], cwd=REPO / "collection", env=env,
                          capture_output=True, text=True, timeout=1500)
    assert done.returncode == 0, (done.stdout + done.stderr)[-6000:]
    assert "idempotence" in done.stdout + done.stderr
