"""Shared events, drained while their writers run: a recorder reads each events file's new
records every second or so and appends them to a file beside it, so a process that writes more
edges than its ring holds (NVTX ranges around every op of a long run can, in seconds) loses none
that the drain reached before the ring lapped over them.

The records go to ``<events file name>.drained`` in the drain's own directory beside the
events directory (:func:`~stroboscope.formats.shared_events.drained_dir`, 0700, made here):
append-only, in checked batches, written by one drain (its layout and its reader:
:data:`stroboscope.formats.shared_events_records.DRAINED_SUFFIX`); the reader of the events
takes them with the ring's, each index once. The command may remove its files, or its whole
directory, or put a link in its place: the drain opened the events directory once (0700, this
user's, no link) and works relative to that descriptor, keeps a file's descriptor while its
writer runs, and writes only into its own directory, so what it drained stays, and is read
(with the copies of the file's header and strings it keeps there) when the file is gone.

A poll reads every slot's state (8 bytes a slot: 8 MiB for the default ring) and takes the
published records of the slots whose state changed since the last poll (:class:`FileDrain`).
Never raises for a file's content, and never blocks: regular files only, opened non-blocking; a
file that cannot be read yet is skipped until the next poll, one that is no regular file or
whose header claims more than a writer makes (or than the file holds) is never polled again, and
a file whose writer process ended is polled once more and released (its descriptor and state
given back: a command that starts thousands of short processes costs the recorder nothing per
process that ended). The first read of a header is copied into the drain's directory
(:data:`~stroboscope.formats.shared_events.HEADER_SUFFIX`), and the strings when the file is
released (:data:`~stroboscope.formats.shared_events.STRINGS_SUFFIX`), so the records drained
survive a header the writer damages later, and a file removed. :meth:`EventsDrain.stop` waits
a bounded time for its thread.
"""

from __future__ import annotations

import contextlib
import logging
import os
import stat
import struct
import threading
import time
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from stroboscope._base.files import file_kind, pread_full
from stroboscope.formats.shared_events import (
    HEADER_BYTES,
    HEADER_SUFFIX,
    MAGIC,
    STRINGS_BYTES,
    STRINGS_SUFFIX,
    drained_dir,
    header_problem,
    list_events,
    open_dir,
    parse_header,
    strings_copy,
    whole_size,
)
from stroboscope.formats.shared_events_records import (
    DRAINED_MAGIC,
    DRAINED_SUFFIX,
    DRAINED_WORDS,
    RECORD_BYTES,
    drained_batch,
)

__all__ = ["DRAIN_INTERVAL_S", "STOP_TIMEOUT_S", "EventsDrain", "FileDrain"]

_LOG = logging.getLogger("stroboscope")

