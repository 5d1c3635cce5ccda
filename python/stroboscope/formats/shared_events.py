"""Shared events: the files in which the processes of a recorded command write their scope
edges, and their reader.

A recorder that runs a command makes a private directory and names it in the command's
environment (:data:`EVENTS_DIR_ENV`). Every process that has the variable (the command, its
forks, spawns, multiprocessing workers and subprocesses) writes its edges into files of its own
there, one per (process, producer): ``<pid>.<producer>.sev``, or ``<pid>.<producer>.<n>.sev``
when that name was taken (a reused pid, an exec'd child of a process that already wrote).
Producer ``py`` is the extension's events log (what :func:`stroboscope.annotate` writes),
``nvtx`` the NVTX injection library (:data:`NVTX_INJECTION_ENV`). The writer is in C++
(``cpp/include/stroboscope/shared_events.hpp``, whose comment holds the same layout): the
process's lock-free events ring, mapped from the file, so a reader finds every record that was
published, also after the process was killed.

Layout (little-endian, version 2; offsets from the start of the file; version 1, the same
without records of kinds 3 and 4, is read too):

- header, 4096 bytes: magic ``STRBSEV1`` (written last), u32 version, u32 header bytes, i64 pid,
  i64 parent pid, u64 capacity (records, a power of two), u64 offsets of the slots, the states and
  the strings, u64 strings capacity, u64 first index (where a forked child's file starts), i64
  creation time (CLOCK_MONOTONIC ns), u32 record bytes (32), u32 flags, 32 bytes of producer
  name; at 128 u64 strings used (bytes of whole entries), at 136 u64 strings count, at 144 u64
  strings missing (interned after the area filled up), at 192 u64 dropped (events a producer
  dropped because their slot was busy).
- slots: ``capacity`` records of four u64 words, record ``i`` in slot ``i & (capacity - 1)``:
  ``mono_ns`` | ``stack_id`` | ``scope_id + labels_id << 32`` | ``tid (32 bits) + depth << 32 +
  kind << 48``.
- states: one u64 per slot: 0 never written, ``(i + 1) << 1`` record ``i`` published,
  ``((i + 1) << 1) | 1`` record ``i`` being written (its writer was killed there, or is still at
  work: not read).
- strings: the interned strings by id (id 0 is ``""``), each a u32 byte length and its UTF-8.

What a recorder drained of a file while its writer ran is kept out of the command's reach, in
the drain's own directory beside the events directory (:func:`drained_dir`, 0700, made by the
recorder; :mod:`stroboscope.formats.shared_events_drain`): ``<file name>.drained`` (the records,
in checked batches), ``<file name>.header`` (the copy of the header the drain read:
:data:`HEADER_SUFFIX`) and ``<file name>.strings`` (the file's strings as the drain last read
them: :data:`STRINGS_SUFFIX`). The reader takes the drained records with the ring's, each index
once, so a ring that lapped loses only what no poll reached; a header the writer damaged later is
read from its copy; a file the command removed (or its whole directory) is read from the copies
alone. ``<file>.failed`` (empty, in the events directory) stands for a file its process could
not make (:data:`FAILED_SUFFIX`).

Every file here is the recorded command's, so none is trusted: a reader opens the directory
once (no symbolic link) and its files relative to it, regular files only (never blocking on a
FIFO), and bounds every size a header claims by what a writer makes
(:data:`MAX_CAPACITY`, :data:`STRINGS_BYTES`) and by the file's real size.

The records of the ring (slots and states) are decoded in
:mod:`stroboscope.formats.shared_events_records`; this module reads the header, the strings and
the files of a directory.

The reader takes what a file holds and counts the rest, never guessing: a slot overwritten or
never published leaves its index missing (``lost``), a file cut short is read up to the cut
(``damaged`` says where), a file that is not one of these is skipped (``damaged`` says why).
"""

from __future__ import annotations

import contextlib
import errno
import json
import os
import re
import shutil
import stat
import struct
import zlib
from collections.abc import Mapping
from dataclasses import asdict
from typing import Any

