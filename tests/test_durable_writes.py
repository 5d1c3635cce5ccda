"""Every writer that promises its file is on disk before it takes the path (written whole, then
renamed) calls fsync on that very file once it is complete: ``os.fsync`` is recorded (the
file's device, inode and size at the call) and each output must match one such call."""

from __future__ import annotations

import json
import os
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from _scope_tables import ANCHOR, frame, intervals
from stroboscope.export.report import build_report, write_html, write_pngs
from stroboscope.export.traces import merge_into_trace, write_chrome_trace
from stroboscope.formats import writers
from stroboscope.formats.provenance import PROVENANCE_KEY
from stroboscope.recording import segments

MS = 1_000_000


@dataclass(frozen=True)
class Synced:
    dev: int
    ino: int
    size: int


@pytest.fixture
def synced(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[Synced]]:
    """The files fsync was called on (as they were at the call), the real fsync still done."""
    calls: list[Synced] = []
    real = os.fsync

    def record(fd: int) -> None:
        st = os.fstat(fd)
        calls.append(Synced(st.st_dev, st.st_ino, st.st_size))
        real(fd)

    monkeypatch.setattr(os, "fsync", record)
    yield calls


def assert_synced(calls: list[Synced], path: Path) -> None:
    """``path`` is a file that was fsynced whole: same inode, and its final size at the call."""
    st = os.stat(path)
    assert Synced(st.st_dev, st.st_ino, st.st_size) in calls, (path, st.st_size, calls)


def table(with_provenance: bool = False) -> pa.Table:
    t = frame([k * MS for k in range(100)], {"cpu.util_pct": [float(k % 9) for k in range(100)]})
    if with_provenance:
        t = t.replace_schema_metadata({PROVENANCE_KEY.encode(): json.dumps({"format": 1})})
    return t


SCOPES = intervals([("step", "step", 1, 1, 0, 10 * MS, 40 * MS, {"k": "v"})])


def _parquet(d: Path) -> list[Path]:
    writers.write_parquet(table(), d / "a.parquet")
    return [d / "a.parquet"]


def _csv(d: Path) -> list[Path]:
    writers.write_csv(table(with_provenance=True), d / "a.csv")
    return [d / "a.csv", Path(writers.sidecar_path(d / "a.csv"))]  # and its provenance sidecar


def _parts(suffix: str) -> Callable[[Path], list[Path]]:
    def write(d: Path) -> list[Path]:
        writers.write_parts(table().schema, [table(), table()], d / f"p{suffix}")
        return [d / f"p{suffix}"]

    return write


def _segment(d: Path) -> list[Path]:
    segments._write_segment(table(), str(d / "s.spool.seg-000001.parquet"))
    return [d / "s.spool.seg-000001.parquet"]


def _trace(name: str) -> Callable[[Path], list[Path]]:
    def write(d: Path) -> list[Path]:
        write_chrome_trace(d / name, table(), SCOPES)
        return [d / name]

    return write


WRITERS: dict[str, Callable[[Path], list[Path]]] = {
    "write_parquet": _parquet,
    "write_csv": _csv,
    "write_parts parquet": _parts(".parquet"),
    "write_parts csv": _parts(".csv"),
    "segment": _segment,
    "chrome trace": _trace("t.json"),
    "chrome trace gz": _trace("t.json.gz"),
}


@pytest.mark.parametrize("name", list(WRITERS))
def test_each_output_is_fsynced_whole(name: str, synced: list[Synced], tmp_path: Path) -> None:
    for path in WRITERS[name](tmp_path):
        assert path.is_file()
        assert_synced(synced, path)


def test_merged_trace_is_fsynced_whole(synced: list[Synced], tmp_path: Path) -> None:
    torch = tmp_path / "torch.json"
    torch.write_text(json.dumps({"baseTimeNanoseconds": ANCHOR, "traceEvents": []}))
    merge_into_trace(torch, tmp_path / "merged.json", table(), SCOPES)
    assert_synced(synced, tmp_path / "merged.json")


def test_report_page_and_pngs_are_fsynced_whole(synced: list[Synced], tmp_path: Path) -> None:
    pytest.importorskip("matplotlib")
    run = tmp_path / "run.parquet"
    pq.write_table(table(), run)
    report = build_report([str(run)])
    write_html(report, tmp_path / "r.html")
    assert_synced(synced, tmp_path / "r.html")
    pngs = write_pngs(report, tmp_path / "png")
    assert pngs
    for p in pngs:
        assert_synced(synced, p)


def test_perfetto_trace_is_fsynced_whole(synced: list[Synced], tmp_path: Path) -> None:
    pytest.importorskip("perfetto")
    from stroboscope.export.perfetto import write_perfetto_trace

    write_perfetto_trace(tmp_path / "t.pftrace", table(), SCOPES)
    assert_synced(synced, tmp_path / "t.pftrace")


def test_dataset_parts_scopes_and_owner_are_fsynced_with_their_directory(
    synced: list[Synced], tmp_path: Path
) -> None:
    from stroboscope._base.identity import Identity
    from stroboscope.formats import dataset, dataset_owner

    who = Identity(host="h", rank=0, job="j")
    part = Path(dataset.write_part(table(), tmp_path, identity=who, name="part-0001.parquet"))
    scopes = Path(dataset.write_scopes(SCOPES, tmp_path, identity=who, name="scopes-1.parquet"))
    partition = Path(
        dataset_owner.claim_partition(tmp_path, who, {"run": "r1", "pid": os.getpid()})
    )
    for path in (part, scopes, partition / dataset_owner.OWNER):
        assert_synced(synced, path)
        st = os.stat(path.parent)  # the new entry's directory too (a rename survives a crash)
        assert any((c.dev, c.ino) == (st.st_dev, st.st_ino) for c in synced), path.parent