DRAIN_INTERVAL_S = 1.0
"""The longest wait between a recorder's polls of its events files, in seconds. A file written
faster is polled sooner: when an eighth of its ring fills in that time (2**17 edges: a flood of
scopes from one process writes over a million a second), down to :data:`_MIN_WAIT_S`, and at
once when a poll itself lasted that long."""
STOP_TIMEOUT_S = 10.0
"""The longest :meth:`EventsDrain.stop` waits for the drain's thread (seconds): a poll reads
regular files only, never blocking, so this bounds only a stalled disk."""
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

    path: str  # the file's name in ``dir_fd`` (or its path, without one)
    dir_fd: int | None = None  # the events directory
    keep_fd: int | None = None  # the drain's own directory (None: nothing is kept)
    fd: int = -1
    cap: int = 0
    states: int = 0
    slots: int = 0
    first: int = 0  # the file's first index (a forked child's file starts at its parent's)
    pid: int = 0  # the writer's, from the header
    seen: np.ndarray[Any, Any] = field(default_factory=lambda: np.zeros(0, np.uint64))
    appended: int = 0
    done: str = ""  # why the file is no longer polled ("" while it is)
    strings_kept: int = -1  # the strings' bytes last copied into the drain's directory

    def poll(self) -> int:
        """Append the records published since the last poll; how many were appended. A file
        whose writer is gone is polled once more and then released (its descriptor and state
        given back): nothing can be published there after its writer's end."""
        if self.done or (not len(self.seen) and not self._open()):
            return 0
        gone = not _alive(self.pid)  # before the poll: all its writes were published before
        n = self._poll()
        self._keep_strings()  # as they are now: a file removed later is read with them
        if gone:
            self.release("its writer ended")
        return n

    def _poll(self) -> int:
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
        if len(records) and self._append(drained_batch(records)):
            index = records[:, 0]
            self.seen[index & np.uint64(self.cap - 1)] = (index + np.uint64(1)) << np.uint64(1)
            self.appended += len(records)
            return len(records)
        return 0

    def _append(self, data: bytes) -> bool:
        """Append the batch ``data`` to the ``.drained`` file in the drain's directory (opened
        for each append, so a file costs no descriptor between polls; :data:`DRAINED_MAGIC`
        first); False when it cannot (the records are taken again by the next poll, or by the
        end's reader from the ring)."""
        if self.keep_fd is None:
            return False
        flags = os.O_WRONLY | os.O_CREAT | os.O_APPEND | os.O_CLOEXEC | os.O_NOFOLLOW
        name = os.path.basename(self.path) + DRAINED_SUFFIX
        try:
            out = os.open(name, flags | os.O_NONBLOCK, 0o600, dir_fd=self.keep_fd)
        except OSError:
            return False
        try:
            st = os.fstat(out)
            if not stat.S_ISREG(st.st_mode):
                self.release("its .drained name holds no regular file")
                return False
            if st.st_size == 0:
                data = DRAINED_MAGIC + data
            done = 0
            while done < len(data):  # whole records: a short write is finished
                n = os.write(out, data[done:])
                if n <= 0:
                    return False
                done += n
            return True
        except OSError:
            return False
        finally:
            os.close(out)

    def _open(self) -> bool:
        """Read the header (the file's writer wrote its magic last), check every size it claims
        against what a writer makes and against the file's real size, and keep a copy of it
        beside the file (:data:`~stroboscope.formats.shared_events.HEADER_SUFFIX`). Never
        blocks: a FIFO or anything else that is no regular file is never polled again."""
        try:
            if self.fd < 0:
                self.fd = os.open(self.path, _READ_FLAGS, dir_fd=self.dir_fd)
            st = os.fstat(self.fd)
            if not stat.S_ISREG(st.st_mode):
                self.release(f"{file_kind(st.st_mode)}, not a regular file")
                return False
            raw = pread_full(self.fd, HEADER_BYTES, 0)
        except OSError:
            self._close_fd()
            return False
        if len(raw) < HEADER_BYTES or raw[:8] != MAGIC:
            self._close_fd()  # not written whole yet: the next poll looks again
            return False
        h = parse_header(raw)
        why = header_problem(h)
        if not why and st.st_size < whole_size(h):
            why = f"{st.st_size} bytes, its header claims {whole_size(h)}"
        if why:
            self.release(why)  # the end's reader says why; a drain takes nothing of it
            return False
        _keep(self.path + HEADER_SUFFIX, raw, self.keep_fd, replace=False)
        self.cap, self.states, self.slots = int(h["capacity"]), int(h["states"]), int(h["slots"])
        self.first = int(h["first_index"])
        self.pid = int(h["pid"])
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

    def _close_fd(self) -> None:
        if self.fd >= 0:
            os.close(self.fd)
            self.fd = -1

    def _keep_strings(self) -> None:
        """Copy the file's strings (as far as its header says they are written, bounded by the
        area a writer makes) into the drain's directory: a file removed later is read with
        them."""
        if self.fd < 0 or self.keep_fd is None or not self.cap:
            return
        try:
            h = parse_header(pread_full(self.fd, HEADER_BYTES, 0))
            used = min(int(h["strings_used"]), STRINGS_BYTES)
            if used == self.strings_kept:
                return  # nothing interned since the last copy
            raw = pread_full(self.fd, used, self.states + self.cap * 8) if used > 0 else b""
        except (OSError, ValueError, struct.error):
            return
        if _keep(self.path + STRINGS_SUFFIX, strings_copy(raw), self.keep_fd, replace=True):
            self.strings_kept = used

    def release(self, why: str) -> None:
        """Stop polling the file: its strings are kept, its descriptor and state given back."""
        self._keep_strings()
        self._close_fd()
        self.seen = np.zeros(0, np.uint64)
        self.done = why

    def close(self) -> None:
        self._keep_strings()
        self._close_fd()


_READ_FLAGS = os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC | os.O_NOFOLLOW


def _alive(pid: int) -> bool:
    """Whether process ``pid`` may still write (not gone, not a zombie). A pid that is no
    process's (0, negative: never signalled) counts as alive: its file is polled to the end."""
    if pid <= 0:
        return True
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            state = f.read().rpartition(b")")[2].split()[:1]
    except FileNotFoundError:
        return False
    except OSError:
        return True
    return state not in ([b"Z"], [b"X"])