import numpy as np
import pyarrow as pa

from stroboscope._base.files import file_kind, pread_full
from stroboscope.formats.shared_events_env import (
    EDGE_COUNTERS,
    EDGE_COUNTERS_ENV,
    EVENTS_CAPACITY_ENV,
    EVENTS_DIR_ENV,
    FILE_SUFFIX,
    NVTX_INJECTION_ENV,
)
from stroboscope.formats.shared_events_records import (
    BEGIN,
    COUNTER_COLUMNS,
    END,
    RECORD_BYTES,
    FileCounts,
    decode_records,
    read_drained,
    read_records,
    split_counters,
)

__all__ = [
    "BEGIN",
    "COUNTER_COLUMNS",
    "DRAINED_DIR_SUFFIX",
    "EDGE_COUNTERS",
    "EDGE_COUNTERS_ENV",
    "END",
    "EVENTS_CAPACITY_ENV",
    "EVENTS_DIR_ENV",
    "EVENTS_SCHEMA",
    "FAILED_SUFFIX",
    "FILE_SUFFIX",
    "HEADER_SUFFIX",
    "MAX_CAPACITY",
    "NVTX_INJECTION_ENV",
    "RECORD_BYTES",
    "STRINGS_BYTES",
    "STRINGS_SUFFIX",
    "FileCounts",
    "check_events_capacity",
    "drained_dir",
    "open_dir",
    "read_events_dir",
    "read_events_file",
    "remove_events_dir",
    "split_counters",
    "unmade_files",
]

FAILED_SUFFIX = ".failed"
"""An empty ``<events file name>.failed``: a process that could not make its events file there
(no space left, a file-size limit) left it instead, so its scopes are counted as unrecorded
(``events_unmade``) rather than missed in silence (the C++ writer's ``sev::kFailedSuffix``)."""
_FAILED = re.compile(r"^(\d+)\.([a-z0-9_-]{1,16})(?:\.(\d+))?\.sev\.failed$")
UNMADE = (
    "its process could not make its events file (no space left in the directory, or a file "
    "size limit): its scopes are not recorded"
)
"""What :class:`FileCounts` says (``damaged``) of a ``.failed`` file."""

MAX_CAPACITY = 1 << 24
"""The largest ring a writer makes (records): 2**24, a 640 MiB file whose states a drain reads
(128 MiB) at every poll. A header that claims more is not one a writer made (the C++ writer's
``sev::kMaxCapacity``)."""
STRINGS_BYTES = 4 << 20
"""The strings area a writer makes (bytes; the C++ writer's ``sev::kStringsBytes``). A header
that claims more is not one a writer made."""
HEADER_SUFFIX = ".header"
"""In the drain's directory (:func:`drained_dir`), the copy of an events file's header that a
drain kept when it first read it (:mod:`stroboscope.formats.shared_events_drain`): where the
file's own header is damaged later, or the file removed, its records are still read with it."""
STRINGS_SUFFIX = ".strings"
"""In the drain's directory, the copy of an events file's strings a drain kept when it released
the file: :data:`STRINGS_MAGIC`, u64 length, u32 CRC-32, then the strings area's used bytes."""
STRINGS_MAGIC = b"STRBSTR1"
_STRINGS_HEAD = struct.Struct("<QI")
DRAINED_DIR_SUFFIX = ".drained"
"""The drain's directory of an events directory ``D`` is ``D.drained`` (:func:`drained_dir`)."""
MAGIC = b"STRBSEV1"
VERSION = 2
VERSIONS = (1, 2)  # version 1: no edge counters
HEADER_BYTES = 4096
# Header fields: name -> (offset, struct format).
_FIELDS: dict[str, tuple[int, str]] = {
    "version": (8, "<I"),
    "header_bytes": (12, "<I"),
    "pid": (16, "<q"),
    "parent_pid": (24, "<q"),
    "capacity": (32, "<Q"),
    "slots": (40, "<Q"),
    "states": (48, "<Q"),
    "strings": (56, "<Q"),
    "strings_capacity": (64, "<Q"),
    "first_index": (72, "<Q"),
    "created_ns": (80, "<q"),
    "record_bytes": (88, "<I"),
    "flags": (92, "<I"),
    "strings_used": (128, "<Q"),
    "strings_count": (136, "<Q"),
    "strings_missing": (144, "<Q"),
    "dropped": (192, "<Q"),
}
_PRODUCER = slice(96, 128)
_NAME = re.compile(r"^(\d+)\.([a-z0-9_-]{1,16})(?:\.(\d+))?\.sev$")
EVENTS_SCHEMA = pa.schema(
    [
        pa.field("mono_ns", pa.int64()),
        pa.field("kind", pa.uint8()),
        pa.field("pid", pa.int64()),
        pa.field("thread_id", pa.int64()),
        pa.field("stack_id", pa.uint64()),
        pa.field("depth", pa.uint16()),
        pa.field("scope", pa.string()),
        pa.field("labels", pa.string()),
        pa.field("producer", pa.string()),
        *(pa.field(name, pa.int64()) for name in COUNTER_COLUMNS),
    ]
)
"""The columns of :func:`read_events_dir`: CLOCK_MONOTONIC ns (``time.monotonic_ns()``'s
clock), 1 begin / 2 end, the writer's pid and OS thread id, its stack (thread or asyncio task,
unique within one process and producer only), nesting depth (0 outermost), scope name, label set
(JSON text, ``""`` for none), producer (``py``, ``nvtx``) and the edge's own counters
(:data:`COUNTER_COLUMNS`, null without edge counters)."""


