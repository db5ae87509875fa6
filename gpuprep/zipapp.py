"""The node probe as one zipapp: gpuprep's probe, rules and renderers with nvidia-ml-py and prometheus-client
inside, run by the node's python3 with nothing installed there (`check -i` copies it through Ansible's
`script`; the gpuprep_agent role installs it for its timer). Built once per gpuprep build into the cache."""
from __future__ import annotations

import hashlib
import json
import os
import zipfile
from pathlib import Path
from typing import Iterator, Tuple

from . import __version__

_PACKAGE = Path(__file__).resolve().parent
# controller-only parts: the CLI, the Ansible layer, the burn-in and the job diagnosis never run from the zipapp,
# but for the burn-in report's schema, which the Slurm hooks' return-to-service gate checks on the node
_LEFT_OUT = {"cli.py", "__main__.py", "zipapp.py", "fleet.py", "ansible", "burnin", "job", "share",
             "__pycache__"}
_KEPT = {"burnin/__init__.py", "burnin/report_schema.py"}
MIN_PYTHON = (3, 8)

_MAIN = f'''import sys
if sys.version_info < {MIN_PYTHON!r}:
    sys.stderr.write("gpuprep-probe: error: needs python3 >= {'.'.join(map(str, MIN_PYTHON))}, this is %s\\n"
                     % sys.version.split()[0])
    sys.exit(2)
from gpuprep.probe_main import main
sys.exit(main())
'''


def _members() -> Iterator[Tuple[str, Path]]:
    """(name in the archive, file) for every file the zipapp holds."""
    files = (Path(base) / name for base, _, names in os.walk(_PACKAGE) for name in names)
    for path in sorted(files):
        relative = path.relative_to(_PACKAGE)
        if (relative.as_posix() in _KEPT or not set(relative.parts) & _LEFT_OUT) and path.suffix != ".pyc":
            yield f"gpuprep/{relative.as_posix()}", path
    import prometheus_client
    import pynvml
    yield "pynvml.py", Path(pynvml.__file__)
    library = Path(prometheus_client.__file__).parent
    for path in sorted(library.rglob("*.py")):
        yield f"prometheus_client/{path.relative_to(library).as_posix()}", path


def build(target: str) -> str:
    """Write the zipapp to `target` (atomically, through the one atomic writer) and return its path."""
    import io

    from .output import write_atomic
    from .profiles import builtin
    body = io.BytesIO()
    with zipfile.ZipFile(body, "w", compression=zipfile.ZIP_DEFLATED) as archive:
        for name, path in _members():
            archive.write(path, name)
        archive.writestr("__main__.py", _MAIN)
        # the built-in profiles as JSON: a node's python3 may be older than 3.11's tomllib
        archive.writestr("gpuprep/data/profiles.json", json.dumps(builtin(), sort_keys=True))
    write_atomic(target, b"#!/usr/bin/env python3\n" + body.getvalue(), mode=0o755)
    return target


def probe_zipapp() -> str:
    """The zipapp of this very gpuprep (cached under ~/.cache/gpuprep by a hash of its contents)."""
    digest = hashlib.sha256(__version__.encode())
    for name, path in _members():
        digest.update(name.encode() + b"\0" + path.read_bytes())
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    cache = os.path.join(base, "gpuprep")
    os.makedirs(cache, exist_ok=True)
    target = os.path.join(cache, f"gpuprep-probe-{__version__}-{digest.hexdigest()[:12]}.pyz")
    return target if _intact(target) else build(target)


def _intact(path: str) -> bool:
    """A cached zipapp that is whole: a truncated or damaged one (a disk that filled, an edit) is rebuilt instead
    of being shipped to every node."""
    try:
        with open(path, "rb") as fh:
            if fh.read(2) != b"#!":
                return False
        with zipfile.ZipFile(path) as archive:
            return archive.testzip() is None and "__main__.py" in archive.namelist()
    except (OSError, zipfile.BadZipFile):
        return False
