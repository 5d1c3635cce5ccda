"""A spool followed while its recorder writes it: only the rows written since the last look,
read-only, without the recorder's cooperation and without the extension.

A recorder maps its spool ``MAP_SHARED`` and holds an exclusive ``flock`` on it for as long as
it records (``cpp/src/spool.cpp``). :class:`LiveSpool` opens the file read-only, maps it
``PROT_READ`` and, at each :meth:`LiveSpool.poll`, reads the two row counters and copies the
rows since its last poll out of the ring (:func:`stroboscope.formats.spool_cells.read_rows`,
the reader ``recover`` uses), then reads the counters again and drops the rows the writer may
have reused meanwhile (the seqlock check of :mod:`stroboscope.formats.spool_ring`). It takes no
lock and writes nothing: whether the recorder still holds its lock is read from
``/proc/locks``, so following a recording, and leaving it, never changes it.

On attaching, :meth:`LiveSpool.history` reads the recent rows the ring no longer holds from the
recorder's segments (read-only, one at a time); :meth:`LiveSpool.recorder_stats` reads the
figures the recorder publishes in the header (:mod:`stroboscope.formats.spool_stats`).
:func:`live_spools` lists the spools that recorders of this user hold now.
"""

from __future__ import annotations

import contextlib
import mmap
import os
import select
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pyarrow as pa

from stroboscope.formats.pieces import read_index
from stroboscope.formats.segments import Segment, claimed_rows, read_segment, segment_paths
from stroboscope.formats.spool_cells import read_rows
from stroboscope.formats.spool_header import (
    COUNTERS,
    COUNTERS_OFFSET,
    MAGIC,
    MAX_NS,
    SpoolError,
    open_regular,
    read_header,
)
from stroboscope.formats.spool_stats import RecorderStats, read_recorder_stats

__all__ = ["LiveRows", "LiveSpool", "LiveState", "holder_of", "live_spools"]

LOCKS_EVERY_S = 5.0
"""How often :meth:`LiveSpool.state` reads ``/proc/locks`` while the recorder's process runs
(a pidfd says at once when it exits; the table says whether it still holds its lock)."""
HISTORY_ROUNDS = 3
"""How many times :meth:`LiveSpool.history` looks at the segments for the rows the ring dropped
while it read them."""
LOCKS = "/proc/locks"
"""The kernel's table of file locks (``flock`` entries name the holder's pid, device, inode)."""


@dataclass(frozen=True)
class LiveRows:
    """Rows read by one :meth:`LiveSpool.poll`.

    Attributes
    ----------
    first : int
        Row index (the ring's counter) of the first row.
    mono_ns : numpy.ndarray
        int64 CLOCK_MONOTONIC ns of each row, ascending.
    values : dict of str to numpy.ndarray
        float64 cells of each column asked for (NaN where a row has none).
    skipped : int
        Rows written since the last poll that the ring no longer held (the view was slower
        than the ring is long): never read.
    """

    first: int
    mono_ns: np.ndarray[Any, Any]
    values: dict[str, np.ndarray[Any, Any]]
    skipped: int = 0


@dataclass(frozen=True)
class LiveState:
    """Whether a recorder still holds the spool: ``recording`` (its lock is held, by ``pid``),
    else ``gone`` says how it ended, in words."""

    recording: bool
    pid: int | None
    gone: str = ""