def _no_events() -> pa.Table:
    """A table of :data:`EVENTS_SCHEMA` with no row (``Schema.empty_table`` would load pandas:
    pyarrow's pandas shim, on its first array made from Python objects)."""
    return pa.Table.from_batches([], schema=EVENTS_SCHEMA)


def parse_header(raw: bytes) -> dict[str, Any]:
    return {name: struct.unpack_from(fmt, raw, off)[0] for name, (off, fmt) in _FIELDS.items()}


def header_problem(h: dict[str, Any]) -> str:
    """Why the header cannot be used, "" when it can."""
    cap = h["capacity"]
    if h["version"] not in VERSIONS:
        known = " and ".join(str(v) for v in VERSIONS)
        return f"layout version {h['version']} (this reader knows versions {known})"
    if cap < 2 or cap > MAX_CAPACITY or cap & (cap - 1):
        return f"capacity {cap} is not a power of two in [2, 2**{MAX_CAPACITY.bit_length() - 1}]"
    if h["record_bytes"] != RECORD_BYTES or h["slots"] != HEADER_BYTES:
        return "record size or slots offset is not this version's"
    if h["states"] != h["slots"] + cap * RECORD_BYTES or h["strings"] != h["states"] + cap * 8:
        return "offsets do not follow from the capacity"
    if h["strings_capacity"] > STRINGS_BYTES:
        return f"strings area of {h['strings_capacity']} bytes (a writer makes {STRINGS_BYTES})"
    return ""


def whole_size(h: dict[str, Any]) -> int:
    """The size of a file with header ``h`` as its writer made it (bytes): it sizes the file
    whole before it writes the magic, so a smaller file was cut short or is not one."""
    return int(h["strings"]) + int(h["strings_capacity"])


def drained_dir(events_dir: str | os.PathLike[str]) -> str:
    """Where a drain keeps what it read of the files of ``events_dir``: beside it (the
    command may remove its events directory, or a file of it, and the drained records stay)."""
    return os.path.normpath(os.fspath(events_dir)) + DRAINED_DIR_SUFFIX


_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
_READ_FLAGS = os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC | os.O_NOFOLLOW


