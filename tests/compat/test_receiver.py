"""ParentReceiver: rows in, the same rows out (DataFrame, CSV, Parquet), the journal, lifecycle.

Every comparison is against the rows the test sent, cell by cell: a row missing a key must read
back as null, a number as the same number, a string as the same string.

The journal's format (round trip, torn and damaged lines, mixed types) and its removal with a
collected receiver are in test_receiver_journal.py.
"""

from __future__ import annotations

import csv
import json
import math
import multiprocessing
import os
import queue
import stat
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq
import pytest
from stroboscope.compat.aitune import ParentReceiver

DEADLINE_S = 30.0


def make_rows(n: int, start: int = 0) -> list[dict[str, Any]]:
    """Rows whose keys differ: ``tag`` on every third row, ``extra`` on every fifth, and a nested
    ``net`` dict (flattened to ``net.sent`` / ``net.recv``) on every other row."""
    rows = []
    for i in range(start, start + n):
        row: dict[str, Any] = {"id": i, "x": i * 0.25 + 0.1}
        if i % 3 == 0:
            row["tag"] = f't{i},"q"'
        if i % 5 == 0:
            row["extra"] = -i
        if i % 2 == 0:
            row["net"] = {"sent": 10 * i, "recv": 20 * i}
        rows.append(row)
    return rows


def flat(row: dict[str, Any]) -> dict[str, Any]:
    out = {k: v for k, v in row.items() if k != "net"}
    if "net" in row:
        out["net.sent"] = row["net"]["sent"]
        out["net.recv"] = row["net"]["recv"]
    return out


COLUMNS = ["id", "x", "tag", "extra", "net.sent", "net.recv"]


def wait_rows(receiver: ParentReceiver, n: int) -> None:
    deadline = time.monotonic() + DEADLINE_S
    while receiver.rows_received < n:
        assert time.monotonic() < deadline, f"only {receiver.rows_received} of {n} rows arrived"
        time.sleep(0.005)


def csv_cell(value: Any) -> str:
    """How a value reads back from the CSV (Arrow's writer: shortest round-trip floats)."""
    if value is None:
        return ""
    if isinstance(value, float):
        return repr(value).removesuffix(".0") if value.is_integer() else repr(value)
    return str(value)


def check_csv(path: Path, rows: list[dict[str, Any]]) -> None:
    with open(path, newline="", encoding="utf-8") as f:
        got = list(csv.reader(f))
    assert got[0] == COLUMNS
    assert len(got) - 1 == len(rows)
    for line, row in zip(got[1:], rows):
        expected = flat(row)
        assert line == [csv_cell(expected.get(c)) for c in COLUMNS], (line, row)


def check_table_rows(got: list[dict[str, Any]], rows: list[dict[str, Any]]) -> None:
    assert len(got) == len(rows)
    for g, row in zip(got, rows):
        expected = flat(row)
        assert g == {c: expected.get(c) for c in COLUMNS}


@pytest.fixture
def receivers() -> Iterator[list[ParentReceiver]]:
    """Receivers made by a test are stopped at its end, even when it fails."""
    made: list[ParentReceiver] = []
    yield made
    for r in made:
        if r.running or r.watchdog is not None:
            r.stop()


def new_receiver(made: list[ParentReceiver], q: Any, **kwargs: Any) -> ParentReceiver:
    kwargs.setdefault("crash_safe", False)
    r = ParentReceiver(q, **kwargs)
    made.append(r)
    return r


def test_mixed_keys_get_metrics(receivers: list[ParentReceiver]) -> None:
    q: queue.Queue[dict[str, Any]] = queue.Queue()
    r = new_receiver(receivers, q)
    r.start()
    rows = make_rows(500)
    for row in rows:
        q.put(row)
    wait_rows(r, len(rows))
    df = r.get_metrics()
    assert list(df.columns) == COLUMNS
    assert len(df) == len(rows)
    for record, row in zip(df.to_dict("records"), rows):
        expected = flat(row)
        for c in COLUMNS:
            value = expected.get(c)
            if value is None:
                assert record[c] is None or (isinstance(record[c], float) and math.isnan(record[c]))
            else:
                assert record[c] == value, (c, record, row)
    r.stop()


def produce(q: Any, n: int) -> None:
    """Runs in a spawned child process: puts ``make_rows(n)`` on a multiprocessing queue."""
    for row in make_rows(n):
        q.put(row)


