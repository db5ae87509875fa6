import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
# the capture corpus travels with the tests (tests/corpus/PROVENANCE.tsv says where each file came from)
CORPUS = REPO / "tests" / "corpus"
sys.path.insert(0, str(Path(__file__).resolve().parent))


def collection_builder():
    """tools/build_collection.py, the one build step that completes collection/ (loaded by its path, as setup.py does)."""
    import importlib.util
    spec = importlib.util.spec_from_file_location("build_collection", REPO / "tools" / "build_collection.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def isolated_ansible_env(tmp: Path) -> dict:
    """The environment for a tool that installs the collection it lints or tests (ansible-lint, Molecule): its
    ANSIBLE_HOME and caches in `tmp`, never the user's ~/.ansible/collections, where a stale gpuprep.node would
    later make `ansible-galaxy collection install` of a fresh build answer "already installed"."""
    env = {key: value for key, value in os.environ.items() if key != "VIRTUAL_ENV"}
    return dict(env, ANSIBLE_HOME=str(tmp / "ansible-home"), XDG_CACHE_HOME=str(tmp / "cache"))


def corpus(name: str) -> str:
    return str(CORPUS / name)


def capture_files():
    return sorted(p.name for p in CORPUS.iterdir() if p.is_file() and p.suffix in (".txt", ".xml"))


def host_gpus() -> int:
    """NVIDIA GPUs this machine has (nvidia-smi -L): tests that assume none, or need one, say which."""
    import shutil
    if not shutil.which("nvidia-smi"):
        return 0
    try:
        done = subprocess.run(["nvidia-smi", "-L"], capture_output=True, text=True, timeout=60)
    except (OSError, subprocess.SubprocessError):
        return 0
    return sum(1 for line in done.stdout.splitlines() if line.startswith("GPU "))


HOST_GPUS = host_gpus()
needs_no_gpu = pytest.mark.skipif(HOST_GPUS > 0, reason="asserts what a host without NVIDIA GPUs does")


# The files that take longest, longest first (per-file seconds on 2 cores, as printed at the end of a run):
# the workers start them first, so no long file is left to run alone at the end (tests/run.sh keeps this order
# with --no-loadscope-reorder). Order only: a file missing here runs after these, in its usual place.
LONGEST_FILES = ("test_fleet.py", "test_faults.py", "test_burnin.py", "test_fabric_role.py", "test_watch.py",
                 "test_molecule.py", "test_job_across_nodes.py", "test_slurm.py", "test_user_install.py",
                 "test_collection.py", "test_loop.py", "test_burnin_peers.py", "test_acs_role.py",
                 "test_ssh_role.py", "test_lint.py", "test_diagnose.py")


def pytest_collection_modifyitems(config, items):
    # `pytest -m gpu` is the acceptance kit for a machine with NVIDIA GPUs; elsewhere those tests skip
    skip = pytest.mark.skip(reason="needs an NVIDIA GPU (nvidia-smi -L lists none)")
    for item in items:
        if "gpu" in item.keywords and HOST_GPUS == 0:
            item.add_marker(skip)
    rank = {name: i for i, name in enumerate(LONGEST_FILES)}
    items.sort(key=lambda item: rank.get(item.path.name, len(rank)))     # stable: each file's own order is kept


def pytest_terminal_summary(terminalreporter):
    """Each file's seconds (setup, call and teardown of its tests), the longest first: where a suite that grows
    past its time budget spends it, and the order LONGEST_FILES should have."""
    seconds = {}
    for reports in terminalreporter.stats.values():
        for report in reports:
            if getattr(report, "when", None) and getattr(report, "nodeid", None):
                name = report.nodeid.split("::")[0]
                seconds[name] = seconds.get(name, 0.0) + getattr(report, "duration", 0.0)
    if seconds:
        longest = sorted(seconds.items(), key=lambda kv: -kv[1])[:20]
        terminalreporter.write_sep("=", "longest files (seconds)")
        for name, total in longest:
            terminalreporter.write_line(f"{total:8.1f}  {name}")


@pytest.fixture
def cpu_hog():
    """Two busy-looping processes beside the test (the machine has 2 cores): verdicts must not depend on load."""
    import subprocess
    import sys
    hogs = [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(2)]
    yield
    for hog in hogs:
        hog.kill()
        hog.wait()


def run_cli(*args, env=None, timeout=120):
    full_env = dict(os.environ)
    full_env.update(env or {})
    return subprocess.run([sys.executable, "-m", "gpuprep", *args], capture_output=True, text=True,
                          timeout=timeout, env=full_env)


def pytest_sessionstart(session):
    # Without Docker the container tests skip (a laptop runs the rest); CI sets GPUPREP_REQUIRE_DOCKER=1 so a
    # missing engine is a failure there, not a quiet skip of half the suite.
    if os.environ.get("GPUPREP_REQUIRE_DOCKER") == "1":
        from containers import docker_ready
        if not docker_ready():
            pytest.exit("GPUPREP_REQUIRE_DOCKER=1 but the Docker engine or base image is missing "
                        "(.ci/docker-setup.sh)", returncode=2)