def open_dir(path: str | os.PathLike[str], *, private: bool = False) -> int:
    """A descriptor of the directory ``path`` (never through a symbolic link), to open its files
    relative to: a directory replaced later (by a link to ``/``, say) is not followed. With
    ``private``, it must be this user's and open to nobody else (0700, as the recorder makes
    it). OSError otherwise."""
    fd = os.open(path, _DIR_FLAGS)
    if private:
        st = os.fstat(fd)
        if st.st_uid != os.geteuid() or st.st_mode & 0o077:
            os.close(fd)
            raise OSError(
                errno.EPERM,
                f"not this user's private directory (owner {st.st_uid}, mode "
                f"{stat.S_IMODE(st.st_mode):o}; 700 and uid {os.geteuid()} expected)",
                os.fspath(path),
            )
    return fd


def remove_events_dir(events_dir: str | os.PathLike[str]) -> None:
    """Remove an events directory and its drain's directory (never through a link)."""
    for path in (os.fspath(events_dir), drained_dir(events_dir)):
        if os.path.islink(path):  # put there by the command: the link goes, not what it names
            with contextlib.suppress(OSError):
                os.unlink(path)
        shutil.rmtree(path, ignore_errors=True)


def _open_kept(name: str, keep_fd: int | None) -> int | None:
    if keep_fd is None:
        return None
    try:
        fd = os.open(name, _READ_FLAGS, dir_fd=keep_fd)
    except OSError:
        return None
    if not stat.S_ISREG(os.fstat(fd).st_mode):
        os.close(fd)
        return None
    return fd


def saved_header(name: str, keep_fd: int | None) -> bytes | None:
    """The copy of the header of events file ``name`` a drain kept in its directory
    (``keep_fd``; :data:`HEADER_SUFFIX`), None without one (or when it is no regular file of a
    header's size). Never blocks (a FIFO is refused)."""
    fd = _open_kept(os.path.basename(name) + HEADER_SUFFIX, keep_fd)
    if fd is None:
        return None
    try:
        if os.fstat(fd).st_size != HEADER_BYTES:
            return None
        raw = pread_full(fd, HEADER_BYTES, 0)
    except OSError:
        return None
    finally:
        os.close(fd)
    return raw if len(raw) == HEADER_BYTES and raw[:8] == MAGIC else None


def saved_strings(name: str, keep_fd: int | None) -> bytes | None:
    """The copy of the strings of events file ``name`` a drain kept (:data:`STRINGS_SUFFIX`),
    None without one or when it fails its check."""
    fd = _open_kept(os.path.basename(name) + STRINGS_SUFFIX, keep_fd)
    if fd is None:
        return None
    try:
        head = pread_full(fd, len(STRINGS_MAGIC) + _STRINGS_HEAD.size, 0)
        if len(head) < 8 + _STRINGS_HEAD.size or head[:8] != STRINGS_MAGIC:
            return None
        n, crc = _STRINGS_HEAD.unpack_from(head, 8)
        if n > STRINGS_BYTES:
            return None
        raw = pread_full(fd, n, len(head))
    except (OSError, struct.error):
        return None
    finally:
        os.close(fd)
    return raw if len(raw) == n and zlib.crc32(raw) == crc else None


def strings_copy(raw: bytes) -> bytes:
    """The bytes of a :data:`STRINGS_SUFFIX` copy of the strings ``raw``."""
    return STRINGS_MAGIC + _STRINGS_HEAD.pack(len(raw), zlib.crc32(raw)) + raw


def check_events_capacity(environ: Mapping[str, str]) -> None:
    """Refuse a :data:`EVENTS_CAPACITY_ENV` in ``environ`` that no writer takes (a writer would
    silently use its default): ValueError naming the variable, its value and the range."""
    value = environ.get(EVENTS_CAPACITY_ENV)
    if value is None:
        return
    top = MAX_CAPACITY.bit_length() - 1
    # as the writer reads it (strtoull, the whole value): digits after blanks and a "+"
    cap = int(value) if re.fullmatch(r"\s*\+?[0-9]+", value) else 0
    if cap < 2 or cap > MAX_CAPACITY or cap & (cap - 1):
        raise ValueError(
            f"{EVENTS_CAPACITY_ENV} must be a power of two in [2, 2**{top}] (records of each "
            f"process's events ring), got {value!r}"
        )


