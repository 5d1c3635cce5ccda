"""pyarrow reads every file the package reads through a native file of its own, never through a
Python file object: such an object is released on pyarrow's I/O threads, which aborted the
interpreter at exit ("terminate called without an active exception") in about 1 run of 20 that
recovered a spool (apache/arrow issue 49942). The readers are wrapped to refuse file objects,
and each path that reads Parquet is driven through them."""

from __future__ import annotations

import io
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq
import pytest
from stroboscope.recording.sampler import Sampler
from stroboscope.recording.spool import recover

READERS = ("read_table", "read_schema", "read_metadata", "ParquetFile")


@pytest.fixture
def native_only(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """Wrap pyarrow's Parquet readers: a Python file object as the source fails the test."""
    seen: list[str] = []

    def guard(name: str, real: Callable[..., Any]) -> Callable[..., Any]:
        def reader(source: Any, *args: Any, **kwargs: Any) -> Any:
            assert not isinstance(source, io.IOBase), f"pq.{name} was given a Python file object"
            seen.append(name)
            return real(source, *args, **kwargs)

        return reader

    for name in READERS:
        monkeypatch.setattr(pq, name, guard(name, getattr(pq, name)))
    return seen


@pytest.fixture
def spool(tmp_path: Path) -> Path:
    path = tmp_path / "r.spool"
    s = Sampler(0.01, sources=["memory"], spool=path, segment_seconds=0.1, capacity=1024)
    with s:
        deadline = time.monotonic() + 60
        while len(list(tmp_path.glob("r.spool.seg-*.parquet"))) < 2:  # segments to read back
            assert time.monotonic() < deadline, "the sampler wrote no two segments in 60 s"
            time.sleep(0.01)
    return path


def test_recovering_a_spool_reads_segments_natively(spool: Path, native_only: list[str]) -> None:
    table = recover(spool).to_arrow()
    assert table.num_rows > 0
    assert native_only, "no Parquet reader was called: the test drove nothing"


def test_reading_a_recording_and_its_provenance_natively(
    spool: Path, tmp_path: Path, native_only: list[str]
) -> None:
    from stroboscope.cli.info import read_provenance
    from stroboscope.export._inputs import _read_file

    out = tmp_path / "run.parquet"
    recover(spool).write_parquet(out)
    native_only.clear()
    assert _read_file(out).num_rows > 0
    assert read_provenance(str(out))
    assert {"ParquetFile", "read_schema"} <= set(native_only)
