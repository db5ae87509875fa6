"""The node probe's zipapp runs on the nodes' own python3, older than the controller's 3.11: its code is checked
with vermin against the floor the README promises (3.8), and the bundled prometheus-client against the textfile
command's own floor."""
import json
import os
import subprocess
import sys
import zipfile

import pytest

from gpuprep.probe_main import TEXTFILE_MIN_PYTHON
from gpuprep.zipapp import MIN_PYTHON, _members

VERMIN = os.path.join(os.path.dirname(sys.executable), "vermin")
pytestmark = pytest.mark.skipif(not os.path.exists(VERMIN), reason="vermin not installed (pip install -e '.[test]')")


def _vermin(files, floor):
    done = subprocess.run([VERMIN, "--no-tips", "--violations", "--eval-annotations",
                           f"--target={'.'.join(map(str, floor))}-", *files], capture_output=True, text=True, timeout=300)
    return done.returncode, done.stdout


def test_gpupreps_own_zipapp_code_runs_on_the_oldest_node_python():
    files = [str(path) for name, path in _members() if name.startswith("gpuprep/") and name.endswith(".py")]
    assert len(files) > 30
    code, report = _vermin(files, MIN_PYTHON)
    assert code == 0, report[-3000:]


def test_bundled_libraries_run_where_their_commands_need_them():
    nvml = [str(path) for name, path in _members() if name == "pynvml.py"]
    assert _vermin(nvml, MIN_PYTHON)[0] == 0            # the snapshot reads NVML on every node
    prometheus = [str(path) for name, path in _members() if name.startswith("prometheus_client/")]
    code, report = _vermin(prometheus, TEXTFILE_MIN_PYTHON)
    assert code == 0, report[-3000:]


def test_the_zipapp_carries_the_builtin_profiles_as_json(tmp_path, monkeypatch):
    from gpuprep.profiles import builtin
    from gpuprep.zipapp import probe_zipapp
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    with zipfile.ZipFile(probe_zipapp()) as archive:
        assert json.loads(archive.read("gpuprep/data/profiles.json")) == builtin()