def read_strings(fd: int, h: dict[str, Any], size: int, counts: FileCounts) -> list[str]:
    """The file's strings by id, up to the first entry that is cut short or out of bounds."""
    used = min(h["strings_used"], h["strings_capacity"], max(0, size - h["strings"]))
    raw = pread_full(fd, used, h["strings"]) if used > 0 else b""
    return _parse_strings(raw, h, counts)


def _parse_strings(raw: bytes, h: dict[str, Any], counts: FileCounts) -> list[str]:
    out: list[str] = []
    pos = 0
    while pos + 4 <= len(raw):
        (n,) = struct.unpack_from("<I", raw, pos)
        if pos + 4 + n > len(raw):
            break
        out.append(raw[pos + 4 : pos + 4 + n].decode("utf-8", errors="replace"))
        pos += 4 + n
    if pos < h["strings_used"] and not counts.damaged:
        counts.damaged = f"strings cut short at byte {h['strings'] + pos}"
    return out or [""]


def _texts(ids: np.ndarray[Any, Any], strings: list[str], unknown: str) -> pa.Array:
    unique, inverse = np.unique(ids, return_inverse=True)
    text = [strings[i] if 0 <= i < len(strings) else unknown.format(i) for i in unique.tolist()]
    return pa.array(np.asarray(text, dtype=object)[inverse.reshape(-1)], pa.string())


def read_events_file(path: str | os.PathLike[str]) -> tuple[pa.Table, FileCounts]:
    """One events file: its edges (:data:`EVENTS_SCHEMA`, in the file's index order) and its
    counts, with what a drain kept of it (:func:`drained_dir` of its directory). A file that is
    not one, or is cut short, is read as far as it goes (never raises for its content;
    ``OSError`` only if it cannot be opened)."""
    p = os.fspath(path)
    keep_fd = _open_keep(os.path.dirname(p) or ".")
    try:
        return _read_file(p, None, keep_fd)
    finally:
        if keep_fd is not None:
            os.close(keep_fd)


def _open_keep(events_dir: str) -> int | None:
    """The drain's directory of ``events_dir`` (None without one that is this user's, 0700)."""
    try:
        return open_dir(drained_dir(events_dir), private=True)
    except OSError:
        return None


def _kept_records(
    name: str, keep_fd: int | None, counts: FileCounts
) -> tuple[np.ndarray[Any, Any], np.ndarray[Any, Any]] | None:
    got = read_drained(os.path.basename(name), keep_fd) if keep_fd is not None else None
    if got is None:
        return None
    index, words, why = got
    if why and not counts.damaged:
        counts.damaged = why
    return index, words


def _read_file(name: str, dir_fd: int | None, keep_fd: int | None) -> tuple[pa.Table, FileCounts]:
    """:func:`read_events_file` of ``name`` relative to ``dir_fd``, the drain's copies in
    ``keep_fd``."""
    counts = FileCounts(file=os.path.basename(name))
    empty = _no_events()
    live: dict[str, Any] = {}
    fd = os.open(name, _READ_FLAGS, dir_fd=dir_fd)
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            counts.damaged = f"{file_kind(st.st_mode)}, not a regular file"
            return empty, counts
        raw = pread_full(fd, HEADER_BYTES, 0)
        why = "no events header (not an events file, or cut short)"
        if len(raw) == HEADER_BYTES and raw[:8] == MAGIC:
            why = header_problem(parse_header(raw))
        if why:
            # Damaged since a drain read it: its copy of the header reads what the file holds.
            kept = saved_header(name, keep_fd)
            if kept is None or header_problem(parse_header(kept)):
                counts.damaged = why
                if len(raw) == HEADER_BYTES and raw[:8] == MAGIC:
                    counts.pid = int(parse_header(raw)["pid"])
                return empty, counts
            counts.damaged = f"header damaged ({why}): read with the copy the drain kept"
            live = parse_header(raw) if len(raw) == HEADER_BYTES else {}
            raw = kept
        h = parse_header(raw)
        if counts.damaged and live:  # the strings written since the copy: as far as they read
            h["strings_used"] = max(h["strings_used"], live["strings_used"])
        _identify(counts, h, raw)
        rec = read_records(fd, h, st.st_size, counts, _kept_records(name, keep_fd, counts))
        strings = read_strings(fd, h, st.st_size, counts)
    finally:
        os.close(fd)
    return _table(rec, strings, counts), counts


