"""Make collection/ a complete Ansible collection (gpuprep.node) by copying into it what it shares with the
gpuprep package, whose copy is the one that is edited and tracked: the standard-library modules the
collection's modules import from plugins/module_utils, the GPU table two roles read, and the license.
The copies are committed, so the collection's git tree installs as it stands (a test checks that each is what this
writes); they are rewritten only when their source changed.

The one build step for every consumer: setup.py (the wheel carries the collection), gpuprep.resources (a source
checkout's `gpuprep apply`, the tests and Molecule), and a collection build by hand:

    python tools/build_collection.py && ansible-galaxy collection build collection

Standard library only: setup.py loads this file by its path, before anything is installed."""
from __future__ import annotations

import ast
import os
import shutil
import sys
from pathlib import Path
from typing import Dict, List

REPO = Path(__file__).resolve().parent.parent
UTILS = "plugins/module_utils"
# collection path -> the package's file it is copied from
SHARED_MODULES: Dict[str, str] = {
    f"{UTILS}/gpuprep_nvsmi.py": "gpuprep/parsers/nvsmi.py",
    f"{UTILS}/gpuprep_lspci.py": "gpuprep/parsers/lspci_vvv.py",
    f"{UTILS}/gpuprep_sshd.py": "gpuprep/parsers/sshd_config.py",
    f"{UTILS}/gpuprep_gputable.py": "gpuprep/common/gputable.py",
    f"{UTILS}/gpuprep_ncclenv.py": "gpuprep/common/ncclenv.py",
    f"{UTILS}/gpuprep_revert_record.py": "gpuprep/common/revert_record.py",
    f"{UTILS}/gpuprep_container_smoke.py": "gpuprep/common/container_smoke.py",
}
SHARED_FILES: Dict[str, str] = {
    f"{UTILS}/__init__.py": "gpuprep/common/__init__.py",
    "roles/gpu_clocks/files/gpus.csv": "gpuprep/data/gpus.csv",
    "roles/fabric_manager/files/gpus.csv": "gpuprep/data/gpus.csv",
    "LICENSE": "LICENSE",
}
# what an installed gpuprep carries of the collection (gpuprep/share/ansible_collections/gpuprep/node)
SHIPPED = ("galaxy.yml", "README.md", "LICENSE", "meta", "roles", "plugins", "playbooks")


class BuildError(Exception):
    pass


def _header(source: str) -> str:
    return f"# Built by tools/build_collection.py from {source}, gpuprep's one copy: edit that file, not this one.\n"


def _standard_library_only(path: Path) -> None:
    """A module the collection runs on a node can import nothing of gpuprep's (only this file is copied there)."""
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        names = ([alias.name for alias in node.names] if isinstance(node, ast.Import)
                 else [node.module or ""] if isinstance(node, ast.ImportFrom) and node.level == 0
                 else ["."] if isinstance(node, ast.ImportFrom) else [])
        for name in names:
            top = name.split(".")[0]
            if name == "." or top not in sys.stdlib_module_names and top != "__future__":
                raise BuildError(f"{path}: line {node.lineno}: imports {name or 'a sibling'}; a module shared with "
                                 "the collection may import the standard library only")


def content(repo: Path, target: str, source: str) -> bytes:
    path = repo / source
    if target in SHARED_MODULES:
        _standard_library_only(path)
        return _header(source).encode() + path.read_bytes()
    return path.read_bytes()


def _write(path: Path, body: bytes) -> bool:
    if path.is_file() and not path.is_symlink() and path.read_bytes() == body:
        return False
    path.parent.mkdir(parents=True, exist_ok=True)
    temporary = path.with_name(f".{path.name}.{os.getpid()}")
    temporary.write_bytes(body)
    os.replace(temporary, path)       # whole or not at all: a concurrent Ansible run never reads half a module
    return True


def sync(repo: Path = REPO) -> List[str]:
    """Bring collection/'s copies up to date; return the collection paths rewritten."""
    collection = repo / "collection"
    if not (collection / "galaxy.yml").is_file():
        raise BuildError(f"{collection}: no galaxy.yml: not a gpuprep source tree")
    written = []
    for target, source in {**SHARED_MODULES, **SHARED_FILES}.items():
        if _write(collection / target, content(repo, target, source)):
            written.append(target)
    return written


def stage(repo: Path, destination: Path) -> None:
    """Copy the collection as an installed gpuprep carries it to `destination` (replaced)."""
    sync(repo)
    if destination.exists():
        shutil.rmtree(destination)
    destination.mkdir(parents=True)
    for name in SHIPPED:
        source = repo / "collection" / name
        if source.is_dir():
            shutil.copytree(source, destination / name, ignore=shutil.ignore_patterns("__pycache__", "*.retry"))
        else:
            shutil.copy(source, destination / name)


def main(argv: List[str]) -> int:
    try:
        written = sync()
    except (BuildError, OSError, SyntaxError) as error:
        print(f"build_collection: error: {error}", file=sys.stderr)
        return 2
    print(f"collection/: {len(written)} file(s) rewritten" + (f": {', '.join(written)}" if written else ""))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
