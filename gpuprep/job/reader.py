"""PyTorch profiler (Kineto) Chrome-trace files, read streaming: I/O and JSON only, no judgement.

A trace is one JSON object whose `traceEvents` array can hold millions of events (a 1 GB file). It is never loaded
whole: the file is decompressed in chunks (gzip by its magic bytes, bounded so a gzip bomb is refused), the top-level
keys other than `traceEvents` are decoded one by one (each bounded), and the events of the array are handed to the
caller in file order, so memory is one chunk and its events plus what the caller keeps. Where the text has Kineto's
layout, a chunk's whole events are decoded at once by msgspec into `Event`s that hold only the fields the metrics
read (the rest is checked as JSON and never built: 2.7x orjson's whole parse); elsewhere one by one with the
standard library, each event then typed the same way. A file cut short by a dying job is read up to the cut and
says so; anything else that is not JSON names the file and the byte offset.
"""
from __future__ import annotations

import codecs
import gzip
import json
import os
import re
from dataclasses import dataclass, field
from typing import Annotated, Any, Callable, Dict, List, Optional

import msgspec

from ..errors import BadInput

CHUNK = 256 << 10               # the text read at a time: as fast as 1 MiB, and 8 ranks' peak is 9 MiB less (PSS)
PIECE = 128 << 10               # the text decoded at once (its events are held together): 128 KiB is as fast as more
MAX_VALUE = 16 << 20            # one event, or one top-level value other than traceEvents
MAX_DECOMPRESSED = 16 << 30     # a trace beyond this is refused, not read for hours
BOMB_RATIO = 500                # Kineto JSON compresses 10-30x; past 4 MiB, a higher ratio is a gzip bomb
BOMB_AFTER = 4 << 20            # early: a bomb of tiny JSON events costs seconds to parse per 64 MiB
# compressions a trace directory may hold that this reader does not open: named, never skipped in silence
OTHER_COMPRESSIONS = {".zst": "zstd -d", ".zstd": "zstd -d", ".xz": "xz -d", ".bz2": "bunzip2", ".lz4": "lz4 -d"}
TRACE_SUFFIXES = (".json", ".json.gz", ".pt.trace.json", ".pt.trace.json.gz")


class TraceError(BadInput):
    """A trace file that cannot be read: the message names the file and, for JSON, the byte offset."""


@dataclass
class TraceFile:
    """What one file held besides its events: its top-level keys, how far it was read, and whether it ended."""
    path: str
    meta: Dict[str, Any] = field(default_factory=dict)
    events: int = 0
    bytes_read: int = 0
    complete: bool = True


_ID = 1 << 63       # stream and correlation ids are int64 in Kineto (and in HTA's frames)
Id = Annotated[int, msgspec.Meta(ge=1 - _ID, le=_ID - 1)]


def as_id(value) -> int:
    """HTA's reading of a stream or correlation id: an int64 (a number or a numeric string), else -1."""
    if isinstance(value, bool):
        return -1
    try:
        value = int(value)
    except (TypeError, ValueError, OverflowError):
        return -1
    return value if -_ID < value < _ID else -1


class Args(msgspec.Struct, gc=False):
    """The `args` an event's metrics read (the rest are not kept). Stream and correlation are int64 ids, -1 where
    missing: a piece whose ids are anything else is read one by one, and `typed` reads them as HTA does."""
    stream: Id = -1
    correlation: Id = -1
    device_id: Any = msgspec.field(default=None, name="Device Id")             # [memory] events
    total_allocated: Any = msgspec.field(default=None, name="Total Allocated")
    device_type: Any = msgspec.field(default=None, name="Device Type")


class Event(msgspec.Struct, gc=False):
    """One trace event, as the metrics read it: any JSON value in each field (the metrics judge the types)."""
    ph: Any = None
    cat: Any = None
    name: Any = None
    ts: Any = None
    dur: Any = None
    args: Optional[Args] = None


def typed(event: dict) -> Event:
    """An event decoded by the standard library as an `Event` (args that are not an object read as none)."""
    args = event.get("args")
    if type(args) is dict:
        args = Args(as_id(args.get("stream", -1)), as_id(args.get("correlation", -1)), args.get("Device Id"),
                    args.get("Total Allocated"), args.get("Device Type"))
    else:
        args = None
    return Event(event.get("ph"), event.get("cat"), event.get("name"), event.get("ts"), event.get("dur"), args)


