"""Shared events: the records of an events file's ring, as the reader decodes them (the file
and its header: :mod:`stroboscope.formats.shared_events`, which holds the whole layout).

- slots: ``capacity`` records of four u64 words, record ``i`` in slot ``i & (capacity - 1)``:
  ``mono_ns`` | ``stack_id`` | ``scope_id + labels_id << 32`` | ``tid (32 bits) + depth << 32 +
  kind << 48``; kinds 3 and 4 (version 2) are the counters of the edge before them of the same
  thread (:func:`split_counters`).
- states: one u64 per slot: 0 never written, ``(i + 1) << 1`` record ``i`` published,
  ``((i + 1) << 1) | 1`` record ``i`` being written (not read).
"""

from __future__ import annotations

import os
import stat
import struct
import zlib
from dataclasses import dataclass
from typing import Any

import numpy as np
import pyarrow as pa

from stroboscope._base.files import pread_full

__all__ = [
    "BEGIN",
    "COUNTERS",
    "COUNTERS_RUSAGE",
    "COUNTER_COLUMNS",
    "DRAINED_MAGIC",
    "DRAINED_SUFFIX",
    "DRAINED_WORDS",
    "END",
    "RECORD_BYTES",
    "FileCounts",
    "decode_records",
    "drained_batch",
    "read_drained",
    "read_records",
    "ring_words",
    "split_counters",
]

RECORD_BYTES = 32
DRAINED_SUFFIX = ".drained"
"""What a recorder drained of an events file while its writer ran, kept in the drain's own
directory (:func:`stroboscope.formats.shared_events.drained_dir`, out of the command's events
directory) as ``<events file name>.drained``: :data:`DRAINED_MAGIC`, then checked batches of
records of ``DRAINED_WORDS`` u64, the index then the four words as the ring holds them."""
DRAINED_WORDS = 5
DRAINED_MAGIC = b"STRBDRN1"
"""The first 8 bytes of a ``.drained`` file; then batches, each a u32 record count, the
u32 CRC-32 of the records' bytes, and the records (:func:`drained_batch`)."""
BEGIN, END, COUNTERS, COUNTERS_RUSAGE = 1, 2, 3, 4
COUNTER_COLUMNS = ("cpu_ns", "minflt", "majflt", "nvcsw", "nivcsw")
"""An edge's own counters (edge counters; null where the edge has none): the thread's CPU clock
(``CLOCK_THREAD_CPUTIME_ID`` ns) and, in mode ``rusage``, the low 32 bits of its minor and major
faults and voluntary and involuntary context switches."""


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


def drained_batch(records: np.ndarray[Any, Any]) -> bytes:
    """One batch of a ``.drained`` file: ``records`` (``(n, DRAINED_WORDS)`` u64, n > 0) behind
    their count and CRC-32 (:data:`DRAINED_MAGIC` opens the file)."""
    data = np.ascontiguousarray(records, dtype="<u8").tobytes()
    return _BATCH.pack(len(records), zlib.crc32(data)) + data


def read_drained(
    name: str, dir_fd: int | None = None
) -> tuple[np.ndarray[Any, Any], np.ndarray[Any, Any], str] | None:
    """The records a drain kept of the events file ``name`` (its ``.drained`` copy, relative to
    ``dir_fd``): indices, ``(n, 4)`` words and why some were not read ("" when all were); None
    without a copy. Read up to the first batch that is cut short (a write the drain did not
    finish: not damage) or fails its check (said); a file without :data:`DRAINED_MAGIC` is not
    a drain's and is refused in words. Never blocks on a FIFO."""
    try:
        fd = os.open(name + DRAINED_SUFFIX, _READ, dir_fd=dir_fd)
    except OSError:
        return None
    rec = 8 * DRAINED_WORDS
    parts: list[bytes] = []
    why = ""
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            return None
        if pread_full(fd, len(DRAINED_MAGIC), 0) != DRAINED_MAGIC:
            why = "its drained copy is not one a drain wrote (no drained header): not read"
            return _NO_WORDS[0], _NO_WORDS[1], why
        at = len(DRAINED_MAGIC)
        while at + _BATCH.size <= st.st_size:
            n, crc = _BATCH.unpack(pread_full(fd, _BATCH.size, at))
            if n == 0 or n > MAX_BATCH:
                why = f"its drained copy is damaged at byte {at} (a batch of {n} records)"
                break
            if at + _BATCH.size + n * rec > st.st_size:
                break  # cut short: a write the drain did not finish
            data = pread_full(fd, n * rec, at + _BATCH.size)
            if len(data) != n * rec or zlib.crc32(data) != crc:
                why = f"its drained copy is damaged at byte {at} (checksum)"
                break
            parts.append(data)
            at += _BATCH.size + n * rec
    except OSError as exc:
        why = f"its drained copy could not be read whole ({exc.strerror or exc})"
    finally:
        os.close(fd)
    raw = b"".join(parts)
    words = np.frombuffer(raw, dtype="<u8").reshape(-1, DRAINED_WORDS)
    return words[:, 0].copy(), words[:, 1:].copy(), why


