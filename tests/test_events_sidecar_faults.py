"""A damaged or missing events sidecar never costs a row: a full disk at its first write, a torn
magic, a file another user planted at its name. The rows are recovered, the events' loss is
reported, and the writer recovers once space returns."""

from __future__ import annotations

import errno
import logging
import os
import time
from collections.abc import Iterator
from pathlib import Path

import pyarrow as pa
import pytest
from stroboscope import _core
from stroboscope.formats import events_file
from stroboscope.formats.spool_read import SpoolError, recover_events, recover_parts
from stroboscope.recording import _events_write
from stroboscope.recording.sampler import Sampler
from stroboscope.recording.spool import recover

ERROR = events_file.ERROR_KEY


class FullDisk:
    """A fault-injecting layer under ``os.pwrite``: while ``full``, a write to a file whose name
    ends with ``.events`` fails with ENOSPC (nothing written), as on a full disk."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.full = True
        self.refused = 0
        real = os.pwrite

        def pwrite(fd: int, data: bytes, offset: int) -> int:
            if self.full and os.readlink(f"/proc/self/fd/{fd}").endswith(".events"):
                self.refused += 1
                raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
            return real(fd, data, offset)

        monkeypatch.setattr(os, "pwrite", pwrite)


@pytest.fixture
def disk(monkeypatch: pytest.MonkeyPatch) -> Iterator[FullDisk]:
    yield FullDisk(monkeypatch)


def _push(name: str, n: int) -> None:
    sid = _core.events_intern(name)
    for k in range(n):
        _core.events_begin(sid, 0, 0, k)
        _core.events_end(sid, 0, 0, k)


def _wait(what: str, check: object) -> None:
    deadline = time.monotonic() + 60
    while not check():  # type: ignore[operator]
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.01)


def test_the_sink_writes_its_magic_again_once_space_returns(tmp_path: Path, disk: FullDisk) -> None:
    side = str(tmp_path / "r.spool.events")
    sink = _events_write.EventsSink(side)
    _push("full", 3)
    with pytest.raises(OSError) as err:
        sink.append()
    assert err.value.errno == errno.ENOSPC and os.path.getsize(side) == 0
    with pytest.raises(OSError):
        sink.append()  # still full: tried again, nothing half-written is left
    assert os.path.getsize(side) == 0
    disk.full = False
    _push("freed", 2)
    sink.append()
    got = events_file.read(side)
    assert got.damage is None and got.cut_bytes == 0 and got.lost == 0
    assert got.table.column("scope").to_pylist() == ["full"] * 6 + ["freed"] * 4
    assert got.table.column("kind").to_pylist() == [1, 2] * 5
    assert os.stat(side).st_mode & 0o777 == 0o600


def test_a_chunk_cut_by_a_full_disk_is_written_again_whole(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    side = str(tmp_path / "c.spool.events")
    sink = _events_write.EventsSink(side)
    _push("first", 1)
    sink.append()
    size = os.path.getsize(side)
    real = os.pwrite
    calls = {"n": 0}

    def short_then_full(fd: int, data: bytes, offset: int) -> int:
        calls["n"] += 1
        if calls["n"] == 1:
            return real(fd, data[:5], offset)  # the disk fills up part-way through the chunk
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    monkeypatch.setattr(os, "pwrite", short_then_full)
    _push("second", 1)
    with pytest.raises(OSError):
        sink.append()
    assert os.path.getsize(side) == size  # the 5 bytes of the cut chunk are not left behind
    monkeypatch.setattr(os, "pwrite", real)
    sink.append()
    got = events_file.read(side)
    assert got.cut_bytes == 0
    assert got.table.column("scope").to_pylist() == ["first", "first", "second", "second"]


def _sampled(spool: Path, disk: FullDisk | None) -> None:
    """A spooled recording with 20 events, the disk full for the sidecar throughout if
    ``disk``."""
    s = Sampler(0.005, sources=["memory"], spool=spool, segment_seconds=0.2, capacity=1024)
    with s:
        _push("step", 10)
        _wait("20 rows", lambda: s.stats().rows_written >= 20)
        if disk is not None:
            _wait("a refused write", lambda: disk.refused >= 1)
    status = s.segments
    assert status is not None
    if disk is not None:
        assert status.events_errors >= 1 and status.events_written == 0
    else:
        assert status.events_written == 20 and status.events_errors == 0


def test_a_full_disk_at_the_sidecars_magic_loses_no_row(
    tmp_path: Path, disk: FullDisk, caplog: pytest.LogCaptureFixture
) -> None:
    spool = tmp_path / "full.spool"
    _sampled(spool, disk)
    side = Path(str(spool) + ".events")
    assert side.stat().st_size == 0
    disk.full = False  # space freed: the rows come back, whatever the sidecar holds
    with caplog.at_level(logging.WARNING, "stroboscope.recording"):
        frame = recover(spool)
        got = recover_parts(spool)
    table = frame.to_arrow()
    ts = table.column("mono_ns").to_numpy()
    assert len(frame) >= 20 and frame.rows_lost == 0 and (ts[1:] > ts[:-1]).all()
    assert got.rows == len(frame) and got.events.num_rows == 0
    for meta in (got.schema.metadata, got.events.schema.metadata, table.schema.metadata):
        assert str(side).encode() in meta[ERROR] and b"0 of the 8 bytes" in meta[ERROR]
    assert any(str(side) in r.getMessage() and "missing" in r.getMessage() for r in caplog.records)


@pytest.mark.parametrize(
    "content",
    [b"", events_file.MAGIC[:4], b"PAR1 not an events file", "planted by another user"],
)
def test_a_damaged_or_foreign_sidecar_never_stops_the_rows(
    tmp_path: Path, content: bytes | str, caplog: pytest.LogCaptureFixture
) -> None:
    spool = tmp_path / "d.spool"
    _sampled(spool, None)
    side = Path(str(spool) + ".events")
    good = pa.concat_tables(list(recover_parts(spool).parts))
    side.unlink()
    if isinstance(content, str):  # a file of another owner, as in a shared sticky directory
        if os.geteuid() != 0:
            pytest.skip("planting another user's file needs root")
        side.write_bytes(events_file.MAGIC)
        os.chown(side, 12345, 12345)
    else:
        side.write_bytes(content)
    with caplog.at_level(logging.WARNING, "stroboscope.recording"):
        got = recover_parts(spool)
        rows = pa.concat_tables(list(got.parts))
    assert rows.equals(good)  # every row, whatever the sidecar is
    assert got.events.num_rows == 0
    error = got.schema.metadata[ERROR].decode()
    assert str(side) in error and error == got.events.schema.metadata[ERROR].decode()
    assert any(str(side) in r.getMessage() for r in caplog.records)
    if isinstance(content, bytes) and events_file.MAGIC.startswith(content):
        # A torn magic is the writer's own failure: no events, said so, not an error.
        assert f"{len(content)} of the 8 bytes" in error
        assert recover_events(spool).schema.metadata[ERROR].decode() == error
    else:
        with pytest.raises(SpoolError):  # asked for the events alone: refused, naming why
            recover_events(spool)


def test_a_file_planted_at_the_sidecars_name_is_never_written(tmp_path: Path) -> None:
    side = tmp_path / "p.spool.events"
    sink = _events_write.EventsSink(str(side))
    side.write_bytes(b"someone else's")
    _push("x", 1)
    with pytest.raises(FileExistsError, match="not made by this recording"):
        sink.append()
    assert side.read_bytes() == b"someone else's"
    # Made by the sink, then replaced: the new file is not written either.
    side.unlink()
    sink.append()
    side.rename(tmp_path / "kept")  # (kept: its inode is not reused by the new file)
    side.write_bytes(b"replaced")
    _push("y", 1)
    with pytest.raises(FileExistsError, match="replaced"):
        sink.append()
    assert side.read_bytes() == b"replaced"
