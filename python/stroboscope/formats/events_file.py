"""The scope-events sidecar of a spool (``PATH.events``): written by the segment writer, read by
:func:`stroboscope.formats.spool_read.recover_events`.

Layout: an 8-byte magic, then chunks appended one whole ``pwrite`` at a time. A chunk is a
12-byte head (4-byte tag, payload length and CRC-32 of the payload, little-endian) and its
payload:

- ``STRS``: ``first_id`` (u32), ``count`` (u32), then ``count`` strings, each a u32 byte length
  and its UTF-8 bytes: the interned strings ``[first_id, first_id + count)`` of the process's
  events log (id 0 is the empty string). A chunk of strings always precedes the events that
  name them.
- ``EVTS``: ``first_index`` (u64, the log index of the range read), ``lost`` (u64, events of the
  range that were overwritten before they were read), ``count`` (u32), then ``count`` records of
  36 bytes (:data:`RECORD`).

A reader takes chunks in order and stops at the first that is incomplete, fails its CRC or does
not follow on from the ones before (a write cut short by a crash or a full disk): everything
before it is intact, and the bytes left out are counted, never guessed at.
"""

from __future__ import annotations

import contextlib
import logging
import os
import stat
import struct
import zlib
from array import array
from dataclasses import dataclass
from typing import BinaryIO

import numpy as np
import pyarrow as pa

from stroboscope.formats.shared_events_env import PRIVATE_DIR_PREFIX
from stroboscope.formats.spool_header import SpoolError, open_regular

_LOG = logging.getLogger("stroboscope.recording")

MAGIC = b"STRBEVT1"
HEAD = struct.Struct("<4sII")
STRINGS_TAG = b"STRS"
EVENTS_TAG = b"EVTS"
_STRS = struct.Struct("<II")
_EVTS = struct.Struct("<QQI")
_LEN = struct.Struct("<I")
MAX_CHUNK_EVENTS = 1 << 16
"""Events per chunk at most (a chunk is ~2.3 MiB then)."""
MAX_PAYLOAD = 64 << 20
"""A head announcing a longer payload is corrupt (no writer makes one)."""

RECORD = np.dtype(
    [
        ("mono_ns", "<i8"),
        ("thread_id", "<i8"),
        ("stack_id", "<u8"),
        ("scope_id", "<u4"),
        ("labels_id", "<u4"),
        ("depth", "<u2"),
        ("kind", "u1"),
        ("pad", "u1"),
    ]
)
"""One event on disk (36 bytes, packed)."""

SCHEMA = pa.schema(
    [
        ("mono_ns", pa.int64()),
        ("kind", pa.uint8()),
        ("thread_id", pa.int64()),
        ("scope_id", pa.uint32()),
        ("depth", pa.uint16()),
        ("labels_id", pa.uint32()),
        ("stack_id", pa.uint64()),
        ("scope", pa.string()),
        ("labels", pa.string()),
    ]
)
"""The recovered events: the events log's columns, then ``scope`` and ``labels`` resolved
from the interned strings (null for an id whose string the file does not hold)."""


# The encoder (the sink that appends a spool's sidecar: stroboscope.recording).
def _chunk(tag: bytes, payload: bytes) -> bytes:
    return HEAD.pack(tag, len(payload), zlib.crc32(payload)) + payload


def strings_chunk(first_id: int, strings: list[str]) -> bytes:
    parts = [_STRS.pack(first_id, len(strings))]
    for s in strings:
        raw = s.encode("utf-8", "surrogatepass")
        parts += [_LEN.pack(len(raw)), raw]
    return _chunk(STRINGS_TAG, b"".join(parts))


def events_chunk(first_index: int, lost: int, table: pa.Table) -> bytes:
    rec = np.zeros(table.num_rows, RECORD)
    for name in ("mono_ns", "thread_id", "stack_id", "scope_id", "labels_id", "depth", "kind"):
        rec[name] = table.column(name).to_numpy()
    return _chunk(EVENTS_TAG, _EVTS.pack(first_index, lost, len(rec)) + rec.tobytes())


def events_path(spool: str) -> str:
    """The sidecar of ``spool``."""
    return spool + ".events"


