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

Beside a file, ``<file>.drained`` holds the records a recorder drained while the writer ran
(:mod:`stroboscope.formats.shared_events_drain`); the reader takes them with the ring's, each
index once, so a ring that lapped loses only what no poll reached.

The records of the ring (slots and states) are decoded in
:mod:`stroboscope.formats.shared_events_records`; this module reads the header, the strings and
the files of a directory.

The reader takes what a file holds and counts the rest, never guessing: a slot overwritten or
never published leaves its index missing (``lost``), a file cut short is read up to the cut
(``damaged`` says where), a file that is not one of these is skipped (``damaged`` says why).
"""

from __future__ import annotations

import json
import os
import re
import stat
import struct
from dataclasses import asdict, dataclass
from typing import Any

import numpy as np
import pyarrow as pa

from stroboscope._base.files import file_kind, pread_full
from stroboscope.formats.shared_events_records import (
    BEGIN,
    COUNTER_COLUMNS,
    END,
    RECORD_BYTES,
    read_drained,
    read_records,
    split_counters,
)

__all__ = [
    "BEGIN",
    "COUNTER_COLUMNS",
    "EDGE_COUNTERS",
    "EDGE_COUNTERS_ENV",
    "END",
    "EVENTS_CAPACITY_ENV",
    "EVENTS_DIR_ENV",
    "EVENTS_SCHEMA",
    "FILE_SUFFIX",
    "NVTX_INJECTION_ENV",
    "RECORD_BYTES",
    "FileCounts",
    "read_events_dir",
    "read_events_file",
    "split_counters",
]

EVENTS_DIR_ENV = "STROBOSCOPE_EVENTS_DIR"
"""The environment variable that names the directory of a recorded command's events."""
EVENTS_CAPACITY_ENV = "STROBOSCOPE_EVENTS_CAPACITY"
"""Optional: the ring size (records, a power of two in [2, 2**32]) of each events file; a ring
that laps overwrites its oldest records (counted ``overwritten``). Default 2**20 (a 40 MiB file,
its blocks reserved as it fills)."""
EDGE_COUNTERS_ENV = "STROBOSCOPE_EDGE_COUNTERS"
"""Optional: edge counters in a recorded command (each edge followed by its thread's own
counters): one of :data:`EDGE_COUNTERS` other than ``"off"``. The writer reads it when it makes
its file and treats any other value as ``"off"`` (the recorder checks its own option)."""
EDGE_COUNTERS = ("off", "cpu", "rusage")
"""Edge-counter modes: none; the thread's CPU clock; that and its ``getrusage(RUSAGE_THREAD)``
faults and context switches."""
NVTX_INJECTION_ENV = "NVTX_INJECTION64_PATH"
"""The environment variable through which NVTX loads an injection library."""
FILE_SUFFIX = ".sev"

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


@dataclass
class FileCounts:
    """What one file held and what it lost (one entry of the ``events_files`` metadata)."""

    file: str
    pid: int = -1
    producer: str = ""
    records: int = 0  # edges read
    lost: int = 0  # indices between the file's first and its last record that were not read
    overwritten: int = 0  # of ``lost``: overwritten by a later lap of the ring
    dropped: int = 0  # events the writer dropped (its slot busy), as the file counts them
    strings_missing: int = 0  # strings interned after the file's area filled up
    damaged: str = ""  # why the file was not read, or where it was cut short; "" if whole


def _header(raw: bytes) -> dict[str, Any]:
    return {name: struct.unpack_from(fmt, raw, off)[0] for name, (off, fmt) in _FIELDS.items()}


def _check_header(h: dict[str, Any]) -> str:
    """Why the header cannot be used, "" when it can."""
    cap = h["capacity"]
    if h["version"] not in VERSIONS:
        known = " and ".join(str(v) for v in VERSIONS)
        return f"layout version {h['version']} (this reader knows versions {known})"
    if cap < 2 or cap > 1 << 32 or cap & (cap - 1):
        return f"capacity {cap} is not a power of two in [2, 2**32]"
    if h["record_bytes"] != RECORD_BYTES or h["slots"] != HEADER_BYTES:
        return "record size or slots offset is not this version's"
    if h["states"] != h["slots"] + cap * RECORD_BYTES or h["strings"] != h["states"] + cap * 8:
        return "offsets do not follow from the capacity"
    return ""


