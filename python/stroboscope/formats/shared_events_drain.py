"""Shared events, drained while their writers run: a recorder reads each events file's new
records every second or so and appends them to a file beside it, so a process that writes more
edges than its ring holds (NVTX ranges around every op of a long run can, in seconds) loses none
that the drain reached before the ring lapped over them.

The records go to ``<events file>.drained``, append-only, written by one drain (its layout and
its reader: :data:`stroboscope.formats.shared_events_records.DRAINED_SUFFIX`); the reader of
the events takes them with the ring's, each index once.

A poll reads the states of the ring from the slot after the last record it appended, a chunk at
a time, while a chunk holds records newer than that: the work of a poll follows what was
written since the previous one, not the ring's size. A record still being written is looked at
again at the next polls (a writer killed there never publishes it: it is given up after two); a
record the writer published after a poll passed its slot, or one overwritten before a poll
reached it, is read at the end from the ring if it is still there, and counted lost otherwise.
Never raises for a file's content; a file that cannot be read is skipped until the next poll.
"""

from __future__ import annotations

import logging
import os
import threading
import time
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from stroboscope._base.files import pread_full
from stroboscope.formats.shared_events import (
    FILE_SUFFIX,
    HEADER_BYTES,
    MAGIC,
    _check_header,
    _header,
    events_files,
)
from stroboscope.formats.shared_events_records import DRAINED_SUFFIX, DRAINED_WORDS, RECORD_BYTES

__all__ = ["DRAIN_INTERVAL_S", "EventsDrain", "FileDrain"]

_LOG = logging.getLogger("stroboscope")

_FIRST_CHUNK, _CHUNK = 1 << 10, 1 << 16  # slots per read of the states: 8 KiB, growing to 512
DRAIN_INTERVAL_S = 1.0
"""The longest wait between a recorder's polls of its events files, in seconds. A file written
faster is polled sooner: when a quarter of its ring fills in that time (2**18 edges: a flood of
scopes from one process writes over a million a second), down to :data:`_MIN_WAIT_S`."""
_MIN_WAIT_S = 0.01
_FILL = 0.25  # the share of a ring that may fill between two polls
_HOLD_POLLS = 2  # polls a record being written, or an unwritten slot, is waited for
_NONE = np.zeros((0, DRAINED_WORDS), "<u8")


