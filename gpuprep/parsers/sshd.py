"""`sshd -T` captures as a snapshot; the reading itself is shared with the roles (parsers/sshd_config.py)."""
from __future__ import annotations

from .sshd_config import parse_sshd_config, parse_sshd_t
from ..snapshot import Snapshot

__all__ = ["looks_like_sshd_t", "parse_sshd_t", "parse_sshd_config", "import_sshd_t"]


def looks_like_sshd_t(text: str) -> bool:
    keys = {line.split(" ", 1)[0] for line in text.splitlines()[:200]}
    return {"permitrootlogin", "passwordauthentication", "pubkeyauthentication"} <= keys


def import_sshd_t(text: str, origin: str) -> Snapshot:
    snap = Snapshot(sources=[origin])
    snap.settings.sshd = parse_sshd_t(text)
    return snap
