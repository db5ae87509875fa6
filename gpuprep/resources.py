"""Where the shipped playbooks live: inside the installed package (wheel) or at
the top of a source checkout (editable install)."""
from __future__ import annotations

from pathlib import Path

_PACKAGE = Path(__file__).resolve().parent


def shared_dir(name: str) -> Path:
    for candidate in (_PACKAGE / "share" / name, _PACKAGE.parent / name):
        if candidate.is_dir():
            return candidate
    raise FileNotFoundError(f"gpuprep installation is missing its {name}/ directory")


def playbooks_dir() -> Path:
    return shared_dir("playbooks")

