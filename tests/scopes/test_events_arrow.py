"""The events log's batches as Arrow: the edges written, column by column with their types, and
no pandas loaded to make them (pyarrow's ``pa.array`` of a numpy array would load it, ~40 MiB of
a recorder that never uses it)."""

from __future__ import annotations

import subprocess
import sys
import textwrap

import pyarrow as pa
from stroboscope import _core

_TYPES = {
    "mono_ns": pa.int64(),
    "kind": pa.uint8(),
    "thread_id": pa.int64(),
    "scope_id": pa.uint32(),
    "depth": pa.uint16(),
    "labels_id": pa.uint32(),
    "stack_id": pa.uint64(),
}


def test_a_batch_holds_the_edges_written_with_the_contracts_types() -> None:
    first = _core.events_written()
    edges = [(7, 0, 3, 2**63 + 5), (9, 1, 2**32 - 2, 11), (7, 65535, 0, 1)]
    for scope, depth, labels, stack in edges:
        _core.events_begin(scope, depth, labels, stack)
        _core.events_end(scope, depth, labels, stack)
    t = _core.events_read(first).to_arrow()
    assert {f.name: f.type for f in t.schema} == _TYPES
    got = list(zip(*(t.column(c).to_pylist() for c in ("scope_id", "depth", "labels_id"))))
    assert got == [(s, d, lab) for s, d, lab, _ in edges for _ in (1, 2)]
    assert t.column("kind").to_pylist() == [1, 2] * 3
    assert t.column("stack_id").to_pylist() == [e[3] for e in edges for _ in (1, 2)]
    mono = t.column("mono_ns").to_pylist()
    assert mono == sorted(mono) and mono[0] > 0
    empty = _core.events_read(_core.events_written()).to_arrow()
    assert empty.num_rows == 0 and {f.name: f.type for f in empty.schema} == _TYPES


def test_reading_the_log_loads_no_pandas() -> None:
    code = textwrap.dedent(
        """
        import sys
        from stroboscope import _core
        first = _core.events_written()
        _core.events_begin(1, 0, 0, 1)
        _core.events_end(1, 0, 0, 1)
        t = _core.events_read(first).to_arrow()
        assert t.num_rows == 2, t
        print("pandas" in sys.modules)
        """
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"