_READ = os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC | os.O_NOFOLLOW
_BATCH = struct.Struct("<II")  # records in the batch, CRC-32 of their bytes
MAX_BATCH = 1 << 24
"""The most records one batch of a ``.drained`` file holds (a drain appends at most a ring's
worth per poll; the largest ring a writer makes: ``shared_events.MAX_CAPACITY``)."""
_NO_WORDS = (np.zeros(0, np.uint64), np.zeros((0, 4), "<u8"))


def ring_words(
    fd: int, h: dict[str, Any], size: int, counts: FileCounts
) -> tuple[np.ndarray[Any, Any], np.ndarray[Any, Any]]:
    """The published records of the file's ring as they lie: their indices (u64) and their four
    words each (an ``(n, 4)`` u64 array), in slot order."""
    cap = int(h["capacity"])
    states_at, slots_at = int(h["states"]), int(h["slots"])
    held = max(0, min(cap, (size - states_at) // 8))  # states the file still has
    if held < cap and not counts.damaged:
        counts.damaged = f"cut short at byte {size} (states of slots {held} to {cap} missing)"
    raw = pread_full(fd, held * 8, states_at)
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
        body = pread_full(fd, hi * RECORD_BYTES, slots_at)
        whole = len(body) // RECORD_BYTES
        words = np.frombuffer(body[: whole * RECORD_BYTES], dtype="<u8").reshape(-1, 4)
        keep = slot < whole
        slot, index = slot[keep], index[keep]
        # A live writer may have reused a slot while it was read: keep a record only if its
        # state is still the same (the seqlock check of the C++ reader).
        s2 = np.frombuffer(pread_full(fd, held * 8, states_at), dtype="<u8")
        same = s2[slot] == s1[slot] if len(s2) == held else np.zeros(len(slot), bool)
        slot, index = slot[same], index[same]
        words = words[slot]
    return index, words


def read_records(
    fd: int,
    h: dict[str, Any],
    size: int,
    counts: FileCounts,
    drained: tuple[np.ndarray[Any, Any], np.ndarray[Any, Any]] | None = None,
) -> dict[str, Any]:
    """The published records of the file's ring, with those a drain kept of it (``drained``:
    indices and words, see :mod:`stroboscope.formats.shared_events_drain`), each index once, in
    index order, as arrays."""
    index, words = ring_words(fd, h, size, counts)
    if drained is not None and len(drained[0]):
        index = np.concatenate([drained[0], index])
        words = np.concatenate([drained[1], words])
        index, first = np.unique(index, return_index=True)  # the same record, read twice
        words = words[first]
    return decode_records(index, words, h, counts)


def decode_records(
    index: np.ndarray[Any, Any], words: np.ndarray[Any, Any], h: dict[str, Any], counts: FileCounts
) -> dict[str, Any]:
    """Records (distinct indices and their words) decoded, in index order; ``counts`` gets the
    indices missing between the file's first index and its last record (``lost``) and, of
    those, the ones a later lap of the ring overwrote (``overwritten``)."""
    cap = int(h["capacity"])
    kind = ((words[:, 3] >> np.uint64(48)) & np.uint64(0xFF)).astype(np.uint8)
    good = (kind >= BEGIN) & (kind <= (END if h["version"] == 1 else COUNTERS_RUSAGE))
    if not good.all() and not counts.damaged:
        counts.damaged = f"{int((~good).sum())} record(s) with an unknown kind"
    words, index, kind = words[good], index[good], kind[good]
    order = np.argsort(index, kind="stable")
    words, index, kind = words[order], index[order], kind[order]
    if len(index):
        first, last = int(h["first_index"]), int(index[-1])
        counts.lost = last + 1 - first - len(index)
        # Missing below the ring's oldest slot (last - cap + 1): overwritten by a later lap.
        below = last + 1 - cap - first
        if below > 0:
            counts.overwritten = below - int(np.searchsorted(index, np.uint64(last + 1 - cap)))
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
