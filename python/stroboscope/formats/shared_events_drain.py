"""Shared events, drained while their writers run: a recorder reads each events file's new
records every second or so and appends them to a file beside it, so a process that writes more
edges than its ring holds (NVTX ranges around every op of a long run can, in seconds) loses none
that the drain reached before the ring lapped over them.

The records go to ``<events file>.drained``, append-only, written by one drain (its layout and
its reader: :data:`stroboscope.formats.shared_events_records.DRAINED_SUFFIX`); the reader of
the events takes them with the ring's, each index once.

A poll reads every slot's state (8 bytes a slot: 8 MiB for the default ring) and takes the
published records of the slots whose state changed since the last poll (:class:`FileDrain`).
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
    HEADER_BYTES,
    MAGIC,
    _check_header,
    _header,
    events_files,
)
from stroboscope.formats.shared_events_records import DRAINED_SUFFIX, DRAINED_WORDS, RECORD_BYTES

__all__ = ["DRAIN_INTERVAL_S", "EventsDrain", "FileDrain"]

_LOG = logging.getLogger("stroboscope")

DRAIN_INTERVAL_S = 1.0
"""The longest wait between a recorder's polls of its events files, in seconds. A file written
faster is polled sooner: when an eighth of its ring fills in that time (2**17 edges: a flood of
scopes from one process writes over a million a second), down to :data:`_MIN_WAIT_S`, and at
once when a poll itself lasted that long."""
_MIN_WAIT_S = 0.01
_FILL = 0.125  # the share of a ring that may fill between two polls
_NONE = np.zeros((0, DRAINED_WORDS), "<u8")


@dataclass
class FileDrain:
    """One events file's drain: the state it last saw in each slot of the ring, and its
    ``.drained`` file.

    A poll reads every slot's state and looks only at the slots whose state changed since: it
    takes each published record there once, whatever order the writers publish in, with nothing
    to wait for or give up (a record still being written is taken by the poll that finds it
    published; one that a later lap overwrote before any poll found it is lost, and counted so
    by the reader). An idle file costs one read of its states and one comparison."""

    path: str
    fd: int = -1
    out: int = -1
    cap: int = 0
    states: int = 0
    slots: int = 0
    first: int = 0  # the file's first index (a forked child's file starts at its parent's)
    seen: np.ndarray[Any, Any] = field(default_factory=lambda: np.zeros(0, np.uint64))
    appended: int = 0

    def poll(self) -> int:
        """Append the records published since the last poll; how many were appended."""
        if not len(self.seen) and not self._open():
            return 0
        s1 = self._states(0, self.cap)
        if s1 is None or len(s1) < self.cap:
            return 0  # cut short, or gone: the end reads what the file holds
        changed = np.flatnonzero(s1 != self.seen)
        if not len(changed):
            return 0
        state = s1[changed]
        index = (state >> np.uint64(1)) - np.uint64(1)
        ok = (state != 0) & (state & np.uint64(1) == 0) & (index >= np.uint64(self.first))
        ok &= (index & np.uint64(self.cap - 1)) == changed.astype(np.uint64)
        self.seen[changed[~ok]] = state[~ok]  # being written, or not a record: looked at again
        at = changed[ok]  # when its state changes
        if not len(at):
            return 0
        records = self._records(int(at[0]), at - at[0], s1[at[0] :])
        if len(records):
            os.write(self.out, records.tobytes())
            index = records[:, 0]
            self.seen[index & np.uint64(self.cap - 1)] = (index + np.uint64(1)) << np.uint64(1)
            self.appended += len(records)
        return len(records)

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
        self.first = int(h["first_index"])
        self.seen = np.zeros(self.cap, dtype=np.uint64)  # 0: never written
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
        """The records at offsets ``at`` from ``slot0`` (``s1``: their states from there), kept
        only where their state did not change while they were read (a writer may have lapped
        over them meanwhile: the next poll takes the newer one)."""
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
        wait, last = _MIN_WAIT_S, time.monotonic()  # idle, the waits double up to interval
        while not self._stop.wait(wait):
            before = {path: f.appended for path, f in self.files.items()}
            last_poll_start = time.monotonic()
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
            # at most twice the last wait: a writer that starts slowly is not left a second
            wait = min(self.interval, 2 * wait, _FILL / fastest if fastest > 0 else self.interval)
            if fastest * (now - last_poll_start) >= _FILL:  # the poll itself took that long
                wait = 0.0
            wait = max(wait, _MIN_WAIT_S)

    def poll(self) -> int:
        """One pass over the directory's files; the records appended."""
        total = 0
        try:
            for path in events_files(self.directory):  # the .sev files only
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
