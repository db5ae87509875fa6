# Built by tools/build_collection.py from gpuprep/common/revert_record.py, gpuprep's one copy: edit that file, not this one.
"""The revert record of one role: STATE_DIR/ROLE/manifest.json and the copies of original files beside it.

Written atomically (temp file, fsync, rename) with a checksum over the manifest and one over every copy,
so that a damaged record is detected and reported; it is never silently rebuilt from a host that apply
has already changed, which would lose the originals for good. Shared by gpuprep_record and
gpuprep_restore. Standard library only."""
import hashlib
import json
import os
import shutil
import tempfile

FORMAT = 1
SECTIONS = ("files", "units", "values", "gpus", "pci")
MANIFEST = "manifest.json"


class DamagedRecord(Exception):
    """The record exists but cannot be trusted; the message names what is wrong."""


def empty():
    return {section: {} for section in SECTIONS}


def _canonical(manifest):
    return json.dumps(manifest, sort_keys=True, separators=(",", ":")).encode()


def sha256_of(path):
    digest = hashlib.sha256()
    with open(path, "rb") as fh:
        for block in iter(lambda: fh.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def write_atomic(path, data, mode=None):
    """Write bytes to path so that a crash leaves either the old file or the new one, never a part. The one
    atomic writer: the roles' records, gpuprep's reports (output.py), the probe zipapp and the burn-in's files."""
    directory = os.path.dirname(path) or "."
    fd, tmp = tempfile.mkstemp(prefix="." + os.path.basename(path) + ".", dir=directory)
    try:
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
            fh.flush()
            os.fsync(fh.fileno())
        if mode is not None:
            os.chmod(tmp, mode)
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise
    dir_fd = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(dir_fd)
    finally:
        os.close(dir_fd)


def copy_atomic(source, dest):
    """Copy content, mode and times; return the copy's sha256."""
    with open(source, "rb") as fh:
        data = fh.read()
    write_atomic(dest, data)
    shutil.copystat(source, dest)
    return hashlib.sha256(data).hexdigest()


def damaged_message(role_dir, reason, reverting=False):
    if reverting:
        return (f"revert record {role_dir} is damaged ({reason}); nothing of this role was reverted and the "
                f"saved originals in it are kept: restore them by hand from there")
    return (f"revert record {role_dir} is damaged ({reason}); nothing was changed and the saved originals "
            f"in it are kept. Check them (restore by hand if needed), then move the record aside "
            f"(mv {role_dir} {role_dir}.damaged) so that apply can record the current state afresh")


def _has_copies(role_dir):
    try:
        return any(name.startswith("file-") for name in os.listdir(role_dir))
    except OSError:
        return False


def _check_shape(manifest):
    if not isinstance(manifest, dict):
        raise DamagedRecord(f"{MANIFEST} is not a JSON object")
    for section in SECTIONS:
        manifest.setdefault(section, {})
        if not isinstance(manifest[section], dict):
            raise DamagedRecord(f"{MANIFEST}: '{section}' is not an object")
    return manifest


def _check_copies(role_dir, manifest):
    for path, entry in manifest["files"].items():
        if not isinstance(entry, dict) or "existed" not in entry:
            raise DamagedRecord(f"{MANIFEST}: the entry of {path} is malformed")
        if not entry["existed"]:
            continue
        copy = os.path.join(role_dir, str(entry.get("copy", "")))
        if not entry.get("copy") or not os.path.isfile(copy):
            raise DamagedRecord(f"the saved copy of {path} ({entry.get('copy')}) is missing")
        if "sha256" in entry and sha256_of(copy) != entry["sha256"]:
            raise DamagedRecord(f"the saved copy of {path} ({entry['copy']}) does not match its checksum")


def load(role_dir):
    """The role's manifest, an empty one when nothing was recorded, DamagedRecord when it cannot be trusted."""
    path = os.path.join(role_dir, MANIFEST)
    try:
        with open(path, "rb") as fh:
            raw = fh.read()
    except FileNotFoundError:
        if _has_copies(role_dir):
            raise DamagedRecord(f"{MANIFEST} is missing but saved copies of files are there")
        return empty()
    try:
        data = json.loads(raw.decode("utf-8"))
    except (UnicodeDecodeError, ValueError):
        raise DamagedRecord(f"{MANIFEST} is not valid JSON ({len(raw)} bytes; truncated?)")
    if isinstance(data, dict) and "format" in data:
        if data.get("format") != FORMAT:
            raise DamagedRecord(f"{MANIFEST} has format {data.get('format')!r}; this gpuprep reads {FORMAT}")
        manifest = data.get("manifest")
        if not isinstance(manifest, dict) or hashlib.sha256(_canonical(manifest)).hexdigest() != data.get("sha256"):
            raise DamagedRecord(f"{MANIFEST} does not match its checksum")
    else:
        manifest = data          # wave-1 records carried no checksum; they are re-saved with one
    manifest = _check_shape(manifest)
    _check_copies(role_dir, manifest)
    return manifest


def save(role_dir, manifest):
    os.makedirs(role_dir, mode=0o700, exist_ok=True)
    envelope = {"format": FORMAT, "sha256": hashlib.sha256(_canonical(manifest)).hexdigest(),
                "manifest": manifest}
    write_atomic(os.path.join(role_dir, MANIFEST),
                 json.dumps(envelope, indent=1, sort_keys=True).encode(), 0o600)
