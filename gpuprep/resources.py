"""Where gpuprep's Ansible collection (gpuprep.node: roles, modules, playbooks) lives. An installed wheel
carries it as gpuprep/share/ansible_collections/gpuprep/node; a source checkout keeps it in collection/, beside
the package, completed by tools/build_collection.py (run here, so a checkout never runs stale copies) and found by
Ansible through a link in gpuprep's cache directory, since Ansible looks a collection up as
COLLECTIONS_PATH/ansible_collections/NAMESPACE/NAME."""
from __future__ import annotations

import functools
import hashlib
import importlib.util
import os
from pathlib import Path

_PACKAGE = Path(__file__).resolve().parent
NAMESPACE, NAME = "gpuprep", "node"


def _cache_dir() -> Path:
    return Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "gpuprep"


@functools.lru_cache(maxsize=None)     # a checkout is synced once per process (lru_cache: nodes run Python 3.8)
def collections_path() -> Path:
    """The directory to put on ANSIBLE_COLLECTIONS_PATH so that gpuprep.node is this gpuprep's collection."""
    shipped = _PACKAGE / "share"
    if (shipped / "ansible_collections" / NAMESPACE / NAME / "galaxy.yml").is_file():
        return shipped
    checkout = _PACKAGE.parent
    builder = checkout / "tools" / "build_collection.py"
    if not ((checkout / "collection" / "galaxy.yml").is_file() and builder.is_file()):
        raise FileNotFoundError("gpuprep installation is missing its Ansible collection (gpuprep.node)")
    _build(builder, checkout)
    return _link_checkout(checkout / "collection")


def _build(builder: Path, checkout: Path) -> None:
    spec = importlib.util.spec_from_file_location("gpuprep_build_collection", builder)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    module.sync(checkout)


def _link_checkout(collection: Path) -> Path:
    # one link per checkout (named by its path), replaced atomically so concurrent runs never see it missing
    top = _cache_dir() / "collections" / hashlib.sha256(str(collection).encode()).hexdigest()[:12]
    link = top / "ansible_collections" / NAMESPACE / NAME
    if not (link.is_symlink() and Path(os.readlink(link)) == collection):
        link.parent.mkdir(parents=True, exist_ok=True)
        temporary = link.with_name(f".{NAME}.{os.getpid()}")
        temporary.unlink(missing_ok=True)
        temporary.symlink_to(collection, target_is_directory=True)
        os.replace(temporary, link)
    return top


def collection_dir() -> Path:
    return collections_path() / "ansible_collections" / NAMESPACE / NAME


def playbooks_dir() -> Path:
    return collection_dir() / "playbooks"
