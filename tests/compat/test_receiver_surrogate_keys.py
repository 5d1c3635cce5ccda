"""A row whose key is a lone surrogate (valid JSON, not UTF-8) never poisons the receiver: the
key is written escaped (``\\ud800`` as the six characters ``\\ud800``), and every row is read back
by ``get_metrics``, ``snapshot`` and the crash dump's reader of the journal."""

from __future__ import annotations

import queue
import time
from pathlib import Path
from typing import Any

import pyarrow.csv as pacsv
from stroboscope.compat.aitune import ParentReceiver
from stroboscope.compat.aitune._journal import read_journal_table

ESCAPED = "\\ud800"  # the key's text as UTF-8 can hold it: a backslash, then "ud800"


def test_a_lone_surrogate_key_is_escaped_and_no_row_is_lost(tmp_path: Path) -> None:
    q: queue.Queue[Any] = queue.Queue()
    r = ParentReceiver(q, crash_safe=False)
    r.start()
    for i in range(100):
        q.put({"step": i, "loss": i / 2})
    q.put({"\ud800": 1, "step": 100})
    deadline = time.monotonic() + 60
    while r.rows_received < 101 and time.monotonic() < deadline:
        time.sleep(0.01)
    assert r.rows_received == 101
    journal = r.journal_path
    assert journal is not None
    # What the crash dump reads: the journal, whole.
    table, damaged = read_journal_table(journal)
    assert damaged == 0 and table.num_rows == 101
    assert table.column(ESCAPED).to_pylist() == [None] * 100 + [1]
    df = r.get_metrics()
    assert df["step"].tolist() == list(range(101))
    assert df[ESCAPED].iloc[100] == 1
    r.snapshot(tmp_path / "s.csv", reset_metrics=False)
    csv = pacsv.read_csv(tmp_path / "s.csv")
    assert csv.num_rows == 101 and ESCAPED in csv.column_names
    r.stop()