@dataclass
class FileDrain:
    """One events file's drain: where it stands in the ring, and its ``.drained`` file.

    Every index below ``next`` was appended or given up; the ones among them still being
    written at a poll wait in ``pending``. A poll appends the run of records that follows
    ``next`` without a hole: it stops at the first slot not written yet, so a record written
    while the poll reads is read by the next one (a slot that stays unwritten while later ones
    are published, a writer killed between its claim and its write, is given up after
    :data:`_HOLD_POLLS` polls). A writer that lapped the drain is read from the whole ring."""

    path: str
    fd: int = -1
    out: int = -1
    cap: int = 0
    states: int = 0
    slots: int = 0
    next: int = -1  # every index below was appended or given up (-1: header not read yet)
    pending: dict[int, int] = field(default_factory=dict)  # index being written -> polls seen
    stuck: tuple[int, int] = (-1, 0)  # an unwritten slot with published ones after it, polls
    appended: int = 0

    def poll(self) -> int:
        """Append the records published since the last poll; how many were appended."""
        if self.next < 0 and not self._open():
            return 0
        got: list[np.ndarray[Any, Any]] = [self._retry_pending()]
        chunk = _FIRST_CHUNK  # a quiet file costs one small read
        start = self.next
        while self.next < start + self.cap:
            slot0 = self.next & (self.cap - 1)
            n = min(chunk, self.cap - slot0, start + self.cap - self.next)  # each slot once
            fresh, whole = self._chunk(slot0, n)
            got.append(fresh)
            if not whole:
                break
            chunk = min(chunk * 8, _CHUNK)
        records = np.concatenate(got)
        if len(records):
            os.write(self.out, records.astype("<u8").tobytes())
            self.appended += len(records)
        return len(records)

    def _chunk(self, slot0: int, n: int) -> tuple[np.ndarray[Any, Any], bool]:
        """The records of the run from ``next`` in slots [slot0, slot0 + n); ``next`` moves past
        them. True when the whole chunk was taken (the run may go on in the next)."""
        s1 = self._states(slot0, n)
        if s1 is None or len(s1) < n:
            return _NONE, False
        expected = np.arange(self.next, self.next + n, dtype=np.uint64)
        index = (s1 >> np.uint64(1)) - np.uint64(1)
        written = (s1 != 0) & (index == expected)
        if ((s1 != 0) & (index > expected)).any():
            return self._resync(), False  # lapped: some slot holds a later lap already
        busy = written & (s1 & np.uint64(1) == 1)
        gap = np.flatnonzero(~written)
        k = int(gap[0]) if len(gap) else n  # the run ends at the first slot not written yet
        if k < n and written[k:].any():
            # Written records after an unwritten slot: a writer between its claim and its
            # write, for now; given up (lost) if it stays so.
            at, polls = self.stuck
            polls = polls + 1 if at == self.next + k else 1
            self.stuck = (self.next + k, polls)
            if polls >= _HOLD_POLLS:
                self.stuck = (-1, 0)
                k += 1  # given up: the run goes on after it
                more = np.flatnonzero(~written[k:])
                k = k + int(more[0]) if len(more) else n
        for i in np.flatnonzero(busy[:k]).tolist():
            self.pending[self.next + i] = 0
        take = np.flatnonzero(written[:k] & ~busy[:k])
        records = self._records(slot0, take, s1)
        self.next += k
        return records, k == n

    def _resync(self) -> np.ndarray[Any, Any]:
        """The writer lapped the drain: every published record of the whole ring from ``next``
        on, and ``next`` after the latest (what lay between was overwritten)."""
        s1 = self._states(0, self.cap)
        if s1 is None or len(s1) < self.cap:
            return _NONE
        index = (s1 >> np.uint64(1)) - np.uint64(1)
        mine = (s1 != 0) & (s1 & np.uint64(1) == 0) & (index >= np.uint64(self.next))
        mine &= (index & np.uint64(self.cap - 1)) == np.arange(self.cap, dtype=np.uint64)
        records = self._records(0, np.flatnonzero(mine), s1)
        if len(records):
            self.next = int(records[:, 0].max()) + 1
        self.pending.clear()
        return records

    def _open(self) -> bool:
        """Read the header (the file's writer wrote its magic last) and open the output."""
        try:
            if self.fd < 0:
                self.fd = os.open(self.path, os.O_RDONLY | os.O_CLOEXEC | os.O_NOFOLLOW)
            raw = pread_full(self.fd, HEADER_BYTES, 0)
        except OSError:
            return False
        if len(raw) < HEADER_BYTES or raw[:8] != MAGIC:
            return False  # not written whole yet: the next poll looks again
        h = _header(raw)
        if _check_header(h):
            return False
        flags = os.O_WRONLY | os.O_CREAT | os.O_APPEND | os.O_CLOEXEC | os.O_NOFOLLOW
        try:
            self.out = os.open(self.path + DRAINED_SUFFIX, flags, 0o600)
        except OSError:
            return False
        self.cap, self.states, self.slots = int(h["capacity"]), int(h["states"]), int(h["slots"])
        self.next = int(h["first_index"])
        return True

    def _states(self, slot0: int, n: int) -> np.ndarray[Any, Any] | None:
        try:
            raw = pread_full(self.fd, n * 8, self.states + slot0 * 8)
        except OSError:
            return None
        return np.frombuffer(raw[: len(raw) // 8 * 8], dtype="<u8")

    def _records(
        self, slot0: int, at: np.ndarray[Any, Any], s1: np.ndarray[Any, Any]
    ) -> np.ndarray[Any, Any]:
        """The records at chunk offsets ``at``, kept only where their state did not change
        while they were read (the writer may have lapped over them meanwhile)."""
        if not len(at):
            return _NONE
        hi = int(at.max()) + 1
        try:
            body = pread_full(self.fd, hi * RECORD_BYTES, self.slots + slot0 * RECORD_BYTES)
        except OSError:
            return _NONE
        whole = len(body) // RECORD_BYTES
        at = at[at < whole]
        words = np.frombuffer(body[: whole * RECORD_BYTES], dtype="<u8").reshape(-1, 4)[at]
        s2 = self._states(slot0, hi)
        if s2 is None or len(s2) < hi:
            return _NONE
        same = s2[at] == s1[at]
        out = np.empty((int(same.sum()), DRAINED_WORDS), dtype="<u8")
        out[:, 0] = (s1[at][same] >> np.uint64(1)) - np.uint64(1)
        out[:, 1:] = words[same]
        return out

    def _retry_pending(self) -> np.ndarray[Any, Any]:
        """The records that were being written at an earlier poll and are published now."""
        got = []
        for index, polls in list(self.pending.items()):
            slot = index & (self.cap - 1)
            s1 = self._states(slot, 1)
            state = None if s1 is None or not len(s1) else int(s1[0])
            if s1 is not None and state == (index + 1) << 1:
                got.append(self._records(slot, np.zeros(1, np.int64), s1))
                del self.pending[index]
            elif state != ((index + 1) << 1) | 1 or polls + 1 >= _HOLD_POLLS:
                del self.pending[index]  # overwritten, or its writer never finishes it
            else:
                self.pending[index] = polls + 1
        return np.concatenate(got) if got else _NONE

    def close(self) -> None:
        for fd in (self.fd, self.out):
            if fd >= 0:
                os.close(fd)
        self.fd = self.out = -1


class EventsDrain:
    """Drains every events file of ``directory`` every ``interval`` seconds on a thread of its
    own, until :meth:`stop` (which drains once more). A failing poll is logged once and never
    stops the next, nor the recording."""

    def __init__(self, directory: str, interval: float | None = None) -> None:
        self.directory = directory
        self.interval = DRAIN_INTERVAL_S if interval is None else interval
        self.files: dict[str, FileDrain] = {}
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._failed = False

    def start(self) -> EventsDrain:
        self._thread = threading.Thread(
            target=self._run, name="stroboscope-events-drain", daemon=True
        )
        self._thread.start()
        return self

    def _run(self) -> None:
        wait, last = self.interval, time.monotonic()
        while not self._stop.wait(wait):
            before = {path: f.appended for path, f in self.files.items()}
            self.poll()
            now = time.monotonic()
            # The fastest file's rate since the last poll sets the next wait.
            fastest = max(
                (
                    (f.appended - before.get(path, 0)) / max(f.cap, 1)
                    for path, f in self.files.items()
                ),
                default=0.0,
            ) / max(now - last, 1e-3)  # ring fills per second
            last = now
            wait = self.interval if fastest <= 0 else min(self.interval, _FILL / fastest)
            wait = max(wait, _MIN_WAIT_S)

    def poll(self) -> int:
        """One pass over the directory's files; the records appended."""
        total = 0
        try:
            for path in events_files(self.directory):
                if path.endswith(FILE_SUFFIX):
                    if path not in self.files:
                        self.files[path] = FileDrain(path)
                    total += self.files[path].poll()
        except (OSError, ValueError) as exc:  # the directory went away: the end reads what is left
            if not self._failed:
                _LOG.warning(
                    "stroboscope: the scope events of %s were not drained (%s)", self.directory, exc
                )
                self._failed = True
        return total

    def stop(self) -> int:
        """Stop the thread and drain once more; the records appended in all."""
        if self._thread is not None:
            self._stop.set()
            self._thread.join()
            self._thread = None
            self.poll()
        for f in self.files.values():
            f.close()
        return sum(f.appended for f in self.files.values())
