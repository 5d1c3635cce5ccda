"""Shared events followed while their writers run: each poll returns only the edges published
since the last, read-only (nothing is drained, written or locked).

The files and their layout are :mod:`stroboscope.formats.shared_events`'s; the records are
decoded by :func:`stroboscope.formats.shared_events_records.decode_records`, as the reader of a
finished recording does. A poll reads the states of the slots from the next index it expects,
in chunks, and takes the published records there whose index is at least that one (a record
still being written is passed over; a ring that lapped the view loses the indices in between,
counted in :attr:`EventsTail.lost`).
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from stroboscope._base.files import pread_full
from stroboscope.formats.shared_events import (
    HEADER_BYTES,
    MAGIC,
    FileCounts,
    events_files,
    header_problem,
    parse_header,
    read_strings,
)
from stroboscope.formats.shared_events_records import RECORD_BYTES, decode_records

__all__ = ["CHUNK_SLOTS", "Edges", "EventsTail"]

CHUNK_SLOTS = 4096
"""Slots whose states one read covers (32 KiB)."""


@dataclass(frozen=True)
class Edges:
    """Scope edges in index order per file, files one after another: CLOCK_MONOTONIC ns,
    kind (1 begin, 2 end), writer pid, the file's number (a stack id is unique within one file:
    one process and producer), thread id, stack id, depth and scope name."""

    mono_ns: np.ndarray[Any, Any]
    kind: np.ndarray[Any, Any]
    pid: np.ndarray[Any, Any]
    source: np.ndarray[Any, Any]
    thread_id: np.ndarray[Any, Any]
    stack_id: np.ndarray[Any, Any]
    depth: np.ndarray[Any, Any]
    scope: list[str]

    def __len__(self) -> int:
        return len(self.mono_ns)


@dataclass
class _FileTail:
    path: str
    fd: int = -1
    h: dict[str, Any] = field(default_factory=dict)
    next_index: int = 0
    strings: list[str] = field(default_factory=lambda: [""])
    lost: int = 0

    def _open(self) -> bool:
        try:
            if self.fd < 0:
                self.fd = os.open(self.path, os.O_RDONLY | os.O_CLOEXEC | os.O_NOFOLLOW)
            raw = pread_full(self.fd, HEADER_BYTES, 0)
        except OSError:
            return False
        if len(raw) < HEADER_BYTES or raw[:8] != MAGIC:
            return False  # its magic is written last: not whole yet
        h = parse_header(raw)
        if header_problem(h):
            return False
        self.h = h
        self.next_index = int(h["first_index"])
        return True

    def poll(self) -> tuple[np.ndarray[Any, Any], np.ndarray[Any, Any]]:
        """Indices and ``(n, 4)`` words of the records published since the last poll."""
        none = (np.zeros(0, np.uint64), np.zeros((0, 4), np.uint64))
        if not self.h and not self._open():
            return none
        cap = int(self.h["capacity"])
        got_i, got_w = [], []
        for _ in range(cap // CHUNK_SLOTS + 2):  # once round the ring at most
            n = min(CHUNK_SLOTS, cap)
            slot0 = self.next_index & (cap - 1)
            n = min(n, cap - slot0)  # one run of slots per read (the next wraps)
            idx, words, taken_all = self._chunk(slot0, n, cap)
            if len(idx):
                got_i.append(idx)
                got_w.append(words)
                new_next = int(idx.max()) + 1
                if new_next - self.next_index > len(idx):
                    self.lost += new_next - self.next_index - len(idx)
                self.next_index = new_next
            if not taken_all:
                break
        if not got_i:
            return none
        return np.concatenate(got_i), np.concatenate(got_w)

    def _chunk(
        self, slot0: int, n: int, cap: int
    ) -> tuple[np.ndarray[Any, Any], np.ndarray[Any, Any], bool]:
        states_at, slots_at = int(self.h["states"]), int(self.h["slots"])
        try:
            s1 = np.frombuffer(pread_full(self.fd, n * 8, states_at + slot0 * 8), "<u8")
        except OSError:
            return np.zeros(0, np.uint64), np.zeros((0, 4), np.uint64), False
        if not len(s1):
            return np.zeros(0, np.uint64), np.zeros((0, 4), np.uint64), False
        slot = np.arange(slot0, slot0 + len(s1), dtype=np.uint64)
        index = (s1 >> np.uint64(1)) - np.uint64(1)
        ok = (s1 != 0) & (s1 & np.uint64(1) == 0) & ((index & np.uint64(cap - 1)) == slot)
        ok &= index >= np.uint64(self.next_index)
        at = np.flatnonzero(ok)
        if not len(at):
            return np.zeros(0, np.uint64), np.zeros((0, 4), np.uint64), False
        hi = int(at.max()) + 1
        body = pread_full(self.fd, hi * RECORD_BYTES, slots_at + slot0 * RECORD_BYTES)
        whole = len(body) // RECORD_BYTES
        at = at[at < whole]
        words = np.frombuffer(body[: whole * RECORD_BYTES], "<u8").reshape(-1, 4)[at]
        s2 = np.frombuffer(pread_full(self.fd, hi * 8, states_at + slot0 * 8), "<u8")
        same = s2[at] == s1[at] if len(s2) >= hi else np.zeros(len(at), bool)
        # Every slot of the chunk was a new record: the next chunk may hold more.
        return index[at][same], words[same], bool(same.all()) and len(at) == len(s1)

    def names(self, ids: np.ndarray[Any, Any]) -> list[str]:
        """The scope names of ``ids`` (the strings are read again when a new id appears)."""
        if len(ids) and int(ids.max()) >= len(self.strings):
            try:
                h = parse_header(pread_full(self.fd, HEADER_BYTES, 0))
                size = os.fstat(self.fd).st_size
                self.strings = read_strings(self.fd, h, size, FileCounts(self.path))
            except OSError:
                pass
        s = self.strings
        return [s[i] if i < len(s) else f"<scope {i}>" for i in ids.tolist()]

    def close(self) -> None:
        if self.fd >= 0:
            os.close(self.fd)
            self.fd = -1


@dataclass
class EventsTail:
    """The scope edges written into a shared-events directory, followed (see the module)."""

    directory: str
    files: dict[str, _FileTail] = field(default_factory=dict)

    @property
    def lost(self) -> int:
        """Edges the view never saw (overwritten before a poll reached them)."""
        return sum(f.lost for f in self.files.values())

    def poll(self) -> Edges:
        """The edges published since the last poll, every file's in its index order."""
        parts: list[Edges] = []
        try:
            paths = events_files(self.directory)
        except (OSError, ValueError):
            paths = []  # the directory went away (the recording ended): nothing new
        for path in paths:
            code = list(self.files).index(path) if path in self.files else len(self.files)
            tail = self.files.get(path)
            if tail is None:
                tail = self.files[path] = _FileTail(path)
            index, words = tail.poll()
            if not len(index):
                continue
            rec = decode_records(index, words, tail.h, FileCounts(path))
            n = len(rec["index"])
            parts.append(
                Edges(
                    rec["mono_ns"].copy(),
                    rec["kind"],
                    np.full(n, int(tail.h["pid"]), np.int64),
                    np.full(n, code, np.int64),
                    rec["thread_id"],
                    rec["stack_id"],
                    rec["depth"].astype(np.int64),
                    tail.names(rec["scope_id"]),
                )
            )
        if not parts:
            e = np.zeros(0, np.int64)
            return Edges(e, e.astype(np.uint8), e, e, e, e.astype(np.uint64), e, [])
        joined = {f: np.concatenate([getattr(p, f) for p in parts]) for f in _ARRAYS}
        return Edges(**joined, scope=[s for p in parts for s in p.scope])

    def close(self) -> None:
        """Close every file (nothing is written or removed)."""
        for f in self.files.values():
            f.close()


_ARRAYS = ("mono_ns", "kind", "pid", "source", "thread_id", "stack_id", "depth")
