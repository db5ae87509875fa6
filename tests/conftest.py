import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
CORPUS = Path(os.environ.get("GPUPREP_CORPUS", REPO.parent / "shared" / "corpus"))
sys.path.insert(0, str(Path(__file__).resolve().parent))


def corpus(name: str) -> str:
    return str(CORPUS / name)


def capture_files():
    return sorted(p.name for p in CORPUS.iterdir() if p.is_file() and p.suffix in (".txt", ".xml"))


def run_cli(*args, env=None, timeout=120):
    full_env = dict(os.environ)
    full_env.update(env or {})
    return subprocess.run([sys.executable, "-m", "gpuprep", *args], capture_output=True, text=True,
                          timeout=timeout, env=full_env)


@pytest.fixture(scope="session", autouse=True)
def _corpus_present():
    if not CORPUS.is_dir():
        pytest.exit(f"the capture corpus is missing at {CORPUS}", returncode=2)
