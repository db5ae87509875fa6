"""`sshd -T` (the server's effective configuration, one `keyword value` line each, keywords in lower case) and,
where `sshd -T` cannot run, `sshd_config` with its Include'd drop-ins, read the way sshd reads them: the first
value of a keyword wins, and what follows a `Match` line applies only to some connections."""
from __future__ import annotations

import glob
import os
from typing import Dict

from ..snapshot import Snapshot

# the keywords the ssh rules judge (sshd -T prints ~90; the rest stay out of the snapshot)
KEYWORDS = ("permitrootlogin", "passwordauthentication", "kbdinteractiveauthentication",
            "challengeresponseauthentication", "pubkeyauthentication", "usepam", "authenticationmethods")


def looks_like_sshd_t(text: str) -> bool:
    keys = {line.split(" ", 1)[0] for line in text.splitlines()[:200]}
    return {"permitrootlogin", "passwordauthentication", "pubkeyauthentication"} <= keys


def parse_sshd_t(text: str) -> Dict[str, str]:
    settings: Dict[str, str] = {}
    for line in text.splitlines():
        key, _, value = line.strip().partition(" ")
        if key in KEYWORDS:
            settings.setdefault(key, value.strip())
    return settings


def import_sshd_t(text: str, origin: str) -> Snapshot:
    snap = Snapshot(sources=[origin])
    snap.settings.sshd = parse_sshd_t(text)
    return snap


def parse_sshd_config(path: str = "/etc/ssh/sshd_config", root: str = "/", depth: int = 0) -> Dict[str, str]:
    """The effective values of sshd_config at `path` below `root`, following Include (relative to /etc/ssh,
    globbed in lexical order, as sshd does)."""
    settings: Dict[str, str] = {}
    try:
        with open(os.path.join(root, path.lstrip("/")), errors="replace") as fh:
            text = fh.read()
    except OSError:
        return settings
    for line in text.splitlines():
        words = line.split("#", 1)[0].split()
        if not words:
            continue
        key, values = words[0].lower(), words[1:]
        if key == "match":
            break                                  # conditional blocks: not what every login gets
        if key == "include" and depth < 8:
            for pattern in values:
                pattern = pattern if pattern.startswith("/") else "/etc/ssh/" + pattern
                for found in sorted(glob.glob(os.path.join(root, pattern.lstrip("/")))):
                    included = "/" + os.path.relpath(found, root)
                    for k, v in parse_sshd_config(included, root, depth + 1).items():
                        settings.setdefault(k, v)
        elif key in KEYWORDS and values:
            settings.setdefault(key, " ".join(values) if key == "authenticationmethods" else values[0].lower())
    return settings
