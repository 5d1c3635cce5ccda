"""formats/chrome_trace.py: the one reader of a Chrome / torch.profiler trace."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import pytest
from stroboscope.formats.chrome_trace import base_time_ns, complete_events, read_trace

BASE = 1_790_857_026_000_000_000


def _trace() -> dict[str, object]:
    events = [
        {"ph": "X", "cat": "kernel", "name": "gemm", "ts": 1.5, "dur": 2.25},
        {"ph": "X", "cat": "cpu_op", "name": "aten::mm", "ts": 10},  # no dur: 0
        {"ph": "X", "cat": "python_function", "name": "f", "ts": 3, "dur": 1},  # not chosen
        {"ph": "B", "cat": "kernel", "name": "begin", "ts": 4},  # not complete
        {"ph": "X", "cat": "kernel", "name": "no ts", "dur": 1},
    ]
    return {"baseTimeNanoseconds": BASE, "traceEvents": events}


def test_complete_events_on_the_realtime_clock(tmp_path: Path) -> None:
    path = tmp_path / "t.json.gz"
    path.write_bytes(gzip.compress(json.dumps(_trace()).encode()))
    trace = read_trace(path)
    base = base_time_ns(trace, path)
    assert base == BASE
    cats, names, begin, end = complete_events(trace, base, ["kernel", "cpu_op"])
    assert cats == ["kernel", "cpu_op"] and names == ["gemm", "aten::mm"]
    assert begin.to_pylist() == [BASE + 1500, BASE + 10_000]
    assert end.to_pylist() == [BASE + 3750, BASE + 10_000]


def test_what_is_not_a_trace_is_named(tmp_path: Path) -> None:
    path = tmp_path / "list.json"
    path.write_text("[]")
    with pytest.raises(ValueError, match=r"list\.json is not a Chrome trace object"):
        read_trace(path)
    with pytest.raises(ValueError, match=r"old\.json has no integer 'baseTimeNanoseconds'"):
        base_time_ns({"traceEvents": []}, "old.json")
