"""The receiver's journal on a full disk: exact accounting, and no torn line swallows a good row.

Issue 9, item 7. A short write followed by ENOSPC is injected on the journal's descriptor only
(every other descriptor writes as usual).
"""

from __future__ import annotations

import errno
import json
import os
import queue
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from stroboscope.compat.aitune import ParentReceiver
from stroboscope.compat.aitune._journal import read_journal_rows


class DiskFull:
    """Replaces ``os.write`` for the files of one directory: while armed, a write to them writes
    ``short`` bytes once (when set) and otherwise raises ENOSPC; other files are untouched."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch, directory: str) -> None:
        self.directory = os.path.realpath(directory)
        self.real: Callable[[int, Any], int] = os.write
        self.short = 0
        self.armed = False
        self.calls = 0
        monkeypatch.setattr(os, "write", self.write)

    def ours(self, fd: int) -> bool:
        try:
            return os.path.dirname(os.readlink(f"/proc/self/fd/{fd}")) == self.directory
        except OSError:
            return False

    def write(self, fd: int, data: Any) -> int:
        if not (self.armed and self.ours(fd)):
            return self.real(fd, data)
        self.calls += 1
        if self.short:
            n, self.short = min(self.short, len(data)), 0
            return self.real(fd, bytes(data[:n]))
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))


def line(row: dict[str, Any]) -> bytes:
    return json.dumps(row, separators=(",", ":")).encode() + b"\n"


@pytest.mark.parametrize("cut", ["mid-row", "row-boundary", "nothing"])
def test_short_write_then_disk_full(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, cut: str
) -> None:
    q: queue.Queue[dict[str, Any]] = queue.Queue()
    r = ParentReceiver(q, crash_safe=False, journal_dir=tmp_path)
    first = [{"id": i, "pad": "x" * 20} for i in range(3)]
    for row in first:
        q.put(row)  # waiting before start: taken as one batch, one write
    disk = DiskFull(monkeypatch, str(tmp_path))
    one = len(line(first[0]))
    disk.short = {"mid-row": one + 7, "row-boundary": one, "nothing": 0}[cut]
    kept = {"mid-row": 1, "row-boundary": 1, "nothing": 0}[cut]
    disk.armed = True
    r.start()
    try:
        r.stop()  # the three rows hit the full disk
        assert disk.calls >= 1
        disk.armed = False
        r.start()
        for i in (10, 11):
            q.put({"id": i, "pad": "y"})
        r.stop()
        ids = r.get_metrics()["id"].tolist()
        assert ids == [row["id"] for row in first[:kept]] + [10, 11]
        stats = r.stats()
        assert stats["rows_received"] == kept + 2 == r.rows_received
        assert stats["rows_lost"] == 3 - kept
        rows, damaged = read_journal_rows(r.journal_path or "")
        assert damaged == 0 and [row["id"] for row in rows] == ids
    finally:
        disk.armed = False
        if r.running:
            r.stop()


def test_a_torn_line_that_cannot_be_cut_is_ended(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """When even the cut fails (ftruncate refused), the next write first ends the torn line: the
    reader skips exactly that line, counts it as damaged, and keeps the next row."""
    from stroboscope.compat.aitune._journal import Journal, JournalWriteError

    journal = Journal(str(tmp_path))
    disk = DiskFull(monkeypatch, str(tmp_path))
    real_ftruncate = os.ftruncate

    def no_ftruncate(fd: int, length: int) -> None:
        if disk.ours(fd):
            raise OSError(errno.EIO, "refused")
        real_ftruncate(fd, length)

    monkeypatch.setattr(os, "ftruncate", no_ftruncate)
    try:
        journal.append(line({"id": 0}))
        disk.short, disk.armed = 9, True
        with pytest.raises(JournalWriteError) as info:
            journal.append(line({"id": 1, "pad": "z" * 30}) + line({"id": 2}))
        assert info.value.rows_kept == 0 and info.value.errno == errno.ENOSPC
        disk.armed = False
        assert journal.torn
        journal.append(line({"id": 3}))
        assert not journal.torn
        rows, damaged = read_journal_rows(journal.path)
        assert [row["id"] for row in rows] == [0, 3]
        assert damaged == 1
    finally:
        journal.close()


def test_dropping_the_snapshotted_rows_copies_the_backlog_without_the_lock(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import threading

    from stroboscope.compat.aitune._journal import Journal

    lock = threading.Lock()
    j = Journal(str(tmp_path))
    try:
        j.append(line({"id": 0}) + line({"id": 1}))
        end = j.size()  # a snapshot read up to here
        j.append(line({"id": 2}))  # arrived while the snapshot was written
        real = Journal._copy
        free_during: list[bool] = []

        def copy(src: int, dst: int, start: int, stop: int) -> None:
            if not free_during:  # the bulk copy: the writer can take the lock and append
                free_during.append(lock.acquire(blocking=False))
                j.append(line({"id": 3}))
                lock.release()
            real(src, dst, start, stop)

        monkeypatch.setattr(Journal, "_copy", staticmethod(copy))
        j.drop_prefix(end, lock)
        assert free_during == [True]
        rows, damaged = read_journal_rows(j.path)
        assert [r["id"] for r in rows] == [2, 3] and damaged == 0  # nothing lost
    finally:
        j.close()
