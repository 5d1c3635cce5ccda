"""The scope-events binding: order, clock, thread ids, threads, intern table, loss counting,
fork, and the errors bad arguments get. The log is one per process, so every test reads from
the index events_written() gave it before it pushed."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time

import pyarrow as pa
import pyarrow.compute as pc
import pytest
from stroboscope import _core

COLUMNS = [
    ("mono_ns", pa.int64()),
    ("kind", pa.uint8()),
    ("thread_id", pa.int64()),
    ("scope_id", pa.uint32()),
    ("depth", pa.uint16()),
    ("labels_id", pa.uint32()),
    ("stack_id", pa.uint64()),
]


def test_events_come_back_in_order_with_their_fields_and_clock() -> None:
    start = _core.events_written()
    brackets = []
    pushed = []
    for n in range(50):
        before = time.monotonic_ns()
        push = _core.events_begin if n % 2 == 0 else _core.events_end
        args = (n + 1, n % 7, 1000 + n, (1 << 63) + n)
        push(*args)
        brackets.append((before, time.monotonic_ns()))
        pushed.append((1 if n % 2 == 0 else 2, *args))
    batch = _core.events_read(start)
    assert (batch.first, batch.next, batch.lost, len(batch)) == (start, start + 50, 0, 50)
    table = batch.to_arrow()
    assert [(f.name, f.type) for f in table.schema] == COLUMNS
    rows = table.to_pylist()
    got = [(r["kind"], r["scope_id"], r["depth"], r["labels_id"], r["stack_id"]) for r in rows]
    assert got == pushed
    tid = threading.get_native_id()
    for row, (lo, hi) in zip(rows, brackets):
        assert row["thread_id"] == tid
        assert lo <= row["mono_ns"] <= hi  # the same clock as time.monotonic_ns()


def test_last_bounds_the_read_and_arrow_consumers_read_the_batch() -> None:
    start = _core.events_written()
    for n in range(10):
        _core.events_begin(n, 0, 0, 0)
    part = _core.events_read(start + 2, start + 5)
    assert (part.first, part.next, len(part)) == (start + 2, start + 5, 3)
    assert part.to_arrow().column("scope_id").to_pylist() == [2, 3, 4]
    whole = _core.events_read(start, None)
    assert pa.table(whole).equals(whole.to_arrow())  # __arrow_c_stream__
    assert pa.record_batch(whole).num_rows == 10  # __arrow_c_array__
    empty = _core.events_read(_core.events_written())
    assert len(empty) == 0 and empty.to_arrow().num_rows == 0
    assert [(f.name, f.type) for f in empty.to_arrow().schema] == COLUMNS


def test_events_of_several_threads_carry_their_native_ids() -> None:
    start = _core.events_written()
    n_each = 2000
    ids: dict[int, int] = {}
    go = threading.Barrier(4)

    def work(k: int) -> None:
        ids[k] = threading.get_native_id()
        go.wait()
        for n in range(n_each):
            _core.events_begin(n, 1, 0, k)
            _core.events_end(n, 1, 0, k)

    threads = [threading.Thread(target=work, args=(k,)) for k in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    table = _core.events_read(start).to_arrow()
    assert table.num_rows == 4 * 2 * n_each
    for k in range(4):
        mine = table.filter(pc.equal(table.column("stack_id"), k))
        assert mine.num_rows == 2 * n_each
        assert set(mine.column("thread_id").to_pylist()) == {ids[k]}
        assert mine.column("scope_id").to_pylist() == [n // 2 for n in range(2 * n_each)]
        assert mine.column("kind").to_pylist() == [1, 2] * n_each
        mono = mine.column("mono_ns").to_pylist()
        assert mono == sorted(mono)
    assert len(set(ids.values())) == 4


def test_intern_gives_stable_ids_and_the_strings_back() -> None:
    assert _core.events_intern("") == 0
    a = _core.events_intern("train.step")
    b = _core.events_intern('{"module": "encoder"}')
    assert _core.events_intern("train.step") == a and a != b
    strings = _core.events_strings()
    assert strings[0] == "" and strings[a] == "train.step" and strings[b] == '{"module": "encoder"}'
    assert _core.events_strings(b) == strings[b:]
    assert _core.events_strings(len(strings)) == []
    assert _core.events_strings(2**40) == []
    u = _core.events_intern("ünïcode ✓")
    assert _core.events_strings()[u] == "ünïcode ✓"


@pytest.mark.parametrize(
    ("args", "exc", "text"),
    [
        ((1, 0, 0), TypeError, "takes 4 positional arguments"),
        ((-1, 0, 0, 0), ValueError, "scope_id must be in [0, 4294967295], got -1"),
        ((2**32, 0, 0, 0), ValueError, "scope_id must be in [0, 4294967295]"),
        ((0, 65536, 0, 0), ValueError, "depth must be in [0, 65535], got 65536"),
        ((0, 0, -5, 0), ValueError, "labels_id must be in"),
        ((0, 0, 0, 2**64), ValueError, "stack_id must be in [0, 18446744073709551615]"),
        ((0, 0, 0, 1.5), TypeError, "stack_id must be an int, got float"),
        (("a", 0, 0, 0), TypeError, "scope_id must be an int, got str"),
    ],
)
def test_push_refuses_bad_arguments_and_records_nothing(
    args: tuple[object, ...], exc: type[Exception], text: str
) -> None:
    before = _core.events_written()
    for push in (_core.events_begin, _core.events_end):
        with pytest.raises(exc) as info:
            push(*args)  # type: ignore[arg-type]
        assert text in str(info.value)
    assert _core.events_written() == before


def test_read_and_intern_refuse_bad_arguments() -> None:
    written = _core.events_written()
    with pytest.raises(ValueError, match=r"first must be <= events_written\(\)"):
        _core.events_read(written + 1)
    with pytest.raises(ValueError, match=r"first must be <= events_written\(\)"):
        _core.events_read(2**70)
    with pytest.raises(ValueError, match="first must be >= 0"):
        _core.events_read(-1)
    with pytest.raises(ValueError, match="last must be >= first"):
        _core.events_read(written, written - 1)
    with pytest.raises(TypeError, match="last must be an int or None"):
        _core.events_read(0, "5")  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="text must be a str, got bytes"):
        _core.events_intern(b"x")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="first must be >= 0"):
        _core.events_strings(-1)
    for bad in (0, 1, 3, 48, 2**33):
        with pytest.raises(ValueError, match=r"capacity must be a power of two in \[2, 2\*\*32\]"):
            _core.events_configure(bad)


CHILD = r"""
import json, sys
from stroboscope import _core
_core.events_configure(8)
for n in range(20):
    _core.events_begin(n, 0, 0, 0)