_PIECE_DECODER = msgspec.json.Decoder(List[Event])


# PyTorch's tensorboard_trace_handler names a rank's file WORKER.TIME.pt.trace.json[.gz], its worker name by default
# HOSTNAME_PID (a host name has no underscore); a worker name of the job's own (rank0, worker0) names no host
_DEFAULT_NAME = re.compile(r"([A-Za-z0-9][A-Za-z0-9.-]{0,252})_[0-9]{1,10}\.[0-9]{10,20}\.pt\.trace\.json(?:\.gz)?")


def host_of(path: str) -> Optional[str]:
    """The host a trace was recorded on, from PyTorch's default file name; None where the name does not say."""
    match = _DEFAULT_NAME.fullmatch(os.path.basename(path))
    return match.group(1) if match else None


def trace_files(paths: List[str]) -> List[str]:
    """The trace files named, a directory standing for the traces in it (one per rank), sorted and unique."""
    found: List[str] = []
    for path in paths:
        if os.path.isdir(path):
            listed = sorted(os.listdir(path))
            _other_compressions(path, listed)
            names = [n for n in listed if n.endswith(TRACE_SUFFIXES)]
            if not names:
                raise TraceError(f"{path}: no trace files (*.json, *.json.gz) in this directory")
            found += [os.path.join(path, n) for n in names]
        elif os.path.exists(path):
            found.append(path)          # named one by one: any name (ncclras.txt, a dump) is read
        else:
            raise TraceError(f"{path}: no such file or directory")
    return list(dict.fromkeys(found))


def _other_compressions(directory: str, names: List[str]) -> None:
    for name in names:
        base, suffix = os.path.splitext(name)
        if suffix in OTHER_COMPRESSIONS and base.endswith(".json"):
            raise TraceError(f"{os.path.join(directory, name)}: {suffix[1:]}-compressed, which gpuprep does not read: "
                             f"`{OTHER_COMPRESSIONS[suffix]}` it (or gzip it) so that every rank is read")


def _open_regular(path: str):
    """The file opened for reading without blocking on a FIFO or a device, which are refused: a FIFO given as a
    trace waits forever for a writer."""
    import stat
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK)
    except OSError as exc:
        raise TraceError(f"{path}: {exc.strerror or exc}") from None
    mode = os.fstat(fd).st_mode
    if not stat.S_ISREG(mode):
        os.close(fd)
        kind = "a FIFO" if stat.S_ISFIFO(mode) else "a device" if stat.S_ISCHR(mode) or stat.S_ISBLK(mode) else \
            "not a regular file"
        raise TraceError(f"{path}: {kind}, not a trace file")
    os.set_blocking(fd, True)
    return os.fdopen(fd, "rb")


class _Text:
    """The file's text in chunks, decompressed when gzip, with the count of bytes handed out."""

    def __init__(self, path: str):
        self.path = path
        self._raw = _open_regular(path)
        gz = self._raw.read(2) == b"\x1f\x8b"
        self._raw.seek(0)
        self._stream = gzip.GzipFile(fileobj=self._raw) if gz else self._raw
        self._decoder = codecs.getincrementaldecoder("utf-8")("replace")
        self.decompressed = 0
        self.eof = False

    def read(self) -> str:
        try:
            data = self._stream.read(CHUNK)
        except (OSError, EOFError, gzip.BadGzipFile) as exc:
            # a gzip stream cut short (EOFError) is a truncated trace; a corrupt one is unreadable from here on
            self.eof = True
            if isinstance(exc, EOFError):
                return self._decoder.decode(b"", final=True)
            raise TraceError(f"{self.path}: byte {self.decompressed}: not readable gzip ({exc})") from None
        self.decompressed += len(data)
        if not data:
            self.eof = True
            return self._decoder.decode(b"", final=True)
        compressed = self._raw.tell() or 1
        if self.decompressed > MAX_DECOMPRESSED:
            raise TraceError(f"{self.path}: more than {MAX_DECOMPRESSED >> 30} GiB of trace: refused")
        if self._stream is not self._raw and self.decompressed > BOMB_AFTER and \
                self.decompressed / compressed > BOMB_RATIO:
            raise TraceError(f"{self.path}: decompresses more than {BOMB_RATIO}x ({compressed} bytes to over "
                             f"{self.decompressed}): a gzip bomb, not a trace")
        return self._decoder.decode(data)

    def close(self) -> None:
        self._raw.close()