EVENTS_DIR_NOTE = ".events-dir"
"""Beside a spool of ``stroboscope record -- CMD``: a text file (0600) naming the directory the
command's processes write their scope events into (:mod:`stroboscope.formats.shared_events`),
so that ``recover`` reads them when the recorder and its watchdog both died; removed at a clean
end, with the directory."""
EVENTS_DIR_PREFIX = PRIVATE_DIR_PREFIX
"""How an events directory that stroboscope makes is named (in the temporary directory)."""


def events_dir_note(spool: str) -> str | None:
    """The directory ``spool``'s note names, as written (None without a readable note)."""
    try:
        fd = os.open(spool + EVENTS_DIR_NOTE, os.O_RDONLY | os.O_NONBLOCK | os.O_NOFOLLOW)
    except OSError:
        return None
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            return None
        raw = os.read(fd, 4097)
    except OSError:
        return None
    finally:
        os.close(fd)
    text = os.fsdecode(raw).strip()
    return text if text and len(raw) <= 4096 and "\0" not in text else None


def write_events_dir_note(spool: str, directory: str) -> None:
    """Write ``spool``'s note naming ``directory`` (0600, never over another file); a note that
    cannot be written is no error (only a double kill needs it)."""
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
    try:
        fd = os.open(spool + EVENTS_DIR_NOTE, flags, 0o600)
    except OSError:
        return
    try:
        os.write(fd, os.fsencode(os.path.abspath(directory)) + b"\n")
    except OSError:
        pass
    finally:
        os.close(fd)


def remove_events_dir_note(spool: str) -> None:
    """Remove ``spool``'s note (if any)."""
    with contextlib.suppress(OSError):
        os.unlink(spool + EVENTS_DIR_NOTE)


def events_dir_of_spool(spool: str) -> str | None:
    """The events directory ``spool``'s note names, when it (or its drain's directory, where
    the command removed it) is one this user's stroboscope made: named
    :data:`EVENTS_DIR_PREFIX`..., a directory (not a link), owned by this user and open to
    nobody else (0700). None otherwise: a note never leads a reader, or ``recover``'s removal,
    anywhere else."""
    path = events_dir_note(spool)
    if path is None or not os.path.basename(path).startswith(EVENTS_DIR_PREFIX):
        return None
    from stroboscope.formats.shared_events import drained_dir

    # The command may have removed its directory: what the drain kept beside it is read then.
    for where in (path, drained_dir(path)):
        try:
            st = os.lstat(where)
        except OSError:
            continue
        if stat.S_ISDIR(st.st_mode) and st.st_uid == os.geteuid() and not st.st_mode & 0o077:
            return path
    return None


@dataclass(frozen=True)
class EventsRead:
    """What a sidecar holds: the events, events lost before they were written, bytes cut, and
    why events are missing when the file itself says so (``damage``: its magic cut short)."""

    table: pa.Table
    lost: int
    cut_bytes: int
    damage: str | None = None


class _Strings:
    """The interned strings read so far, kept compactly: their UTF-8 bytes end to end and the
    offset of each (about 8 bytes a string beside its text, never a Python object each: a file of
    millions of tiny strings costs what its strings weigh)."""

    def __init__(self) -> None:
        self.data = bytearray()
        self.offsets = array("q", [0])

    def __len__(self) -> int:
        return len(self.offsets) - 1

    def parse(self, payload: bytes) -> bool:
        """Append the chunk's strings; False (nothing appended) when it does not follow on.
        A string that is not valid UTF-8 is kept with its bad bytes replaced (U+FFFD)."""
        if len(payload) < _STRS.size:
            return False
        first, count = _STRS.unpack_from(payload)
        # Each string takes at least its 4-byte length: a count the payload cannot hold is corrupt.
        if first != len(self) or count > (len(payload) - _STRS.size) // _LEN.size:
            return False
        if count == 0:
            return len(payload) == _STRS.size
        data, ends = bytearray(), array("q")
        base, pos = len(self.data), _STRS.size
        for _ in range(count):
            if pos + _LEN.size > len(payload):
                return False
            (n,) = _LEN.unpack_from(payload, pos)
            pos += _LEN.size
            if pos + n > len(payload):
                return False
            text = payload[pos : pos + n]
            try:
                text.decode("utf-8")
            except UnicodeDecodeError:
                text = text.decode("utf-8", "replace").encode("utf-8")
            data += text
            ends.append(base + len(data))
            pos += n
        if pos != len(payload):
            return False
        self.data += data
        self.offsets += ends
        return True

    def array(self) -> pa.Array:
        """The strings as one Arrow array (id = index)."""
        offsets = pa.py_buffer(np.frombuffer(self.offsets, np.int64))
        return pa.LargeStringArray.from_buffers(len(self), offsets, pa.py_buffer(bytes(self.data)))


