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

from stroboscope._base.files import file_kind

__all__ = [
    "COUNTER_COLUMNS",
    "EDGE_COUNTERS",
    "EDGE_COUNTERS_ENV",
    "EVENTS_CAPACITY_ENV",
    "EVENTS_DIR_ENV",
    "EVENTS_SCHEMA",
    "FILE_SUFFIX",
    "NVTX_INJECTION_ENV",
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
RECORD_BYTES = 32
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
BEGIN, END, COUNTERS, COUNTERS_RUSAGE = 1, 2, 3, 4
COUNTER_COLUMNS = ("cpu_ns", "minflt", "majflt", "nvcsw", "nivcsw")
"""An edge's own counters (edge counters; null where the edge has none): the thread's CPU clock
(``CLOCK_THREAD_CPUTIME_ID`` ns) and, in mode ``rusage``, the low 32 bits of its minor and major
faults and voluntary and involuntary context switches."""

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


def _pread(fd: int, size: int, offset: int) -> bytes:
    out = bytearray()
    while len(out) < size:
        chunk = os.pread(fd, size - len(out), offset + len(out))
        if not chunk:
            break
        out += chunk
    return bytes(out)


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
    raw = _pread(fd, used, h["strings"]) if used > 0 else b""
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


def _records(fd: int, h: dict[str, Any], size: int, counts: FileCounts) -> dict[str, Any]:
    """The published records of the file's ring, in index order, as arrays."""
    cap = int(h["capacity"])
    states_at, slots_at = int(h["states"]), int(h["slots"])
    held = max(0, min(cap, (size - states_at) // 8))  # states the file still has
    if held < cap and not counts.damaged:
        counts.damaged = f"cut short at byte {size} (states of slots {held} to {cap} missing)"
    raw = _pread(fd, held * 8, states_at)
    held = len(raw) // 8
    s1 = np.frombuffer(raw[: held * 8], dtype="<u8")
    slot = np.flatnonzero((s1 != 0) & (s1 & 1 == 0))
    index = (s1[slot] >> np.uint64(1)) - np.uint64(1)
    ok = (index & np.uint64(cap - 1)) == slot.astype(np.uint64)
    ok &= index >= np.uint64(h["first_index"])
    slot, index = slot[ok], index[ok]
    words = np.zeros((0, 4), dtype="<u8")
    if len(slot):
        hi = int(slot.max()) + 1
        body = _pread(fd, hi * RECORD_BYTES, slots_at)
        whole = len(body) // RECORD_BYTES
        words = np.frombuffer(body[: whole * RECORD_BYTES], dtype="<u8").reshape(-1, 4)
        keep = slot < whole
        slot, index = slot[keep], index[keep]
        # A live writer may have reused a slot while it was read: keep a record only if its
        # state is still the same (the seqlock check of the C++ reader).
        s2 = np.frombuffer(_pread(fd, held * 8, states_at), dtype="<u8")
        same = s2[slot] == s1[slot] if len(s2) == held else np.zeros(len(slot), bool)
        slot, index = slot[same], index[same]
        words = words[slot]
    kind = ((words[:, 3] >> np.uint64(48)) & np.uint64(0xFF)).astype(np.uint8)
    good = (kind >= BEGIN) & (kind <= (END if h["version"] == 1 else COUNTERS_RUSAGE))
    if not good.all() and not counts.damaged:
        counts.damaged = f"{int((~good).sum())} record(s) with an unknown kind"
    words, index, kind = words[good], index[good], kind[good]
    order = np.argsort(index, kind="stable")
    words, index, kind = words[order], index[order], kind[order]
    if len(index):
        span = int(index[-1]) + 1 - int(h["first_index"])
        counts.overwritten = max(0, span - cap)
        counts.lost = span - len(index)
    thread = (words[:, 3] & np.uint64(0xFFFFFFFF)).astype(np.uint32).view(np.int32).astype(np.int64)
    edge, counters = split_counters(kind, thread, words[:, 0], words[:, 1], words[:, 2])
    words, index, kind, thread = words[edge], index[edge], kind[edge], thread[edge]
    w2, w3 = words[:, 2], words[:, 3]
    return {
        "index": index,
        "counters": counters,
        "mono_ns": words[:, 0].view(np.int64),
        "kind": kind,
        "thread_id": thread,
        "stack_id": words[:, 1].copy(),
        "depth": ((w3 >> np.uint64(32)) & np.uint64(0xFFFF)).astype(np.uint16),
        "scope_id": (w2 & np.uint64(0xFFFFFFFF)).astype(np.int64),
        "labels_id": (w2 >> np.uint64(32)).astype(np.int64),
    }


def split_counters(
    kind: np.ndarray[Any, Any],
    thread_id: np.ndarray[Any, Any],
    w0: np.ndarray[Any, Any],
    w1: np.ndarray[Any, Any],
    w2: np.ndarray[Any, Any],
) -> tuple[np.ndarray[Any, Any], dict[str, pa.Array]]:
    """Edge counters: which records are edges, and each edge's own counters.

    The arrays are an events log's records in index order (its first, second and third words as
    unsigned 64-bit). A counters record (kind 3 or 4) belongs to the latest edge of its thread
    before it (its writer wrote it right after that edge); one whose thread's previous record is
    not an edge (that edge was lost) is dropped.

    Returns
    -------
    tuple
        A mask of the edges (kinds 1 and 2), and :data:`COUNTER_COLUMNS` as int64 arrays over
        those edges, null where an edge has no counters (``minflt`` and the rest also where
        they were not read: kind 3).
    """
    kind = np.asarray(kind, dtype=np.uint8)
    edge = kind <= END
    n_edges = int(edge.sum())
    counted = np.flatnonzero(~edge)
    # Per record, the record before it of the same thread (-1 for a thread's first).
    order = np.argsort(thread_id, kind="stable")
    prev = np.full(len(kind), -1, dtype=np.int64)
    same = thread_id[order[1:]] == thread_id[order[:-1]] if len(order) else np.zeros(0, bool)
    prev[order[1:][same]] = order[:-1][same]
    owner = prev[counted]
    ok = owner >= 0
    ok[ok] = edge[owner[ok]]
    counted, owner = counted[ok], owner[ok]
    row = np.cumsum(edge) - 1  # a record's row among the edges
    at = row[owner]
    rusage = kind[counted] == COUNTERS_RUSAGE
    lo = np.uint64(0xFFFFFFFF)
    values = {
        "cpu_ns": (w0[counted].view(np.int64), np.ones(len(counted), bool)),
        "minflt": ((w1[counted] & lo).astype(np.int64), rusage),
        "majflt": ((w1[counted] >> np.uint64(32)).astype(np.int64), rusage),
        "nvcsw": ((w2[counted] & lo).astype(np.int64), rusage),
        "nivcsw": ((w2[counted] >> np.uint64(32)).astype(np.int64), rusage),
    }
    out: dict[str, pa.Array] = {}
    for name, (v, has) in values.items():
        full = np.zeros(n_edges, dtype=np.int64)
        known = np.zeros(n_edges, dtype=bool)
        full[at[has]] = v[has]
        known[at[has]] = True
        out[name] = pa.array(full, pa.int64(), mask=~known)
    return edge, out


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
        raw = _pread(fd, HEADER_BYTES, 0)
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
        rec = _records(fd, h, st.st_size, counts)
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