class _Cursor:
    """A window on the text: `buf[pos:]` is what is left to parse; `dropped` counts the bytes before the window."""
    _decoder = json.JSONDecoder()

    def __init__(self, text: _Text):
        self.text, self.buf, self.pos, self.dropped = text, "", 0, 0

    def more(self) -> bool:
        if self.text.eof:
            return False
        self.dropped += _utf8_length(self.buf[:self.pos])
        self.buf, self.pos = self.buf[self.pos:] + self.text.read(), 0
        return True

    def offset(self, at: int) -> int:
        return self.dropped + _utf8_length(self.buf[:at])

    def skip_space(self) -> str:
        """The next non-blank character ('' at the end of the file)."""
        while True:
            while self.pos < len(self.buf) and self.buf[self.pos] in " \t\r\n":
                self.pos += 1
            if self.pos < len(self.buf):
                return self.buf[self.pos]
            if not self.more():
                return ""

    def expect(self, chars: str) -> str:
        char = self.skip_space()
        if char == "":
            raise _Truncated()
        if char not in chars:
            raise self.error(f"expected {' or '.join(repr(c) for c in chars)}, found {char!r}")
        self.pos += 1
        return char

    def value(self) -> Any:
        """One JSON value, decoded alone; more text is read while it is incomplete, up to MAX_VALUE."""
        self.skip_space()
        while True:
            try:
                value, end = self._decoder.raw_decode(self.buf, self.pos)
            except json.JSONDecodeError as exc:
                if len(self.buf) - self.pos > MAX_VALUE:
                    raise self.error(f"a value over {MAX_VALUE >> 20} MiB or not JSON ({exc.msg})", exc.pos)
                if not self.more():
                    # the text ran out inside this value (a string never closed, or nothing after the error)
                    if exc.msg.startswith("Unterminated") or not self.buf[exc.pos:].strip():
                        raise _Truncated() from None
                    raise self.error(exc.msg, exc.pos)
                continue
            except RecursionError:
                raise self.error("nested too deeply") from None
            if end == len(self.buf) and not self.text.eof and not isinstance(value, (dict, list, str)):
                # a number at the window's edge may go on in the next chunk
                if self.more():
                    continue
            self.pos = end
            return value

    def error(self, message: str, at: int = -1) -> TraceError:
        return TraceError(f"{self.text.path}: byte {self.offset(self.pos if at < 0 else at)}: {message}")


def _utf8_length(text: str) -> int:
    return len(text) if text.isascii() else len(text.encode("utf-8"))    # isascii() is a flag CPython keeps


class _Truncated(Exception):
    """The text ended inside the document."""


def read_trace(path: str, on_events: Callable[[List[Event]], None]) -> TraceFile:
    """Hand the events of `path` to `on_events` in batches, in file order; return the rest of the file's keys and
    how it ended. TraceError for a file that is not a trace; a trace cut short is returned with complete=False."""
    text = _Text(path)
    cursor = _Cursor(text)
    trace = TraceFile(path)
    try:
        _document(cursor, trace, on_events)
    except _Truncated:
        trace.complete = False
        if trace.events == 0 and not trace.meta:
            raise TraceError(f"{path}: ends before any trace event (byte {cursor.offset(len(cursor.buf))})") from None
    finally:
        trace.bytes_read = cursor.offset(cursor.pos)
        text.close()
    return trace