_COLUMNS = [f.name for f in SCHEMA if f.name not in ("scope", "labels")]


class _Records:
    """The events read so far, one array per column grown geometrically: each chunk's records
    are copied in (the chunk itself is not kept), so memory holds about the events' own size
    (at most 1.5x while growing), never a view per chunk."""

    def __init__(self) -> None:
        self.n = 0
        self.cols = {name: np.empty(0, RECORD[name]) for name in _COLUMNS}

    def add(self, chunk: np.ndarray) -> None:
        need = self.n + len(chunk)
        for name in _COLUMNS:
            col = self.cols[name]
            if need > len(col):  # one column regrown at a time
                grown = np.empty(max(need, len(col) + len(col) // 2, 1024), col.dtype)
                grown[: self.n] = col[: self.n]
                self.cols[name] = col = grown
            col[self.n : need] = chunk[name]
        self.n = need

    def column(self, name: str) -> np.ndarray:
        return self.cols[name][: self.n]


READ_CHUNK = 1 << 20
"""Bytes read at a time while a payload is read (a chunk's payload is at most MAX_PAYLOAD)."""


def _read_exactly(f: BinaryIO, n: int) -> bytes | None:
    """``n`` bytes read from ``f`` (at most READ_CHUNK at a time), None when the file ends first."""
    parts: list[bytes] = []
    left = n
    while left > 0:
        got = f.read(min(left, READ_CHUNK))
        if not got:
            return None
        parts.append(got)
        left -= len(got)
    return b"".join(parts)


def _open_head(path: str, uid: int | None) -> tuple[BinaryIO, int, str | None]:
    """The sidecar opened and read past its magic: the file (the caller closes it), its size
    when opened, and why it holds no events when its magic was cut short (else None). Raises
    :class:`SpoolError` as :func:`read` does."""
    fd, st = open_regular(path, "events file", follow=False)
    f = os.fdopen(fd, "rb")
    try:
        if uid is not None and st.st_uid != uid:
            raise SpoolError(
                f"events file {path} is owned by uid {st.st_uid}, its spool by uid {uid}"
            )
        os.set_blocking(fd, True)
        head = f.read(len(MAGIC))
        if len(head) < len(MAGIC) and MAGIC.startswith(head):
            return (
                f,
                st.st_size,
                (
                    f"events file {path} holds {len(head)} of the {len(MAGIC)} bytes of its magic "
                    f"(its first write was cut short, as on a full disk): its events were not kept"
                ),
            )
        if head != MAGIC:
            raise SpoolError(
                f"events file {path} does not start with {MAGIC!r}: not an events file"
            )
    except BaseException:
        f.close()
        raise
    return f, st.st_size, None


def read(path: str, uid: int | None = None) -> EventsRead:
    """The intact events of a sidecar, in the order written, with names resolved.

    The file is read one chunk at a time (memory holds the events and one chunk, never the
    file). Raises :class:`SpoolError` when the file cannot be opened, is not a regular file,
    belongs to another user than ``uid`` or does not start with the magic. A file shorter than
    the magic that holds the start of it (its first write cut short, as on a full disk) has no
    events: ``damage`` says so. A torn or corrupt tail is cut (counted in ``cut_bytes``), never
    raised.
    """
    f, size, damage = _open_head(path, uid)
    with f:
        if damage is not None:
            return EventsRead(_to_table(_Records(), _Strings()), 0, size, damage)
        strings = _Strings()
        records = _Records()
        # Up to the size the file had when opened: a chunk appended since is not "cut".
        lost, next_index, pos = 0, -1, len(MAGIC)
        while pos + HEAD.size <= size and (raw := _read_exactly(f, HEAD.size)) is not None:
            tag, n, crc = HEAD.unpack(raw)
            end = pos + HEAD.size + n
            payload = None if n > MAX_PAYLOAD or end > size else _read_exactly(f, n)
            if payload is None or zlib.crc32(payload) != crc:
                break
            if tag == STRINGS_TAG:
                if not strings.parse(payload):
                    break
            elif tag == EVENTS_TAG:
                if len(payload) < _EVTS.size:
                    break
                first, chunk_lost, count = _EVTS.unpack_from(payload)
                if len(payload) != _EVTS.size + count * RECORD.itemsize or first < next_index:
                    break
                if count:  # an empty chunk keeps nothing
                    records.add(np.frombuffer(payload, RECORD, count, _EVTS.size))
                lost += chunk_lost
                next_index = first + count
            else:
                break
            pos = end
            del payload  # not kept while the next chunk is read
    return EventsRead(_to_table(records, strings), lost, size - pos)


def _names(ids: np.ndarray, strings: pa.Array) -> pa.Array:
    if len(strings) == 0:
        return pa.nulls(len(ids), pa.string())
    known = ids < len(strings)
    safe = np.where(known, ids, 0).astype(np.int64)
    return strings.take(pa.array(safe, mask=~known)).cast(pa.string())


def _to_table(records: _Records, strings: _Strings) -> pa.Table:
    arrays = [pa.array(records.column(f.name), f.type) for f in SCHEMA if f.name in _COLUMNS]
    table = strings.array()
    scope_id, labels_id = records.column("scope_id"), records.column("labels_id")
    arrays += [_names(scope_id, table), _names(labels_id, table)]
    return pa.Table.from_arrays(arrays, schema=SCHEMA)


ERROR_KEY = b"stroboscope.events_error"
"""Metadata (of the events, and of rows recovered beside them): why events are missing."""


def _unreadable(exc: SpoolError) -> str:
    return f"{exc}: its events were not read"


def damage_beside(spool: str, uid: int) -> str | None:
    """Why the events of ``spool``'s sidecar are missing, from its head alone (None when it is
    absent or whole so far; a torn tail is not damage), with a warning that says so."""
    side = events_path(spool)
    if not os.path.lexists(side):
        return None
    try:
        f, _size, damage = _open_head(side, uid)
    except SpoolError as exc:
        damage = _unreadable(exc)
    else:
        f.close()
    if damage is not None:
        _LOG.warning(
            "scope events of %s are missing: %s (the rows are all recovered)", spool, damage
        )
    return damage


def read_beside(spool: str, anchor_ns: int, uid: int, *, strict: bool = True) -> pa.Table:
    """The events of ``spool``'s sidecar with their metadata (``stroboscope.events_lost``,
    ``stroboscope.events_cut_bytes``, ``stroboscope.anchor_realtime_ns``, and
    :data:`ERROR_KEY` when the sidecar is damaged); no rows when there is no sidecar.

    A sidecar whose magic was cut short has no events: ``ERROR_KEY`` says so (and a warning,
    when ``strict``); a torn or damaged tail is left out with a warning. One that is not an
    events file (or not the spool owner's, or not a regular file) raises :class:`SpoolError`
    when ``strict``; otherwise it is treated as that too (the rows of a spool never depend on
    its events: :func:`damage_beside` warns of it).
    """
    side = events_path(spool)
    if not os.path.lexists(side):
        got = EventsRead(SCHEMA.empty_table(), 0, 0)
    elif strict:
        got = read(side, uid)
        if got.damage is not None:
            _LOG.warning("scope events of %s are missing: %s", spool, got.damage)
    else:
        try:
            got = read(side, uid)
        except SpoolError as exc:
            got = EventsRead(SCHEMA.empty_table(), 0, 0, _unreadable(exc))
    if got.cut_bytes and got.damage is None:  # said, not only counted in the metadata
        _LOG.warning(
            "scope events of %s: the last %d bytes of its events file were torn, damaged or "
            "still being written, and were left out with the scope calls they held",
            spool,
            got.cut_bytes,
        )
    meta = {
        b"stroboscope.events_lost": str(got.lost).encode(),
        b"stroboscope.events_cut_bytes": str(got.cut_bytes).encode(),
        b"stroboscope.anchor_realtime_ns": str(anchor_ns).encode(),
    }
    if got.damage is not None:
        meta[ERROR_KEY] = got.damage.encode("utf-8", "replace")
    return got.table.replace_schema_metadata(meta)
