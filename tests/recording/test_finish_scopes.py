"""The scope intervals at the end of a recording (``recording.finish``): the sampler's own
process's and those a recorded command's processes wrote (a scripted reader here), beside the
output as ``<stem>.scopes.parquet`` and as the rank's scopes file of a dataset."""

from __future__ import annotations

import os
import time
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from _scope_tables import intervals
from stroboscope.formats.dataset import open_dataset
from stroboscope.formats.provenance import from_schema
from stroboscope.recording import _finish, finish
from stroboscope.recording.sampler import Sampler
from stroboscope.scopes import annotate


def _shared(*calls: tuple[str, int, int, int]) -> pa.Table:
    """Intervals of other processes: (name, begin, end, pid)."""
    table = intervals([(n, n, pid, pid, 0, b, e, {}) for n, b, e, pid in calls], anchor=None)
    by_begin = sorted(calls, key=lambda c: c[1])
    return table.append_column("pid", pa.array([c[3] for c in by_begin], pa.int64()))


def test_the_samplers_own_scopes_go_beside_the_output(tmp_path: Path) -> None:
    out = tmp_path / "train.parquet"
    sampler = Sampler(0.005, spool=str(out) + ".spool")
    _finish.prepare(sampler)
    with sampler:
        for step in range(3):
            with annotate("train_step", step=step):
                time.sleep(0.002)
    done = finish(sampler, out)
    assert done.scopes == str(tmp_path / "train.scopes.parquet") and done.scope_calls == 3
    scopes = pq.read_table(done.scopes)
    assert scopes.column("name").to_pylist() == ["train_step"] * 3
    assert scopes.column("step").to_pylist() == ["0", "1", "2"]
    assert "pid" not in scopes.column_names  # one process: as scope_intervals() gives them
    prov = from_schema(scopes.schema) or {}
    assert prov["rows"] == 3 and prov["pid"] == os.getpid()


def test_without_an_output_nothing_is_written_beside(tmp_path: Path) -> None:
    sampler = Sampler(0.005, spool=str(tmp_path / "x.spool"))
    with sampler, annotate("s"):
        pass
    assert finish(sampler, None).scopes is None
    assert [p.name for p in tmp_path.iterdir()] == []


def test_own_and_shared_scopes_are_one_table_with_their_pids() -> None:
    own = intervals([("step", "step", 7, 7, 0, 100, 200, {"step": "1"})], anchor=None)
    shared = _shared(("load", 50, 60, 4242), ("load", 150, 160, 4242))
    both = _finish.with_shared(own, shared)
    assert both.column("name").to_pylist() == ["load", "step", "load"]
    assert both.column("pid").to_pylist() == [4242, os.getpid(), 4242]
    assert both.column("step").to_pylist() == [None, "1", None]
    assert _finish.with_shared(own, None) is own
    assert _finish.with_shared(own.slice(0, 0), shared) is shared


def test_a_datasets_rank_gets_the_shared_scopes_and_keeps_them(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    for name in ("RANK", "LOCAL_RANK", "WORLD_SIZE", "LOCAL_WORLD_SIZE"):
        monkeypatch.delenv(name, raising=False)
    events = tmp_path / "events"
    events.mkdir()
    now = time.monotonic_ns()
    shared = _shared(("step", now, now + 10, 11), ("step", now + 20, now + 30, 11))
    monkeypatch.setattr(_finish, "read_shared_intervals", lambda d: shared)
    root = tmp_path / "runs"
    sampler = Sampler(0.005, spool=str(tmp_path / "r.spool"), dataset=str(root))
    _finish.prepare(sampler)
    with sampler:
        time.sleep(0.02)
    done = finish(sampler, None, events_dir=events)
    assert done.scope_calls == 2 and not events.exists()
    sampler.stop()  # a later stop writes the scopes file again: with the same calls
    calls = open_dataset(root, kind="scopes").to_table()
    assert calls.column("name").to_pylist() == ["step", "step"]
    assert calls.column("pid").to_pylist() == [11, 11]


def test_the_readers_counts_go_into_the_provenance(tmp_path: Path) -> None:
    shared = _shared(("s", 1, 2, 5)).replace_schema_metadata(
        {b"events_lost": b"3", b"events_files": b"2", b"other": b"x"}
    )
    path = _finish.write_scopes_beside(shared, tmp_path / "e.parquet", {"pid": 1})
    assert path == str(tmp_path / "e.scopes.parquet")
    prov = from_schema(pq.read_schema(path)) or {}
    assert prov == {"pid": 1, "rows": 1, "events": {"lost": 3, "files": 2}}


def test_events_of_a_directory_not_ours_are_read_and_the_directory_left(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    events = tmp_path / "theirs"
    events.mkdir()
    monkeypatch.setattr(_finish, "read_shared_intervals", lambda d: _shared(("s", 1, 2, 5)))
    sampler = Sampler(0.005, spool=str(tmp_path / "t.parquet.spool"))
    with sampler:
        pass
    done = finish(sampler, tmp_path / "t.parquet", events_dir=events, remove_events=False)
    assert done.scope_calls == 1 and events.is_dir()