@dataclass
class LiveSpool:
    """A spool followed read-only (see the module).

    Parameters
    ----------
    path : str
        The spool file. It must be a regular file of this process's user holding a spool
        (:class:`SpoolError` says what is wrong otherwise: not a spool, another user's, ...).
    """

    path: str
    header: dict[str, Any] = field(init=False)
    next_row: int = field(init=False, default=0)
    _fd: int = field(init=False, default=-1)
    _map: mmap.mmap | None = field(init=False, default=None)
    _dev_ino: tuple[int, int] = field(init=False, default=(0, 0))
    _holder: int | None = field(init=False, default=None)  # the last pid seen holding it
    _pidfd: int = field(init=False, default=-1)  # the holder's pidfd: readable once it exits
    _locks_at: float = field(init=False, default=0.0)  # when /proc/locks was last read

    def __post_init__(self) -> None:
        p = os.fspath(self.path)
        fd, st = open_regular(p, "spool")
        try:
            if st.st_uid != os.geteuid():
                raise SpoolError(
                    f"{p} is written by another user (owner uid {st.st_uid}, you are uid "
                    f"{os.geteuid()}): only your own recordings can be watched"
                )
            self.header = read_header(p, fd, st.st_size)
            self._map = mmap.mmap(fd, self.header["total_size"], prot=mmap.PROT_READ)
        except BaseException:
            os.close(fd)
            raise
        self._fd = fd
        self._dev_ino = (st.st_dev, st.st_ino)
        self._at = {f[0]: (i, f[2] == "int64") for i, f in enumerate(self.header["fields"])}

    @property
    def fields(self) -> list[tuple[str, str, str, str]]:
        """``(name, unit, dtype, kind)`` of every column, ``mono_ns`` first."""
        return list(self.header["fields"])

    @property
    def interval_ns(self) -> int:
        """The sampler's base tick (ns)."""
        return int(self.header["interval_ns"])

    @property
    def anchor_ns(self) -> int:
        """Realtime minus monotonic ns of the recorder's clock (UTC ns = mono_ns + anchor)."""
        return int(self.header["anchor_ns"])

    def counters(self) -> tuple[int, int]:
        """``(write_begin, head)``: the rows begun and the rows written so far."""
        assert self._map is not None, "the spool is closed"
        begin, head = COUNTERS.unpack_from(self._map, COUNTERS_OFFSET)
        return int(begin), int(head)

    def recorder_stats(self) -> RecorderStats | None:
        """The figures the recorder last published in the header (ticks, cost, rows lost:
        :mod:`stroboscope.formats.spool_stats`); None when it publishes none."""
        assert self._map is not None, "the spool is closed"
        return read_recorder_stats(self._map)

    def start_at(self, rows_back: int) -> None:
        """Let the next :meth:`poll` begin ``rows_back`` rows before the newest (at most the
        ring's capacity: older rows are no longer in it)."""
        _, head = self.counters()
        self.next_row = max(0, head - max(0, int(rows_back)))

    def history(self, columns: list[str], rows_back: int) -> Iterator[LiveRows]:
        """The rows of the last ``rows_back`` before the ring's oldest, read from the
        recorder's segments (its segment files and pieces, read-only), one segment at a time
        and in order; the next :meth:`poll` then begins at the ring's oldest row. The ring
        moves on while the segments are read: the segments are looked at again (a few times
        at most) for the rows it dropped meanwhile. A segment that cannot be read (damaged,
        another owner's, being replaced) is left out: the view shows a gap there, the
        recording is not touched."""
        cap = int(self.header["capacity"])
        uid = int(self.header["uid"])
        types = {f[0]: pa.int64() if f[2] == "int64" else pa.float64() for f in self.fields}
        names = ["mono_ns", *(c for c in columns if c != "mono_ns")]
        want = [(n, types[n]) for n in names]
        oldest = max(0, self.counters()[0] - cap)
        end = max(0, oldest - max(0, int(rows_back)))  # rows before it are given
        for _round in range(HISTORY_ROUNDS):
            for rows in self._segment_rows(uid, want, names, end, oldest):
                end = rows.first + len(rows.mono_ns)
                yield rows
            self.next_row = oldest
            oldest = max(0, self.counters()[0] - cap)
            if oldest <= max(end, self.next_row):
                break

    def _segment_rows(
        self, uid: int, want: list[tuple[str, pa.DataType]], names: list[str], lo: int, hi: int
    ) -> Iterator[LiveRows]:
        """The rows ``[lo, hi)`` that the segments hold, in order (see :meth:`history`)."""
        found: list[tuple[int, int, Segment]] = []
        segments: list[Segment] = [str(p) for p in segment_paths(self.path)]
        with contextlib.suppress(SpoolError):  # no readable piece index: the files alone
            segments += read_index(self.path, uid)[0]
        for seg in segments:
            try:
                extent = claimed_rows(seg, uid)
            except SpoolError:
                continue
            if extent is not None and extent[1] > lo and extent[0] < hi:
                found.append((extent[0], extent[1], seg))
        end = lo
        for first, stop, seg in sorted(found, key=lambda f: f[0]):
            if stop <= end:
                continue  # rows already given (a segment file and a piece of the same rows)
            try:
                table = read_segment(seg, uid, want, names)
            except SpoolError:
                continue
            a, b = max(end, first) - first, min(hi, stop, first + table.num_rows) - first
            if b <= a:
                continue
            table = table.slice(a, b - a)
            mono = table.column("mono_ns").to_numpy(zero_copy_only=False).astype(np.int64)
            values = {
                c: table.column(c).to_numpy(zero_copy_only=False).astype(np.float64)
                for c in names[1:]
            }
            end = first + b
            yield LiveRows(first + a, mono, values)

    def poll(self, columns: list[str] | None = None) -> LiveRows:
        """The rows written since the last poll (the first poll: every row the ring holds),
        with the cells of ``columns`` (default: every column but ``mono_ns``)."""
        want = list(self._at)[1:] if columns is None else columns
        unknown = [c for c in want if c not in self._at]
        if unknown:
            raise ValueError(f"columns {unknown} are not columns of the spool {self.path}")
        assert self._map is not None, "the spool is closed"
        cap = int(self.header["capacity"])
        begin, head = self.counters()
        oldest = max(0, begin - cap)
        first = max(self.next_row, oldest)
        skipped = first - self.next_row if self.next_row else 0
        n = max(0, head - first)
        view = memoryview(self._map)
        try:
            cells, valid = read_rows(view, self.header, first, n)
        finally:
            view.release()
        begin_now, _ = self.counters()
        drop = min(n, max(0, begin_now - cap - first))  # slots the writer reused meanwhile
        if drop:
            cells, valid, first, n, skipped = (
                cells[:, drop:],
                valid[:, drop:],
                first + drop,
                n - drop,
                skipped + drop,
            )
        mono = cells[0].view(np.int64)
        good = (valid[0] == 1) & (mono >= 0) & (mono < MAX_NS)
        if n and not good.all():
            raise SpoolError(
                f"{self.path} is not a recording being written: row {first + int(np.argmin(good))}"
                f" holds no time (the counters do not match the rows)"
            )
        if n > 1 and bool((np.diff(mono) < 0).any()):
            raise SpoolError(f"{self.path} has corrupt rows: mono_ns goes back in time")
        values = {}
        for name in want:
            c, is_int = self._at[name]
            raw = cells[c]
            v = raw.view(np.int64).astype(np.float64) if is_int else raw.view(np.float64).copy()
            v[valid[c] == 0] = np.nan
            values[name] = v
        self.next_row = first + n
        return LiveRows(first, mono.copy(), values, skipped)

    def state(self) -> LiveState:
        """Whether the recorder still holds its lock on the file (read from ``/proc/locks``,
        no lock taken: at most every :data:`LOCKS_EVERY_S` while the holder's process runs,
        which a pidfd of it tells at no cost), and when not, whether its spool is still at its
        path (a recorder that was killed leaves it for ``stroboscope recover``) or was removed
        (a recording that ended and wrote its output)."""
        now = time.monotonic()
        if (
            self._pidfd >= 0
            and now - self._locks_at < LOCKS_EVERY_S
            and not select.select([self._pidfd], [], [], 0)[0]
            and self._same_file()
        ):  # the holder runs and the file is the one it locked: no need to read the locks
            return LiveState(True, self._holder)
        self._locks_at = now
        pid = holder_of(*self._dev_ino)
        if pid is not None:
            if pid != self._holder:
                self._watch(pid)
            self._holder = pid
            return LiveState(True, pid)
        self._close_pidfd()
        same = self._same_file()
        who = "the recorder" if self._holder is None else f"the recorder (pid {self._holder})"
        if same:
            why = (
                f"{who} is gone (ended or killed) and left its spool: "
                f"`stroboscope recover {self.path}` writes its rows"
            )
        else:
            why = f"{who} is gone and its spool was removed (its output written)"
        return LiveState(False, self._holder, why)

    def _same_file(self) -> bool:
        """Whether the spool's path still names the file this follows."""
        try:
            st = os.stat(self.path)
        except OSError:
            return False
        return (st.st_dev, st.st_ino) == self._dev_ino

    def _watch(self, pid: int) -> None:
        """Hold a pidfd of the recorder ``pid`` (none where the kernel has no pidfd)."""
        self._close_pidfd()
        with contextlib.suppress(OSError, AttributeError):
            self._pidfd = os.pidfd_open(pid)

    def _close_pidfd(self) -> None:
        if self._pidfd >= 0:
            os.close(self._pidfd)
            self._pidfd = -1

    def close(self) -> None:
        """Unmap and close the file (the recording is not touched)."""
        self._close_pidfd()
        if self._map is not None:
            self._map.close()
            self._map = None
        if self._fd >= 0:
            os.close(self._fd)
            self._fd = -1

    def __enter__(self) -> LiveSpool:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _flocks() -> list[tuple[int, int, int, int]]:
    """``(pid, major, minor, inode)`` of every exclusive ``flock`` in ``/proc/locks``."""
    try:
        with open(LOCKS, "rb") as f:
            text = f.read().decode("ascii", errors="replace")
    except OSError:
        return []
    out = []
    for line in text.splitlines():
        parts = line.split()
        # "1: FLOCK  ADVISORY  WRITE 1234 08:01:5678 0 EOF" (a blocked waiter has "->" first)
        if "->" in parts or len(parts) < 6 or parts[1] != "FLOCK" or parts[3] != "WRITE":
            continue
        try:
            major, minor, inode = parts[5].split(":")
            out.append((int(parts[4]), int(major, 16), int(minor, 16), int(inode)))
        except ValueError:
            continue
    return out