def _keep(name: str, raw: bytes, keep_fd: int | None, *, replace: bool) -> bool:
    """Write ``raw`` as ``name`` in the drain's directory (0600, never through a link); with
    ``replace``, whole or not at all (written beside it, then renamed over it), else never over
    an existing file. Whether it was written."""
    if keep_fd is None:
        return False
    name = os.path.basename(name)
    target = name + ".tmp" if replace else name
    flags = os.O_WRONLY | os.O_CREAT | os.O_CLOEXEC | os.O_NOFOLLOW | os.O_NONBLOCK
    flags |= os.O_TRUNC if replace else os.O_EXCL
    try:
        fd = os.open(target, flags, 0o600, dir_fd=keep_fd)
    except OSError:
        return False  # there already (a drain before this one), or no room
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            return False
        view = memoryview(raw)
        while view:
            view = view[os.write(fd, view) :]
    except OSError:
        return False
    finally:
        os.close(fd)
    if replace:
        try:
            os.rename(target, name, src_dir_fd=keep_fd, dst_dir_fd=keep_fd)
        except OSError:
            return False
    return True


class EventsDrain:
    """Drains every events file of ``directory`` every ``interval`` seconds on a thread of its
    own, until :meth:`stop` (which drains once more), into its own directory beside it
    (:func:`~stroboscope.formats.shared_events.drained_dir`, made here 0700). ``directory``
    must be this user's and private (0700, no link: as the recorder made it), else nothing is
    drained (said once). A failing poll is logged once and never stops the next, nor the
    recording."""

    def __init__(self, directory: str, interval: float | None = None) -> None:
        self.directory = directory
        self.interval = DRAIN_INTERVAL_S if interval is None else interval
        self.files: dict[str, FileDrain] = {}
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._failed = False
        self._dir_fd: int | None = None
        self._keep_fd: int | None = None
        try:  # opened once: a directory replaced later (a link to /, say) is not followed
            self._dir_fd = open_dir(directory, private=True)
            keep = drained_dir(directory)
            with contextlib.suppress(FileExistsError):
                os.mkdir(keep, 0o700)
            self._keep_fd = open_dir(keep, private=True)
        except OSError as exc:
            self._warn(f"the scope events of {directory} are not drained ({exc})")
            self._close_dirs()

    def _close_dirs(self) -> None:
        for fd in (self._dir_fd, self._keep_fd):
            if fd is not None:
                os.close(fd)
        self._dir_fd = self._keep_fd = None

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
        """One pass over the directory's files; the records appended. Never raises: a file
        that fails is logged once and left to the end's reader."""
        total = 0
        if self._dir_fd is None:
            return 0
        try:
            names = list_events(self._dir_fd)  # the .sev files only
        except OSError as exc:  # unreadable: the files known are still polled
            self._warn(f"the scope events of {self.directory} could not be listed ({exc})")
            names = []
        for name in names:
            if name not in self.files:
                self.files[name] = FileDrain(name, dir_fd=self._dir_fd, keep_fd=self._keep_fd)
        # Every file known, listed or not: one the command removed is read through the
        # descriptor kept while its writer runs.
        for name, f in list(self.files.items()):
            try:
                total += f.poll()
            except Exception as exc:  # (MemoryError too) a file must never stop the others
                f.release(f"{type(exc).__name__}: {exc}")
                self._warn(f"the scope events of {name} were not drained ({f.done})")
        return total

    def _warn(self, message: str) -> None:
        if not self._failed:
            _LOG.warning("stroboscope: %s", message)
            self._failed = True

    def stop(self, timeout: float = STOP_TIMEOUT_S) -> int:
        """Stop the thread (waiting ``timeout`` seconds at most) and drain once more; the
        records appended in all. A thread that does not end in time is left (a daemon; its
        files are then not polled again here: the end's reader reads the rings)."""
        if self._thread is not None:
            self._stop.set()
            self._thread.join(timeout)
            if self._thread.is_alive():
                _LOG.warning(
                    "stroboscope: the drain of %s did not end within %g s: left running",
                    self.directory,
                    timeout,
                )
                return sum(f.appended for f in list(self.files.values()))
            self._thread = None
        self.poll()
        for f in self.files.values():
            f.close()
        self._close_dirs()
        return sum(f.appended for f in self.files.values())