def test_multiprocessing_queue_from_child(receivers: list[ParentReceiver], tmp_path: Path) -> None:
    ctx = multiprocessing.get_context("spawn")
    q = ctx.Queue()
    r = new_receiver(receivers, q)
    r.start()
    child = ctx.Process(target=produce, args=(q, 2000))
    child.start()
    try:
        wait_rows(r, 2000)
    finally:
        child.join(DEADLINE_S)
    assert child.exitcode == 0
    r.snapshot(tmp_path / "rows.csv")
    check_csv(tmp_path / "rows.csv", make_rows(2000))
    r.stop()
    q.close()
    q.join_thread()


def test_snapshot_csv_with_reset(receivers: list[ParentReceiver], tmp_path: Path) -> None:
    q: queue.Queue[dict[str, Any]] = queue.Queue()
    r = new_receiver(receivers, q)
    r.start()
    first = make_rows(300)
    for row in first:
        q.put(row)
    wait_rows(r, 300)
    r.snapshot(tmp_path / "a.csv")  # reset_metrics=True by default
    check_csv(tmp_path / "a.csv", first)
    assert len(r.get_metrics()) == 0
    second = make_rows(200, start=300)
    for row in second:
        q.put(row)
    wait_rows(r, 500)
    df = r.get_metrics()
    assert df["id"].tolist() == list(range(300, 500))
    r.snapshot(tmp_path / "b.csv", reset_metrics=True)
    check_csv(tmp_path / "b.csv", second)
    r.stop()


def test_snapshot_parquet_without_reset(receivers: list[ParentReceiver], tmp_path: Path) -> None:
    q: queue.Queue[dict[str, Any]] = queue.Queue()
    r = new_receiver(receivers, q)
    r.start()
    rows = make_rows(400)
    for row in rows[:250]:
        q.put(row)
    wait_rows(r, 250)
    r.snapshot(tmp_path / "a.parquet", reset_metrics=False)
    table = pq.read_table(tmp_path / "a.parquet")
    assert table.column_names == COLUMNS
    check_table_rows(table.to_pylist(), rows[:250])
    assert r.get_metrics()["id"].tolist() == list(range(250))  # nothing was cleared
    for row in rows[250:]:
        q.put(row)
    wait_rows(r, 400)
    r.snapshot(tmp_path / "b.parquet", reset_metrics=False)
    check_table_rows(pq.read_table(tmp_path / "b.parquet").to_pylist(), rows)
    assert r.get_metrics()["id"].tolist() == list(range(400))
    r.stop()


def test_rows_waiting_at_stop_are_taken(receivers: list[ParentReceiver]) -> None:
    q: queue.Queue[dict[str, Any]] = queue.Queue()
    r = new_receiver(receivers, q)
    r.start()
    rows = make_rows(10000)
    for row in rows:
        q.put(row)
    r.stop()
    assert q.empty()
    assert r.get_metrics()["id"].tolist() == list(range(10000))


class CheckingQueue:
    """A queue.Queue that, each time the receiver blocks on it, records how many rows it has
    handed out and how many rows the journal holds at that moment."""

    def __init__(self) -> None:
        self.inner: queue.Queue[dict[str, Any]] = queue.Queue()
        self.receiver: ParentReceiver | None = None
        self.handed = 0
        self.checks: list[tuple[int, int]] = []

    def get(self, block: bool = True, timeout: float | None = None) -> dict[str, Any]:
        if self.receiver is not None and self.receiver.journal_path is not None:
            journal = Path(self.receiver.journal_path).read_bytes()
            self.checks.append((self.handed, journal.count(b"\n")))
        item = self.inner.get(block, timeout)
        self.handed += 1
        return item

    def get_nowait(self) -> dict[str, Any]:
        item = self.inner.get_nowait()
        self.handed += 1
        return item


def test_rows_are_journaled_before_the_next_blocking_get(receivers: list[ParentReceiver]) -> None:
    q = CheckingQueue()
    r = new_receiver(receivers, q)
    q.receiver = r
    r.start()
    for burst in range(20):
        for row in make_rows(250, start=250 * burst):
            q.inner.put(row)
        wait_rows(r, 250 * (burst + 1))
    r.stop()
    assert q.handed == 5000 and len(q.checks) >= 20
    late = [(handed, lines) for handed, lines in q.checks if lines != handed]
    assert not late, f"rows taken but not yet journaled when get() blocked: {late[:5]}"


