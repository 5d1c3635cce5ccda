"""The end of a spooled run (``record``'s output and summary, the watchdog's dump): the rows are
streamed one segment at a time, never the whole run in memory, and give the same file, the
same provenance and the same summary as the whole table did. Memory is Arrow's own count of
the bytes it holds, read each time the writer takes a part."""

from __future__ import annotations

import dataclasses
import gc
import time
import weakref
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.csv as pacsv
import pyarrow.parquet as pq
import pytest
from stroboscope.analysis.column_stats import column_stats_text, data_span_s
from stroboscope.formats import spool_read
from stroboscope.formats.provenance import from_schema
from stroboscope.recording import _finish, _output, _watchdog_child, spool
from stroboscope.recording.sampler import Sampler
from stroboscope.sampling._provenance import for_table

SEGMENTS = 8


@pytest.fixture(scope="module")
def recorded(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict[str, Any]]:
    """A spool of at least ``SEGMENTS`` segments of ~500 rows, and its sampler's provenance."""
    path = tmp_path_factory.mktemp("finish") / "run.spool"
    s = Sampler(0.001, sources=["cpu", "memory"], spool=path, segment_seconds=0.5, capacity=4096)
    with s:
        deadline = time.monotonic() + 120
        while (s.segments.segments_written if s.segments else 0) < SEGMENTS:
            assert time.monotonic() < deadline, "the segment writer wrote too few segments"
            time.sleep(0.05)
    return path, s.provenance(command=["train.py"])


class Watched:
    """Wraps ``spool_read.recover_parts`` so that each part's size, and the bytes Arrow holds when
    the consumer asks for the next one, are recorded."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.part_bytes: list[int] = []
        self.held: list[int] = []
        # Whether the part before the previous one was still alive when each part was taken.
        self.kept: list[bool] = []
        real = spool_read.recover_parts

        def recover_parts(*args: Any, **kwargs: Any) -> spool_read.Recovered:
            got = real(*args, **kwargs)
            return dataclasses.replace(got, parts=self._watch(got.parts))

        monkeypatch.setattr(spool_read, "recover_parts", recover_parts)
        monkeypatch.setattr(_output, "recover_parts", recover_parts)

    def _watch(self, parts: Iterator[pa.Table]) -> Iterator[pa.Table]:
        # Cyclic garbage of earlier tests, collected in the middle of the parts, would move what
        # Arrow holds by more than a part: collected first, and no collection while watched (a
        # part let go must be freed by its last reference, not by a later collection).
        gc.collect()
        gc.disable()
        try:
            self.base = pa.total_allocated_bytes()
            taken: list[weakref.ref[pa.Table]] = []
            for part in parts:
                self.held.append(pa.total_allocated_bytes() - self.base)
                # The writer may still hold the previous part while it asks for this one; the
                # one before must be gone.
                if len(taken) >= 2:
                    self.kept.append(taken[-2]() is not None)
                taken.append(weakref.ref(part))
                self.part_bytes.append(part.nbytes)
                yield part
            self.held.append(pa.total_allocated_bytes() - self.base)
        finally:
            gc.enable()

    def check_streamed(self) -> None:
        """A part is let go once written, and what Arrow holds does not grow with the parts
        taken (the whole run held would grow by a part's bytes at each)."""
        assert len(self.part_bytes) > SEGMENTS  # the segments and the ring's rows
        assert self.kept and not any(self.kept), self.kept
        # Taken as each segment is asked for, once the writer and the reader have their buffers
        # (not the ring's rows, last: read before the watch began): held is then the part just
        # read, the one being written (the writer's loop still holds it) and buffers that do
        # not grow with the parts. Less those two parts, it stays within a part's bytes; the
        # whole run held would grow by a part at each.
        rest = [
            self.held[k] - self.part_bytes[k] - self.part_bytes[k - 1]
            for k in range(2, len(self.part_bytes) - 1)
        ]
        part = float(np.median(self.part_bytes))
        assert max(rest) - min(rest) < part, (self.held, self.part_bytes)


def _whole(path: Path) -> pa.Table:
    return spool.recover(path).to_arrow()


@pytest.mark.parametrize("fmt", ["parquet", "csv"])
def test_the_output_is_streamed_and_equal_to_the_whole_table(
    recorded: tuple[Path, dict[str, Any]], tmp_path: Path, fmt: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    path, prov = recorded
    whole = _whole(path)
    out = tmp_path / f"out.{fmt}"
    watched = Watched(monkeypatch)
    rows, columns = _finish.write_output(path, out, prov)
    watched.check_streamed()
    assert (rows, columns) == (whole.num_rows, whole.num_columns)
    if fmt == "parquet":
        written = pq.read_table(out)
        assert written.equals(whole)
        # The provenance for_table gives the whole table, computed from the parts.
        assert from_schema(written.schema) == for_table(prov, whole)
    else:
        written = pacsv.read_csv(out)
        assert written.column("mono_ns").to_pylist() == whole.column("mono_ns").to_pylist()


def test_the_summary_is_the_whole_tables(recorded: tuple[Path, dict[str, Any]]) -> None:
    path, _prov = recorded
    whole = _whole(path)
    units = {f.name: (f.metadata or {}).get(b"unit", b"").decode() for f in whole.schema}
    assert _finish.spool_column_stats(path, units) == (
        column_stats_text(whole, units),
        data_span_s(whole),
    )


@pytest.mark.parametrize("fmt", ["parquet", "csv"])
def test_the_watchdogs_dump_of_a_spool_is_streamed(
    recorded: tuple[Path, dict[str, Any]], tmp_path: Path, fmt: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    path, _prov = recorded
    whole = _whole(path)
    out = tmp_path / f"dump.{fmt}"
    job = {"kind": "spool", "source": str(path), "format": fmt, "dump": str(out)}
    watched = Watched(monkeypatch)
    line = _watchdog_child.run_job(job, 4242)
    watched.check_streamed()
    assert f"wrote {whole.num_rows} rows of spool" in line
    read = pq.read_table(out) if fmt == "parquet" else pacsv.read_csv(out)
    assert read.column("mono_ns").to_pylist() == whole.column("mono_ns").to_pylist()
