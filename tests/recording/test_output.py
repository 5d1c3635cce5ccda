"""A clean ``record`` longer than its ring writes each row once (``recording._output``): the
bytes this process hands to ``write()`` during the run are about the output's size, where a
finish that read the segments back and wrote them again handed about twice that."""

from __future__ import annotations

import logging
from pathlib import Path

import pyarrow.parquet as pq
import pytest
from stroboscope.cli import main
from stroboscope.recording import _output


def _wchar() -> int:
    """Bytes this process has passed to write() and its kin so far (``/proc/self/io``)."""
    with open("/proc/self/io") as f:
        return next(int(line.split(":")[1]) for line in f if line.startswith("wchar:"))


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