def holder_of(dev: int, ino: int) -> int | None:
    """The pid holding an exclusive ``flock`` on the file ``(dev, ino)``, None when none does
    (read from ``/proc/locks``: nothing is locked or opened)."""
    for pid, major, minor, inode in _flocks():
        if inode == ino and (major, minor) == (os.major(dev), os.minor(dev)):
            return pid
    return None


def live_spools() -> list[tuple[str, int]]:
    """``(path, recorder pid)`` of every spool a recorder of this user holds now, by path.

    The exclusive ``flock`` entries of ``/proc/locks`` name the holders; each holder's open
    files (``/proc/PID/fd``, readable for this user's processes only) give the path of the
    locked file, kept when it starts with the spool magic.
    """
    found: dict[str, int] = {}
    for pid, major, minor, inode in _flocks():
        fd_dir = f"/proc/{pid}/fd"
        try:
            fds = os.listdir(fd_dir)
        except OSError:
            continue  # another user's process, or gone
        for name in fds:
            link = os.path.join(fd_dir, name)
            try:
                st = os.stat(link)
                target = os.readlink(link)
            except OSError:
                continue
            if st.st_ino != inode or (os.major(st.st_dev), os.minor(st.st_dev)) != (major, minor):
                continue
            if st.st_uid != os.geteuid() or not os.path.isabs(target):
                continue
            try:
                with open(link, "rb") as f:
                    if f.read(len(MAGIC)) != MAGIC:
                        continue
            except OSError:
                continue
            found.setdefault(target, pid)
    return sorted(found.items())
