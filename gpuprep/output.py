"""Files gpuprep writes for the user, through one writer: the destination is checked before the work starts; a
regular file is replaced atomically (temp file beside it, fsync, rename), so a full disk or an interrupt never
leaves a truncated file where a good one was; a device, pipe or terminal (/dev/null, /dev/stdout, a FIFO) is
written through, never replaced by a regular file; a new file gets the mode the umask allows (an existing one
keeps its own); a file this process read as input is never overwritten; and a failed write is an error, not a
quiet exit 0."""
from __future__ import annotations

import os
import stat
from typing import Optional, Set, Union

from .errors import BadInput

# every file this process read as input (parsers.read_capture adds to it): never an output
INPUTS: Set[str] = set()


def note_input(path: str) -> None:
    INPUTS.add(os.path.realpath(path))


def check_destination(path: str, option: str = "-o") -> str:
    """The absolute path, or BadInput naming why nothing could be written there."""
    target = os.path.abspath(path)
    if os.path.realpath(target) in INPUTS:
        raise BadInput(f"{option} {path}: is also an input of this command; write the report elsewhere")
    if os.path.isdir(target):
        raise BadInput(f"{option} {path}: is a directory")
    parent = os.path.dirname(target)
    if not os.path.isdir(parent):
        raise BadInput(f"{option} {path}: directory {parent} does not exist")
    if not _special(target) and not os.access(parent, os.W_OK | os.X_OK):
        raise BadInput(f"{option} {path}: directory {parent} is not writable")
    return target


def _special(target: str) -> bool:
    """An existing destination that is not a regular file (a device, FIFO or socket, through any symlink)."""
    try:
        return not stat.S_ISREG(os.stat(target).st_mode)
    except OSError:
        return False


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


def write_atomic(path: str, content: Union[str, bytes], option: str = "-o", mode: Optional[int] = None) -> None:
    """gpuprep's one writer of files: text (UTF-8) or bytes, whole or not at all (a temporary file beside the target,
    then a rename, through common.revert_record's writer, which the collection's modules use too); a device such as
    /dev/null is written through. `mode`: the new file's permissions (default: the old file's, or 0666 less umask).
    `option` names the flag the path came from in errors."""
    target = check_destination(path, option)
    data = content.encode("utf-8") if isinstance(content, str) else content
    try:
        if _special(target):
            with open(target, "wb") as fh:     # written through: /dev/null stays a device
                fh.write(data)
            return
        _replace(target, data, mode)
    except OSError as exc:
        raise BadInput(f"{option} {path}: cannot write ({exc.strerror or exc}); nothing was changed there") from None


def _replace(target: str, data: bytes, mode: Optional[int]) -> None:
    from .common.revert_record import write_atomic as replace_file
    if mode is None:
        mode = os.stat(target).st_mode & 0o7777 if os.path.exists(target) else 0o666 & ~_umask()
    replace_file(target, data, mode)