def _strings(fd: int, h: dict[str, Any], size: int, counts: FileCounts) -> list[str]:
    """The file's strings by id, up to the first entry that is cut short or out of bounds."""
    used = min(h["strings_used"], h["strings_capacity"], max(0, size - h["strings"]))
    raw = pread_full(fd, used, h["strings"]) if used > 0 else b""
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
    counts. A file that is not one, or is cut short, is read as far as it goes (never raises
    for its content; ``OSError`` only if it cannot be opened)."""
    p = os.fspath(path)
    counts = FileCounts(file=os.path.basename(p))
    empty = EVENTS_SCHEMA.empty_table()
    fd = os.open(p, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC | os.O_NOFOLLOW)
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            counts.damaged = f"{file_kind(st.st_mode)}, not a regular file"
            return empty, counts
        raw = pread_full(fd, HEADER_BYTES, 0)
        if len(raw) < HEADER_BYTES or raw[:8] != MAGIC:
            counts.damaged = "no events header (not an events file, or cut short)"
            return empty, counts
        h = _header(raw)
        counts.pid = int(h["pid"])
        counts.producer = raw[_PRODUCER].split(b"\0", 1)[0].decode("ascii", errors="replace")
        counts.dropped = int(h["dropped"])
        counts.strings_missing = int(h["strings_missing"])
        why = _check_header(h)
        if why:
            counts.damaged = why
            return empty, counts
        rec = read_records(fd, h, st.st_size, counts, read_drained(p))
        strings = _strings(fd, h, st.st_size, counts)
    finally:
        os.close(fd)
    n = len(rec["index"])
    counts.records = n
    table = pa.table(
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
    return table, counts


def events_files(path: str | os.PathLike[str]) -> list[str]:
    """The events files in directory ``path``, by pid, producer and suffix."""
    p = os.fspath(path)
    if not os.path.isdir(p):
        raise ValueError(f"path must be a directory of shared events, got {p!r} (not a directory)")
    found = []
    for name in os.listdir(p):
        m = _NAME.match(name)
        if m:
            found.append((int(m.group(1)), m.group(2), int(m.group(3) or 0), name))
    return [os.path.join(p, name) for *_key, name in sorted(found)]


def read_events_dir(path: str | os.PathLike[str]) -> pa.Table:
    """Every edge written into the shared-events directory ``path``, in ``mono_ns`` order.

    Returns
    -------
    pyarrow.Table
        :data:`EVENTS_SCHEMA`; ties in ``mono_ns`` keep each file's own order. Schema metadata:
        ``events_lost`` (edges lost in all files: overwritten, dropped, or never published
        because the writer was killed while writing them), ``events_damaged`` (files not read
        whole) and ``events_files``, a JSON list of :class:`FileCounts` per file.

    Raises
    ------
    ValueError
        ``path`` is not a directory. A damaged file never raises: it is read up to the damage
        and counted.
    """
    tables, counts = [], []
    for file in events_files(path):
        try:
            table, c = read_events_file(file)
        except OSError as exc:  # vanished or unreadable: counted, never fatal
            table, c = EVENTS_SCHEMA.empty_table(), FileCounts(os.path.basename(file))
            c.damaged = f"cannot be read: {exc.strerror or exc}"
        tables.append(table)
        counts.append(c)
    table = pa.concat_tables(tables) if tables else EVENTS_SCHEMA.empty_table()
    if table.num_rows:
        position = np.arange(table.num_rows)
        mono = table.column("mono_ns").to_numpy()
        table = table.take(pa.array(np.lexsort((position, mono))))
    meta = {
        b"events_lost": str(sum(c.lost for c in counts)).encode(),
        b"events_damaged": str(sum(1 for c in counts if c.damaged)).encode(),
        b"events_files": json.dumps([asdict(c) for c in counts]).encode(),
    }
    return table.replace_schema_metadata(meta)
