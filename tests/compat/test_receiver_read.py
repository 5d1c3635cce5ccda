"""Reading the receiver's journal a block at a time (issue 9, item 14): the same table as reading
it whole, memory that does not grow with the journal, and receiving that goes on meanwhile."""

from __future__ import annotations

import csv
import os
import queue
import stat
import threading
import time
import tracemalloc
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from stroboscope.compat.aitune import ParentReceiver
from stroboscope.compat.aitune import _receiver as receiver
from stroboscope.compat.aitune._journal import encode_rows, rows_to_table
from stroboscope.formats.writers import write_table as real_write_table

DEADLINE_S = 120.0


def wait_rows(r: ParentReceiver, n: int) -> None:
    deadline = time.monotonic() + DEADLINE_S
    while r.rows_received < n:
        assert time.monotonic() < deadline, f"only {r.rows_received} of {n} rows arrived"
        time.sleep(0.005)


def event_row(i: int) -> dict[str, Any]:
    """Shaped like a SystemMonitor event (15 values, one nested pair)."""
    return {
        "step": i,
        "cpu": 37.5 + (i % 7),
        "memory": 41.25,
        "disk": 63.0,
        "network": {"sent": 1_000_000 + 1500 * i, "recv": 2_000_000 + 3000 * i},
        "proc.memory.availableMB": 12_345.6,
        "proc.memory.rssMB": 2_048.5 + i * 1e-3,
        "proc.memory.percent": 3.2,
        "proc.cpu.threads": 24,
        "gpu.0.gpu": 97.0,
        "gpu.0.memory": 55.0,
        "gpu.0.memoryAllocated": 81.5,
        "gpu.0.temp": 66.0,
        "gpu.0.powerWatts": 301.25,
    }


@pytest.fixture
def receivers() -> Iterator[list[ParentReceiver]]:
    made: list[ParentReceiver] = []
    yield made
    for r in made:
        if r.running:
            r.stop()


def varied_rows() -> list[dict[str, Any]]:
    """Keys that appear late, columns null for whole blocks, ints that turn into floats, numbers
    that turn into text, and lists (kept as JSON text)."""
    rows: list[dict[str, Any]] = []
    for i in range(300):
        row: dict[str, Any] = {"id": i}
        if i >= 150:
            row["late"] = i * 0.5
        if i % 97 == 0:
            row["rare"] = f"r{i}"
        row["num"] = i if i < 200 else i + 0.25  # int64 chunks, then float64 chunks
        row["mixed"] = i if i < 250 else f"t{i}"  # int64 chunks, then text
        if i % 2:
            row["net"] = {"sent": i, "recv": [i, i + 1]}
        rows.append(row)
    return rows


def test_blocks_give_the_table_of_the_whole(tmp_path: Path) -> None:
    from stroboscope.compat.aitune._journal import read_journal_fd
    from stroboscope.formats import journal_read

    rows = varied_rows()
    data, written, refused = encode_rows(rows)
    assert (written, refused) == (len(rows), 0)
    path = tmp_path / "journal.jsonl"
    path.write_bytes(data + b'{"id": 999, "torn')
    whole = rows_to_table(rows)
    fd = os.open(path, os.O_RDONLY)
    try:
        for block in (64, 1000, 1 << 20):
            chunks = list(journal_read.iter_line_blocks(fd, len(data), block))
            assert sum(len(c) for c in chunks) == len(rows)
            if block == 64:
                assert len(chunks) > 100  # many blocks: one row or so each
            builder = journal_read.TableBuilder()
            for lines in chunks:
                builder.add_lines(lines)
            table = builder.table()
            assert table.column_names == whole.column_names
            assert table.schema == whole.schema
            assert table.to_pylist() == whole.to_pylist()
        table, damaged = read_journal_fd(fd)  # to the end: the torn line is left out
        assert damaged == 0 and table.num_rows == len(rows)
    finally:
        os.close(fd)
    assert whole.schema.field("num").type == "double"
    assert whole.column("mixed").to_pylist()[249:251] == ["249", "t250"]
    assert whole.column("net.recv").to_pylist()[:2] == [None, "[1,2]"]


def test_receiving_goes_on_while_a_snapshot_is_written(
    receivers: list[ParentReceiver], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    q: queue.Queue[dict[str, Any]] = queue.Queue()
    r = ParentReceiver(q, crash_safe=False)
    receivers.append(r)
    converting, go = threading.Event(), threading.Event()

    def slow_write_table(*args: Any, **kwargs: Any) -> None:
        converting.set()
        assert go.wait(2 * DEADLINE_S)
        real_write_table(*args, **kwargs)

    monkeypatch.setattr(receiver, "write_table", slow_write_table)
    r.start()
    journal_path = r.journal_path or ""
    for i in range(100):
        q.put({"id": i})
    wait_rows(r, 100)
    snap = tmp_path / "snap.csv"
    errors: list[BaseException] = []

    def take() -> None:
        try:
            r.snapshot(snap, reset_metrics=True)
        except BaseException as exc:  # reported by the main thread
            errors.append(exc)

    taker = threading.Thread(target=take)
    taker.start()
    try:
        assert converting.wait(DEADLINE_S)
        for i in range(100, 150):
            q.put({"id": i})
        wait_rows(r, 150)  # journaled while the snapshot is being written
    finally:
        go.set()
        taker.join()
    assert not errors
    with open(snap, newline="") as f:
        assert [int(row["id"]) for row in csv.DictReader(f)] == list(range(100))
    # The reset removed what the snapshot holds, not the rows that arrived meanwhile; the
    # journal keeps its path (the watchdog's) and its mode.
    assert r.get_metrics()["id"].tolist() == list(range(100, 150))
    assert r.journal_path == journal_path
    assert stat.S_IMODE(os.stat(journal_path).st_mode) == 0o600
    assert sorted(os.listdir(os.path.dirname(journal_path))) == [os.path.basename(journal_path)]
    q.put({"id": 150})
    wait_rows(r, 151)
    assert r.get_metrics()["id"].tolist() == list(range(100, 151))
    r.stop()


def test_reading_memory_does_not_grow_with_the_journal(
    receivers: list[ParentReceiver], tmp_path: Path
) -> None:
    n = 60_000
    q: queue.Queue[dict[str, Any]] = queue.Queue()
    r = ParentReceiver(q, crash_safe=False)
    receivers.append(r)
    r.start()
    for i in range(n):
        q.put(event_row(i))
    wait_rows(r, n)
    size = os.path.getsize(r.journal_path or "")
    assert size > 15 << 20
    r.snapshot(tmp_path / "warm-up.parquet", reset_metrics=False)
    tracemalloc.start()
    try:
        r.snapshot(tmp_path / "all.csv", reset_metrics=False)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    # Python objects for one block of rows at a time (Arrow's buffers are not traced): reading
    # the whole journal into Python rows took several times its size. (A first snapshot has
    # imported what writing needs, so imports are not counted.)
    assert peak < size / 4, (peak, size)
    with open(tmp_path / "all.csv", newline="") as f:
        reader = csv.DictReader(f)
        first = next(reader)
        assert first["network.sent"] == "1000000" and first["proc.cpu.threads"] == "24"
        assert sum(1 for _ in reader) == n - 1
    r.stop()