b = _core.events_read(0)
out = {"stats": _core.events_stats(), "first": b.first, "next": b.next, "lost": b.lost,
       "scopes": b.to_arrow().column("scope_id").to_pylist()}
try:
    _core.events_configure(16)
except RuntimeError as exc:
    out["again"] = str(exc)
print(json.dumps(out))
"""


def test_a_tiny_ring_overwrites_the_oldest_and_counts_them() -> None:
    out = subprocess.run(
        [sys.executable, "-c", CHILD], capture_output=True, text=True, check=True, timeout=60
    )
    got = json.loads(out.stdout)
    stats = got["stats"]
    assert (stats["written"], stats["overwritten"], stats["dropped"]) == (20, 12, 0)
    assert (stats["lost"], stats["capacity"], stats["bytes"]) == (12, 8, 8 * 40)
    assert (got["first"], got["next"], got["lost"]) == (12, 20, 12)
    assert got["scopes"] == list(range(12, 20))
    assert "already exists" in got["again"]


FORK_CHILD = r"""
import json, os
from stroboscope import _core
_core.events_begin(1, 0, 0, 0)
sid = _core.events_intern("parent")
r, w = os.pipe()
pid = os.fork()
if pid == 0:
    _core.events_begin(2, 0, 0, 0)
    t = _core.events_read(0).to_arrow()
    msg = {"written": _core.events_written(), "tids": t.column("thread_id").to_pylist(),
           "pid": os.getpid(), "intern": _core.events_intern("child")}
    os.write(w, json.dumps(msg).encode())
    os._exit(0)
os.close(w)
child = json.loads(os.read(r, 65536))
os.waitpid(pid, 0)
print(json.dumps({"child": child, "parent_written": _core.events_written(),
                  "parent_tid": os.getpid(), "sid": sid}))
"""


def test_a_forked_child_goes_on_counting_with_its_own_thread_id() -> None:
    out = subprocess.run(
        [sys.executable, "-c", FORK_CHILD], capture_output=True, text=True, check=True, timeout=60
    )
    got = json.loads(out.stdout)
    child = got["child"]
    assert child["written"] == 2 and got["parent_written"] == 1
    assert child["tids"] == [got["parent_tid"], child["pid"]]
    assert child["intern"] == got["sid"] + 1  # the table was copied, and is not locked
    assert os.getpid() not in child["tids"]
