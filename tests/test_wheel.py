"""A wheel install carries the playbooks and templates and runs `gpuprep check --from`."""
import subprocess
import sys
import venv

import pytest

from conftest import REPO, corpus


@pytest.mark.slow
def test_wheel_carries_playbooks_and_templates(tmp_path):
    dist = tmp_path / "dist"
    subprocess.run([sys.executable, "-m", "build", "--wheel", "--no-isolation", "--outdir", str(dist), str(REPO)],
                   check=True, capture_output=True, timeout=300)
    (wheel,) = dist.glob("gpuprep-*.whl")
    env_dir = tmp_path / "venv"
    venv.EnvBuilder(with_pip=True, system_site_packages=True).create(env_dir)
    python = env_dir / "bin" / "python"
    subprocess.run([str(python), "-m", "pip", "install", "-q", "--no-deps", "--no-index", str(wheel)],
                   check=True, capture_output=True, timeout=300)
    probe = subprocess.run([str(python), "-c",
                            "import gpuprep, gpuprep.resources as r; print(gpuprep.__file__); "
                            "print(r.playbooks_dir()); print(r.templates_dir())"],
                           capture_output=True, text=True, check=True, cwd=tmp_path)
    package_file, playbooks, templates = probe.stdout.split()
    assert str(env_dir) in package_file          # the installed copy, not the checkout
    assert playbooks.startswith(str(env_dir)) and templates.startswith(str(env_dir))
    from pathlib import Path
    assert (Path(playbooks) / "apply.yml").is_file()
    # the roles reach these by relative paths: ../../tasks, ../../library, their own vars/
    assert (Path(playbooks) / "tasks" / "converged.yml").is_file()
    assert (Path(playbooks) / "library" / "gpuprep_converged.py").is_file()
    assert (Path(playbooks) / "roles" / "gpu_clocks" / "vars" / "main.yml").is_file()
    assert any(Path(templates).iterdir())
    check = subprocess.run([str(env_dir / "bin" / "gpuprep"), "check", "--from", corpus("h100-sxm-x8.nvidia-smi.txt")],
                           capture_output=True, text=True, cwd=tmp_path, timeout=60)
    assert check.returncode == 0 and "GPUs (8)" in check.stdout