def _identify(counts: FileCounts, h: dict[str, Any], raw: bytes) -> None:
    counts.pid = int(h["pid"])
    counts.producer = raw[_PRODUCER].split(b"\0", 1)[0].decode("ascii", errors="replace")
    counts.dropped = int(h["dropped"])
    counts.strings_missing = int(h["strings_missing"])


def _read_orphan(name: str, keep_fd: int) -> tuple[pa.Table, FileCounts]:
    """An events file that is gone (the command removed it, or its directory), read from what
    the drain kept of it: the copies of its header and strings, and its drained records."""
    counts = FileCounts(file=name, damaged=REMOVED)
    raw = saved_header(name, keep_fd)
    if raw is None or header_problem(parse_header(raw)):
        counts.damaged = f"{REMOVED}; the drain's copy of its header is missing or damaged"
        return _no_events(), counts
    h = parse_header(raw)
    _identify(counts, h, raw)
    index, words = _kept_records(name, keep_fd, counts) or (
        np.zeros(0, np.uint64),
        np.zeros((0, 4), "<u8"),
    )
    rec = decode_records(index, words, h, counts)
    text = saved_strings(name, keep_fd)
    if text is None:
        counts.damaged += "; the drain's copy of its strings is missing or damaged"
        text = b""
    h["strings_used"] = len(text)
    return _table(rec, _parse_strings(text, h, counts), counts), counts


REMOVED = "its events file was removed while it ran: read from what the drain kept of it"
"""What :class:`FileCounts` says (``damaged``) of a file read from the drain's copies alone."""


def _table(rec: dict[str, Any], strings: list[str], counts: FileCounts) -> pa.Table:
    n = len(rec["index"])
    counts.records = n
    return pa.table(
        {
            "mono_ns": pa.array(rec["mono_ns"], pa.int64()),
            "kind": pa.array(rec["kind"], pa.uint8()),
            "pid": pa.array(np.full(n, counts.pid, dtype=np.int64), pa.int64()),
            "thread_id": pa.array(rec["thread_id"], pa.int64()),
            "stack_id": pa.array(rec["stack_id"], pa.uint64()),
            "depth": pa.array(rec["depth"], pa.uint16()),
            "scope": _texts(rec["scope_id"], strings, "<scope {}>"),
            "labels": _texts(rec["labels_id"], strings, ""),
            "producer": pa.array([counts.producer] * n, pa.string()),
            **rec["counters"],
        },
        schema=EVENTS_SCHEMA,
    )


def _sorted_names(names: list[str], pattern: re.Pattern[str]) -> list[str]:
    found = []
    for name in names:
        m = pattern.match(name)
        if m:
            found.append((int(m.group(1)), m.group(2), int(m.group(3) or 0), name))
    return [name for *_key, name in sorted(found)]


def list_events(dir_fd: int) -> list[str]:
    """The names of the events files in the directory ``dir_fd``, by pid, producer and
    suffix."""
    return _sorted_names(os.listdir(dir_fd), _NAME)


def events_files(path: str | os.PathLike[str]) -> list[str]:
    """The events files in directory ``path``, by pid, producer and suffix."""
    p = os.fspath(path)
    if not os.path.isdir(p):
        raise ValueError(f"path must be a directory of shared events, got {p!r} (not a directory)")
    return [os.path.join(p, name) for name in _sorted_names(os.listdir(p), _NAME)]


