"""Files gpuprep writes for the user: the destination is checked before the work starts, and the file
is replaced atomically (temp file beside it, fsync, rename), so a full disk or an interrupt never
leaves a truncated file where a good one was."""
from __future__ import annotations

import os
import tempfile

from .errors import BadInput


def check_destination(path: str, option: str = "-o") -> str:
    """The absolute path, or BadInput naming why nothing could be written there."""
    target = os.path.abspath(path)
    if os.path.isdir(target):
        raise BadInput(f"{option} {path}: is a directory")
    parent = os.path.dirname(target)
    if not os.path.isdir(parent):
        raise BadInput(f"{option} {path}: directory {parent} does not exist")
    if not os.access(parent, os.W_OK | os.X_OK):
        raise BadInput(f"{option} {path}: directory {parent} is not writable")
    return target


def write_atomic(path: str, text: str, option: str = "-o") -> None:
    target = check_destination(path, option)
    fd, temp = tempfile.mkstemp(prefix="." + os.path.basename(target) + ".", dir=os.path.dirname(target))
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            fh.write(text)
            fh.flush()
            os.fsync(fh.fileno())
        if os.path.exists(target):
            os.chmod(temp, os.stat(target).st_mode & 0o7777)
        else:
            os.chmod(temp, 0o644)
        os.replace(temp, target)
    except OSError as exc:
        try:
            os.unlink(temp)
        except OSError:
            pass
        raise BadInput(f"{option} {path}: cannot write ({exc.strerror or exc}); nothing was changed there") from None
