"""summary(by="function"): each scope broken down by the functions its sampled stacks ran, on
hand-made rows, scope calls and stack tables whose weights are worked out here by hand."""

from __future__ import annotations

import math
import threading
import time

import pyarrow as pa
import pytest
import stroboscope
from _scope_tables import Call, frame, intervals
from _stack_tables import MS, POWER, ROWS, hand, stacks
from stroboscope.analysis.scope_summary import summary

pytest.importorskip("pandas")


def rows() -> pa.Table:
    """The recording's rows, 1 ms apart, with a GPU's power (W, a gauge)."""
    table = frame([i * MS for i in range(ROWS)], {"cpu.util_pct": [50.0] * ROWS})
    field = pa.field("gpu.0.power_w", pa.float64(), metadata={b"unit": b"W", b"kind": b"gauge"})
    return table.append_column(field, pa.array(POWER))


CALLS: list[Call] = [
    ("train", "train", 11, 11, 0, 0, 200 * MS, {}),
    ("step", "train/step", 11, 11, 1, 50 * MS, 150 * MS, {"phase": "a"}),
    ("load", "load", 12, 12, 0, 0, 100 * MS, {}),
    ("late", "late", 11, 11, 0, 190 * MS, None, {}),  # still open: left out
]


def check(df: object, key: tuple[object, ...], want: dict[str, tuple[float, float, int]]) -> None:
    import pandas as pd

    assert isinstance(df, pd.DataFrame)
    part = df.xs(key, level=list(range(len(key))))
    got = {fn: (r["self"], r["total"], r["samples"]) for (fn, _, _), r in part.iterrows()}
    assert set(got) == set(want), key
    group = sum(v[0] for v in want.values())  # every sample's weight, once (its leaf)
    for fn, (own, total, n) in want.items():
        assert got[fn][0] == pytest.approx(own, rel=1e-12, abs=1e-12), (key, fn)
        assert got[fn][1] == pytest.approx(total, rel=1e-12, abs=1e-12), (key, fn)
        assert got[fn][2] == n, (key, fn)
        row = part.xs(fn, level="function").iloc[0]
        if group > 0:
            assert row["total_share"] == pytest.approx(total / group)
            assert row["self_share"] == pytest.approx(own / group)
    totals = [v[1] for v in got.values()]
    assert totals == sorted(totals, reverse=True)  # largest first


def test_each_scope_by_function_with_cpu_weights() -> None:
    df = summary(rows(), intervals(CALLS), by="function", stacks=stacks())
    assert df.index.names == ["scope", "phase", "function", "file", "line"]
    assert list(df.columns) == ["self", "total", "self_share", "total_share", "samples"]
    assert df.attrs["weight"] == "cpu" and df.attrs["unit"] == "ns"
    nan = math.nan
    check(df, ("train", nan), hand(11, 0, 200))
    check(df, ("train/step", "a"), hand(11, 50, 150))
    check(df, ("load", nan), hand(12, 0, 100))
    assert "late" not in df.index.get_level_values("scope")  # open: no row
    # the hand-made figures themselves: beta recursing at rows 120..129 counts once
    assert hand(11, 50, 150)["beta"] == (50 * MS, 50 * MS, 50)
    assert hand(11, 0, 200)["main"] == (0.0, 199 * MS, 200)
    assert ("train/step", "a", "alpha", "prog.py", 10) in df.index  # its file and first line


def test_by_name_and_other_weights() -> None:
    table, calls = rows(), intervals(CALLS)
    by_name = summary(table, calls, by=["name", "function"], stacks=stacks(), weight="wall")
    assert by_name.index.names == ["name", "function", "file", "line"]
    assert by_name.attrs["unit"] == "ns"
    check(by_name, ("step",), hand(11, 50, 150, "wall"))
    check(by_name, ("load",), hand(12, 0, 100, "wall"))
    power = summary(table, calls, by="function", stacks=stacks(), weight="gpu.0.power_w")
    assert power.attrs["unit"] == "J" and "gpu.0.power_w" in power.attrs["rule"]
    check(power, ("load", math.nan), hand(12, 0, 100, "power"))
    check(power, ("train", math.nan), hand(11, 0, 200, "power"))
    # the power shares of the worker: a tenth of a row's CPU on every 10th row, 1/11 of it
    assert hand(12, 0, 100, "power")["gamma"][1] == pytest.approx(9 * 100 * 0.001 / 11)


def test_the_per_scope_table_is_unchanged_without_function() -> None:
    plain = summary(rows(), intervals(CALLS))
    assert "total_s" in plain.columns and "function" not in plain.index.names


def test_bad_arguments_name_what_is_wrong() -> None:
    table, calls = rows(), intervals(CALLS)
    with pytest.raises(ValueError, match="by 'function' needs the stacks"):
        summary(table, calls, by="function")
    with pytest.raises(ValueError, match="add 'function' to by"):
        summary(table, calls, stacks=stacks())
    with pytest.raises(ValueError, match="weight='wall' breaks a scope down by function"):
        summary(table, calls, by="name", weight="wall")
    with pytest.raises(TypeError, match="stacks must be a \\(samples, frames\\) pair"):
        summary(table, calls, by="function", stacks=stacks()[0])
    with pytest.raises(ValueError, match=r"weight 'gpu\.9\.power_w'"):
        summary(table, calls, by="function", stacks=stacks(), weight="gpu.9.power_w")
    with pytest.raises(ValueError, match="'function'"):
        summary(table, calls, by=["nope", "function"], stacks=stacks())


def _spin_in_scope(cpu_s: float) -> None:
    """Spin for ``cpu_s`` of this thread's own CPU time (its clock, not the wall's)."""
    end = time.thread_time() + cpu_s
    while time.thread_time() < end:
        pass


def _sleep_in_worker(stop: threading.Event) -> None:
    stop.wait()


def test_a_sampler_with_stacks_breaks_its_scope_down_by_function() -> None:
    stop = threading.Event()
    worker = threading.Thread(target=_sleep_in_worker, args=(stop,), name="idle-worker")
    with stroboscope.Sampler(interval=0.001, stacks=True) as s:
        worker.start()
        time.sleep(0.05)  # no CPU of this thread just before the scope
        cpu0 = time.thread_time_ns()
        with stroboscope.annotate("work"):
            _spin_in_scope(0.3)
        spent = time.thread_time_ns() - cpu0  # this thread's own clock over the scope
        stop.set()
        worker.join()
        df = s.summary(by="function")
    assert df.attrs["weight"] == "cpu" and df.attrs["unit"] == "ns"
    work = df.xs("work", level="scope")
    spin = work.xs("_spin_in_scope", level="function")
    assert len(spin) == 1 and spin.index[0][0] == __file__
    total = float(spin["total"].iloc[0])
    # the samples inside the scope: this thread's CPU since its previous sample, which was
    # taken while it slept (none before the scope), and at most what its own clock counted
    assert 0.5 * spent <= total <= spent + 2 * MS
    assert spin["total_share"].iloc[0] > 0.9
    assert spin["self"].iloc[0] > 0.5 * spent  # its own loop, no callee of ours
    functions = set(work.index.get_level_values("function"))
    assert "_sleep_in_worker" not in functions  # another thread's: not the scope's
    no_stacks = pytest.raises(ValueError, match="reads no stacks: make it with stacks=True")
    with stroboscope.Sampler(interval=0.01) as plain, no_stacks:
        plain.summary(by="function")
