"""Keep secrets out of a run's artifacts. ansible-runner saves the command line with the controller's whole
environment, a fact cache (the target's environment: the controller's own for --local) and every event, in
which `-e` values recur (module arguments, diffs, messages). After a run the command keeps only the variables
gpuprep itself set, the fact cache goes, and every string `-e` value is replaced wherever it appears."""
from __future__ import annotations

import json
import os
import shutil
from typing import Dict, Iterable, List, Set

REDACTED = "<redacted>"
MIN_LENGTH = 3          # shorter strings ("1", "on") would blot out unrelated text and hide nothing


def secret_strings(extravars: Dict[str, object]) -> List[str]:
    """Every leaf of the user's -e values as text (strings and numbers alike: a numeric token is as secret),
    longest first (so a value containing another goes first)."""
    found: Set[str] = set()

    def walk(value: object) -> None:
        if isinstance(value, dict):
            for item in value.values():
                walk(item)
        elif isinstance(value, (list, tuple)):
            for item in value:
                walk(item)
        elif isinstance(value, (int, float)) and not isinstance(value, bool) and len(str(value)) >= MIN_LENGTH:
            found.add(str(value))
        elif isinstance(value, str) and len(value.strip()) >= MIN_LENGTH:
            found.add(value)
            found.add(value.strip())
    walk(extravars)
    return sorted(found, key=len, reverse=True)


def _forms(secret: str) -> Iterable[str]:
    """The secret as it can appear in an artifact or Ansible's output: raw; as JSON writes it inside a string
    (ASCII-escaped or not); as Python's repr writes it (Ansible's -vvvv); and each of those once more inside a JSON
    string, a repr or a shell word (ansible-runner puts the -e values on Ansible's command line as JSON, which is
    shown as a Python list or a shell command: a quote in the value is escaped twice over)."""
    once = {secret, json.dumps(secret)[1:-1], json.dumps(secret, ensure_ascii=False)[1:-1], repr(secret)[1:-1],
            repr(secret + "'")[1:-2]}
    twice = {json.dumps(form, ensure_ascii=ascii)[1:-1] for form in once for ascii in (True, False)}
    twice |= {repr(form)[1:-1] for form in once} | {repr(form + "'")[1:-2] for form in once}
    twice |= {form.replace("'", "'\"'\"'") for form in once}
    return sorted(once | twice, key=len, reverse=True)


def redact(text: str, secrets: List[str]) -> str:
    for secret in secrets:
        for form in _forms(secret):
            text = text.replace(form, REDACTED)
    return text


def scrub(run_dir: str, extravars: Dict[str, object], kept_env: Iterable[str]) -> None:
    if not os.path.isdir(run_dir):
        return
    shutil.rmtree(os.path.join(run_dir, "fact_cache"), ignore_errors=True)
    command = os.path.join(run_dir, "command")
    if os.path.exists(command):
        try:
            with open(command) as fh:
                doc = json.load(fh)
            kept = set(kept_env)
            doc["env"] = {k: v for k, v in (doc.get("env") or {}).items() if k in kept}
            with open(command, "w") as fh:
                json.dump(doc, fh)
        except (OSError, ValueError, AttributeError):
            os.remove(command)          # unreadable: better gone than leaking the environment
    secrets = secret_strings(extravars)
    if not secrets:
        return
    for folder, _dirs, files in os.walk(run_dir):
        for name in files:
            path = os.path.join(folder, name)
            with open(path, "rb") as fh:
                text = fh.read().decode("utf-8", "surrogateescape")
            clean = redact(text, secrets)
            if clean != text:
                with open(path, "wb") as fh:
                    fh.write(clean.encode("utf-8", "surrogateescape"))
