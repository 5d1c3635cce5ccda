"""A clean ``record`` longer than its ring writes each row once (``recording._output``): the
bytes this process hands to ``write()`` during the run are about the output's size, where a
finish that read the segments back and wrote them again handed about twice that."""

from __future__ import annotations

import logging
import os
import time
from pathlib import Path

import pyarrow.parquet as pq
import pytest
from stroboscope.cli import main
from stroboscope.formats.pieces import read_index
from stroboscope.formats.provenance import from_schema
from stroboscope.formats.spool_read import remove_spool
from stroboscope.recording import _finish, _output, finish
from stroboscope.recording.sampler import Sampler
from stroboscope.recording.spool import recover


def _wchar() -> int:
    """Bytes this process has passed to write() and its kin so far (``/proc/self/io``)."""
    with open("/proc/self/io") as f:
        return next(int(line.split(":")[1]) for line in f if line.startswith("wchar:"))


def _pieces_written(s: Sampler) -> int:
    status = s.segments
    return 0 if status is None else status.segments_written


def test_a_clean_record_longer_than_its_ring_writes_each_row_once(tmp_path: Path) -> None:
    out = tmp_path / "run.parquet"
    # A ring of 0.5 s at 1 ms: a piece every 0.125 s, some 16 in 2 s.
    args = ["--interval", "0.001", "--capacity", "512", "--duration", "2", "--quiet"]
    before = _wchar()
    assert main(["record", *args, "-o", str(out)]) == 0
    written = _wchar() - before
    size = out.stat().st_size
    meta = pq.read_metadata(out)
    assert meta.num_row_groups >= 4  # pieces joined: the ring could not hold the run
    # The pieces, their index records (40 bytes each), the joined footer: the output's bytes
    # and a few KiB. Writing the segments' rows again gives ~2x.
    assert written < 1.25 * size + 16 * 1024, (written, size)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["run.parquet"]


def test_a_spool_on_another_filesystem_reads_its_pieces_back_into_the_output(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """The pieces file cannot become an output on another filesystem: the output is written
    from the pieces read back and the rest (the same rows), and the log says why."""
    monkeypatch.setattr(_output, "same_filesystem", lambda a, b: False)
    out = tmp_path / "run.parquet"
    args = ["--interval", "0.001", "--capacity", "512", "--duration", "1", "--quiet"]
    with caplog.at_level(logging.INFO, "stroboscope.recording"):
        assert main(["record", *args, "-o", str(out)]) == 0
    assert "another filesystem" in caplog.text
    table = pq.read_table(out)
    mono = table.column("mono_ns").to_numpy()
    assert table.num_rows > 512 and (mono[1:] > mono[:-1]).all()
    assert int(table.schema.metadata[b"stroboscope.rows_lost"]) >= 0
    assert sorted(p.name for p in tmp_path.iterdir()) == ["run.parquet"]


def test_the_joined_output_is_what_the_recovery_path_writes(tmp_path: Path) -> None:
    """The pieces file made the output says exactly what the output written from the spool
    and its pieces read back says: rows, schema, metadata (provenance, rows lost), row groups
    of the same rows, and the same column statistics."""
    path = tmp_path / "run.spool"
    s = Sampler(0.001, sources=["cpu", "memory"], spool=path, segment_seconds=0.1, capacity=1024)
    _finish.prepare(s)
    with s:
        deadline = time.monotonic() + 60
        while s.stats().rows_written < 1500 or _pieces_written(s) < 3:
            assert time.monotonic() < deadline, "the sampler wrote too few pieces"
            time.sleep(0.02)
    prov = s.provenance(command=["train.py"])
    recovered = tmp_path / "recovered.parquet"
    assert _finish.write_output(path, recovered, prov)[0] > 1024
    units = {c.name: c.unit for c in s.columns}
    stats = _finish.spool_column_stats(path, units)
    pieces = len(read_index(path, os.geteuid())[0])
    clean = tmp_path / "clean.parquet"
    done = finish(s, clean, command=["train.py"], column_stats=True)
    a, b = pq.read_table(clean), pq.read_table(recovered)
    assert a.equals(b) and a.num_rows == done.rows
    assert a.schema.equals(b.schema, check_metadata=True)
    assert from_schema(a.schema) == from_schema(b.schema)
    assert (done.column_stats, done.span_s) == stats
    assert pq.read_metadata(clean).num_row_groups == pieces + 1  # the pieces and the rest
    assert sorted(p.name for p in tmp_path.iterdir()) == ["clean.parquet", "recovered.parquet"]
    s.close()


def test_a_finish_that_dies_before_the_rename_leaves_every_row_to_recover(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The rest appended as the last piece and the joined footer after it, then the output
    cannot take its name: the finish raises, and the spool with its pieces still gives every
    row once (the rest is both the last piece and the ring's: read once)."""
    path = tmp_path / "run.spool"
    s = Sampler(0.001, sources=["memory"], spool=path, segment_seconds=0.1, capacity=1024)
    _finish.prepare(s)
    with s:
        deadline = time.monotonic() + 60
        while s.stats().rows_written < 1500 or _pieces_written(s) < 3:
            assert time.monotonic() < deadline, "the sampler wrote too few pieces"
            time.sleep(0.02)
    before = recover(path).to_arrow()

    def cannot(pieces: str, out: str) -> None:
        raise OSError(28, "No space left on device", out)

    monkeypatch.setattr(_output, "_publish", cannot)
    with pytest.raises(OSError, match="No space"):
        finish(s, tmp_path / "out.parquet")
    assert not (tmp_path / "out.parquet").exists() and path.exists()
    pieces = read_index(path, os.geteuid())[0]
    assert sum(p.rows for p in pieces) == before.num_rows  # the rest is a piece now
    after = recover(path).to_arrow()
    assert after.column("mono_ns").equals(before.column("mono_ns"))
    s.close()
    remove_spool(path)


@pytest.mark.parametrize("hard_links", [True, False])
def test_the_joined_file_is_not_renamed_over_what_appeared_at_the_output(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, hard_links: bool
) -> None:
    """``_publish`` checks the output again just before the rename (a link or a FIFO put there
    after the join began is never replaced), with hard links or without."""
    pieces = tmp_path / "run.spool.seg-pieces"
    pieces.write_bytes(b"PAR1 the joined pieces PAR1")
    target = tmp_path / "kept.txt"
    target.write_text("theirs")
    out = tmp_path / "out.parquet"
    out.symlink_to(target)
    if not hard_links:

        def no_link(src: str, dst: str) -> None:
            raise OSError(1, "Operation not permitted", dst)

        monkeypatch.setattr(os, "link", no_link)
    with pytest.raises(OSError, match="symbolic link"):
        _output._publish(str(pieces), str(out))
    assert out.is_symlink() and target.read_text() == "theirs"
    assert pieces.read_bytes() == b"PAR1 the joined pieces PAR1"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["kept.txt", "out.parquet", pieces.name]
