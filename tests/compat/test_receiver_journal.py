"""The receiver's journal format: rows as JSON lines and back, torn and damaged lines, mixed
types as text, and the journal removed with a collected receiver."""

from __future__ import annotations

import math
import os
import queue
from pathlib import Path

from stroboscope.compat.aitune import ParentReceiver
from stroboscope.compat.aitune._journal import (
    encode_rows,
    parse_journal,
    read_journal_rows,
    rows_to_table,
)


def test_journal_format_round_trip() -> None:
    import numpy as np

    rows = [
        {"a": 1, "b": float("nan"), "c": "x\ny", "d": np.float32(0.5), "e": np.int64(7)},
        {"a": 2, "f": [1, 2], "g": {"h": True}, (1, 2): "tuple key"},
    ]
    data, written, skipped = encode_rows([*rows, 42])
    assert (written, skipped) == (2, 1)
    lines = data.split(b"\n")
    assert len(lines) == 3 and lines[2] == b""  # one line per row, each ended by \n
    assert all(b.isascii() for b in lines)
    parsed, damaged = parse_journal(data)
    assert damaged == 0
    assert parsed[0]["a"] == 1 and math.isnan(parsed[0]["b"]) and parsed[0]["c"] == "x\ny"
    assert parsed[0]["d"] == 0.5 and parsed[0]["e"] == 7
    assert parsed[1] == {"a": 2, "f": [1, 2], "g": {"h": True}, "(1, 2)": "tuple key"}
    table = rows_to_table(parsed)
    assert table.column_names == ["a", "b", "c", "d", "e", "f", "g.h", "(1, 2)"]
    assert table.column("f").to_pylist() == [None, "[1,2]"]  # lists are kept as JSON text


def test_torn_and_damaged_lines(tmp_path: Path) -> None:
    path = tmp_path / "journal.jsonl"
    path.write_bytes(b'{"id":0}\n[1,2]\nnot json\n{"id":1,"s":"a"}\n{"id":2,"s":"b')
    rows, damaged = read_journal_rows(path)
    assert rows == [{"id": 0}, {"id": 1, "s": "a"}]
    assert damaged == 2  # the torn last line is expected after a crash and not counted


def test_mixed_types_become_text() -> None:
    table = rows_to_table([{"v": 1}, {"v": "one"}, {"v": None}, {"w": 2**70}])
    assert table.column("v").to_pylist() == ["1", "one", None, None]
    assert table.column("w").to_pylist() == [None, None, None, str(2**70)]


def test_journal_removed_when_collected(tmp_path: Path) -> None:
    import gc

    r = ParentReceiver(queue.Queue(), crash_safe=False)
    r.start()
    path = Path(r.journal_path or "")
    assert path.exists()
    r.stop()
    del r
    gc.collect()
    assert not path.exists() and not path.parent.exists()
    assert os.path.isdir(tmp_path)