def test_errors_before_start(tmp_path: Path) -> None:
    r = ParentReceiver(queue.Queue(), crash_safe=False)
    with pytest.raises(RuntimeError, match="before start"):
        r.snapshot(tmp_path / "x.csv")
    with pytest.raises(RuntimeError, match="before start"):
        r.get_metrics()
    with pytest.raises(RuntimeError, match="before start"):
        r.stop()
    with pytest.raises(RuntimeError, match="start"):
        r.run()
    assert not (tmp_path / "x.csv").exists()


def test_bad_arguments(tmp_path: Path, receivers: list[ParentReceiver]) -> None:
    with pytest.raises(TypeError, match="queue"):
        ParentReceiver([])  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="dump_format"):
        ParentReceiver(queue.Queue(), dump_format="xlsx")
    with pytest.raises(ValueError, match="journal_dir"):
        ParentReceiver(queue.Queue(), journal_dir=tmp_path / "missing")
    # A directory others can write (not sticky): anyone could swap the journal. Refused, as for
    # spools; a sticky one is accepted.
    shared = tmp_path / "shared"
    shared.mkdir()
    shared.chmod(0o777)
    with pytest.raises(ValueError, match=r"^journal_dir: directory .* writable by others"):
        ParentReceiver(queue.Queue(), journal_dir=shared)
    with pytest.raises(ValueError, match=r"^dump_path .* NUL byte"):
        ParentReceiver(queue.Queue(), dump_path=str(tmp_path / "a\0b.csv"))
    shared.chmod(0o1777)
    r = new_receiver(receivers, queue.Queue(), journal_dir=shared)
    r.start()
    assert r.journal_path is not None and os.path.dirname(r.journal_path) == str(shared)


def test_stop_twice_and_restart(receivers: list[ParentReceiver]) -> None:
    q: queue.Queue[dict[str, Any]] = queue.Queue()
    r = new_receiver(receivers, q, crash_safe=True)
    r.start()
    watchdog = r.watchdog
    assert watchdog is not None and watchdog.running
    with pytest.raises(RuntimeError, match="already running"):
        r.start()
    q.put({"id": 1})
    r.stop()
    assert not r.running and not r.keep_running.is_set()
    assert not watchdog.running
    r.stop()  # harmless
    r.start()  # the journal carries on
    q.put({"id": 2})
    wait_rows(r, 2)
    assert r.get_metrics()["id"].tolist() == [1, 2]
    r.stop()


def test_files_are_private(
    receivers: list[ParentReceiver], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    q: queue.Queue[dict[str, Any]] = queue.Queue()
    r = new_receiver(receivers, q, crash_safe=True)
    r.start()
    journal = Path(r.journal_path or "")
    assert stat.S_IMODE(journal.stat().st_mode) == 0o600
    assert stat.S_IMODE(journal.parent.stat().st_mode) == 0o700
    q.put({"id": 1})
    wait_rows(r, 1)
    for name in ("s.csv", "s.parquet"):
        (tmp_path / name).write_bytes(b"old")
        (tmp_path / name).chmod(0o644)
        r.snapshot(tmp_path / name, reset_metrics=False)
        assert stat.S_IMODE((tmp_path / name).stat().st_mode) == 0o600
    r.stop()
    # a normal stop leaves no crash dump behind
    assert not list(tmp_path.glob("stroboscope-dump-*"))


def test_journal_in_given_directory(receivers: list[ParentReceiver], tmp_path: Path) -> None:
    q: queue.Queue[dict[str, Any]] = queue.Queue()
    r = new_receiver(receivers, q, journal_dir=tmp_path)
    r.start()
    rows = make_rows(50)
    for row in rows:
        q.put(row)
    wait_rows(r, 50)
    path = Path(r.journal_path or "")
    assert path.parent == tmp_path
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    # the journal, not a Python list, holds the rows: its lines are the rows sent
    lines = path.read_bytes().split(b"\n")
    assert lines[-1] == b""
    assert [json.loads(line) for line in lines[:-1]] == rows
    r.stop()


def test_not_mappings_are_skipped(receivers: list[ParentReceiver]) -> None:
    q: queue.Queue[Any] = queue.Queue()
    r = new_receiver(receivers, q)
    r.start()
    for item in ({"id": 0}, None, "text", {"id": 1}):
        q.put(item)
    r.stop()
    assert r.get_metrics()["id"].tolist() == [0, 1]


def test_no_rows_snapshot(receivers: list[ParentReceiver], tmp_path: Path) -> None:
    r = new_receiver(receivers, queue.Queue())
    r.start()
    r.snapshot(tmp_path / "empty.csv")
    assert (tmp_path / "empty.csv").read_bytes() == b""
    assert len(r.get_metrics()) == 0
    r.stop()