def _document(cursor: _Cursor, trace: TraceFile, on_events: Callable[[List[Event]], None]) -> None:
    if cursor.skip_space() == "":
        raise TraceError(f"{trace.path}: empty file")
    cursor.expect("{")
    if cursor.skip_space() == "}":
        cursor.pos += 1
        raise TraceError(f"{trace.path}: an empty JSON object, not a trace (no traceEvents)")
    seen_events = False
    while True:
        key = cursor.value()
        if not isinstance(key, str):
            raise cursor.error("expected a key")
        cursor.expect(":")
        if key == "traceEvents":
            _events(cursor, trace, on_events)
            seen_events = True
        else:
            trace.meta[key] = cursor.value()
        if cursor.expect(",}") == "}":
            break
    if not seen_events:
        raise TraceError(f"{trace.path}: a JSON object without traceEvents: not a PyTorch profiler trace")
    if cursor.skip_space() != "":
        raise cursor.error("a second JSON document after the trace's end: two traces in one file? Give each rank "
                           "its own file")


_SEPARATOR = re.compile(r"[ \t\r\n]*([,\]])[ \t\r\n]*")
# Kineto writes each event as a block indented two spaces: this is the seam between two of them. A raw newline is never
# inside a JSON string, so it is structure; a piece cut at a seam that parses as one JSON list is whole events.
_SEAM = "\n  },\n  {"


def _events(cursor: _Cursor, trace: TraceFile, on_events: Callable[[List[Event]], None]) -> None:
    """The events: whole pieces of the window at once with msgspec where the text has Kineto's seams; one by one with
    the C scanner straight off the window otherwise; the careful path (more text, truncation, errors with offsets)
    only where the window ends or the text is not an event."""
    cursor.expect("[")
    if cursor.skip_space() == "]":
        cursor.pos += 1
        return
    scan, separate, count = _Cursor._decoder.scan_once, _SEPARATOR.match, 0
    buf, at, one_by_one_until = cursor.buf, cursor.pos, 0
    try:
        while True:
            if at >= one_by_one_until:
                events, seam = _piece(buf, at)
                if events is not None:
                    on_events(events)
                    count += len(events)
                    at = seam
                    continue
                if seam < 0 and not cursor.text.eof and len(buf) - at <= PIECE:
                    # Kineto's layout, with no seam in the short rest of the window: a partial event, never decoded
                    cursor.pos = at
                    cursor.more()
                    buf, at = cursor.buf, cursor.pos
                    continue
                # no piece here (no seam, or not plain JSON): event by event to there
                one_by_one_until = len(buf) if seam < 0 else seam
            try:
                event, end = scan(buf, at)
                separator = separate(buf, end)
            except (StopIteration, json.JSONDecodeError, RecursionError):
                separator = None
            if separator is None or (separator.end() == len(buf) and not cursor.text.eof):
                cursor.pos = at
                start = cursor.offset(at)
                event = cursor.value()          # at the window's edge, or not JSON: the careful path
                closing = cursor.expect(",]")
                if closing == ",":
                    cursor.skip_space()
                if cursor.buf is not buf:
                    one_by_one_until = 0        # a new window: look for pieces in it
                buf, next_at = cursor.buf, cursor.pos
            else:
                start, next_at, closing = None, separator.end(), separator.group(1)
            if type(event) is not dict:
                raise TraceError(f"{trace.path}: byte {cursor.offset(at) if start is None else start}: "
                                 f"traceEvents[{count}] is not an object")
            count += 1
            on_events([typed(event)])
            at = next_at
            if closing == "]":
                return
    finally:
        cursor.pos = max(cursor.pos, at) if cursor.buf is buf else cursor.pos
        trace.events += count


def _piece(buf: str, at: int):
    """(the events of buf[at:] up to its last seam, decoded at once; where the event after them starts), or (None,
    how far the one-by-one path reads before a piece is tried again; -1: no seam in the rest of buf), where the
    piece is not a JSON list of objects whose args are objects (NaN, an event that is a number, damage), which the
    one-by-one path reads or names with its exact offset."""
    seam = buf.rfind(_SEAM, at, at + PIECE)
    if seam < 0:
        seam = buf.find(_SEAM, at)          # an event longer than a piece: a piece of its own
        if seam < 0:
            return None, -1
    try:
        events = _PIECE_DECODER.decode("[" + buf[at:seam + 4] + "]")
    except msgspec.DecodeError:         # not JSON, or not events of this shape (ValidationError is a DecodeError)
        return None, seam + 4
    return events, seam + len(_SEAM) - 1