_ORPHAN = re.compile(r"^(\d+)\.([a-z0-9_-]{1,16})(?:\.(\d+))?\.sev\.drained$")


def unmade_files(path: str | os.PathLike[str]) -> list[str]:
    """The :data:`FAILED_SUFFIX` names in directory ``path``: one per process (and producer)
    that could not make its events file there ([] when ``path`` cannot be listed)."""
    try:
        fd = open_dir(path)
    except OSError:
        return []
    try:
        return sorted(name for name in os.listdir(fd) if _FAILED.match(name))
    finally:
        os.close(fd)


def read_events_dir(path: str | os.PathLike[str]) -> pa.Table:
    """Every edge written into the shared-events directory ``path``, in ``mono_ns`` order, with
    what a drain kept of its files (:func:`drained_dir`), also of files, or a directory, that
    the command removed.

    Returns
    -------
    pyarrow.Table
        :data:`EVENTS_SCHEMA`; ties in ``mono_ns`` keep each file's own order. Schema metadata:
        ``events_lost`` (edges lost in all files: overwritten, dropped, or never published
        because the writer was killed while writing them), ``events_damaged`` (files not read
        whole, files read from the drain's copies alone, a directory removed or replaced, and
        processes that could not make their file), ``events_unmade`` (of those, the processes
        that could not make their file: :data:`FAILED_SUFFIX`) and ``events_files``, a JSON
        list of :class:`FileCounts` per file.

    Raises
    ------
    ValueError
        ``path`` is not a directory, and no drain kept anything of it. A damaged file never
        raises: it is read up to the damage and counted.
    """
    p = os.fspath(path)
    tables, counts = [], []
    keep_fd = _open_keep(p)
    try:
        dir_fd = open_dir(p)
    except OSError as exc:
        gone = "a symbolic link" if os.path.islink(p) else (exc.strerror or str(exc)).lower()
        if keep_fd is None:
            raise ValueError(
                f"path must be a directory of shared events, got {p!r} ({gone})"
            ) from None
        dir_fd = None
        counts.append(
            FileCounts(
                os.path.basename(p),
                damaged=f"the events directory is {gone}: read from what the drain kept",
            )
        )
    try:
        names = [] if dir_fd is None else list_events(dir_fd)
        unmade = [] if dir_fd is None else sorted(n for n in os.listdir(dir_fd) if _FAILED.match(n))
        for name in unmade:
            m = _FAILED.match(name)
            assert m is not None
            counts.append(
                FileCounts(name, pid=int(m.group(1)), producer=m.group(2), damaged=UNMADE)
            )
        for name in names:
            try:
                table, c = _read_file(name, dir_fd, keep_fd)
            except OSError as exc:  # vanished or unreadable: counted, never fatal
                table, c = _no_events(), FileCounts(name)
                c.damaged = f"cannot be read: {exc.strerror or exc}"
            tables.append(table)
            counts.append(c)
        if keep_fd is not None:  # the files the command removed: what the drain kept of them
            live = set(names)
            kept = [n[: -len(".drained")] for n in os.listdir(keep_fd) if _ORPHAN.match(n)]
            for name in _sorted_names([n for n in kept if n not in live], _NAME):
                table, c = _read_orphan(name, keep_fd)
                tables.append(table)
                counts.append(c)
    finally:
        for fd in (dir_fd, keep_fd):
            if fd is not None:
                os.close(fd)
    table = pa.concat_tables(tables) if tables else _no_events()
    if table.num_rows:
        position = np.arange(table.num_rows)
        mono = table.column("mono_ns").to_numpy()
        table = table.take(pa.array(np.lexsort((position, mono))))
    meta = {
        b"events_lost": str(sum(c.lost for c in counts)).encode(),
        b"events_damaged": str(sum(1 for c in counts if c.damaged)).encode(),
        b"events_unmade": str(sum(1 for c in counts if c.damaged == UNMADE)).encode(),
        b"events_files": json.dumps([asdict(c) for c in counts]).encode(),
    }
    return table.replace_schema_metadata(meta)
