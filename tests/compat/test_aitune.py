"""stroboscope.compat.aitune: aitune 0.6.0's hardware-metrics API (names, scopes, rows, files).

Each test gets a fresh default session (the module keeps one per process, as aitune does) in a
temporary working directory; rows come from the real sampler, and the tests wait for rows by
counting them, never by sleeping a set time.
"""

from __future__ import annotations

import os
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import psutil
import pytest

pytest.importorskip("pandas")  # the pandas extra: aitune's tables are DataFrames
import pandas as pd
from stroboscope import scopes
from stroboscope.compat import aitune
from stroboscope.compat.aitune import _monitoring

HOST = ["host_cpu_percent", "host_memory_used", "host_memory_free"]
TORCH = ["torch_allocated", "torch_reserved"]
CONTEXT = ["scope", "module_name", "backend", "timestamp"]


@pytest.fixture
def session(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> Iterator[_monitoring.HardwareMetricsSession]:
    """A fresh, enabled default session; ended (without a dump) after the test."""
    monkeypatch.chdir(tmp_path)
    fresh = _monitoring.HardwareMetricsSession()
    monkeypatch.setattr(_monitoring, "_DEFAULT_SESSION", fresh)
    fresh.enable()
    yield fresh
    fresh._end(dump=False)


def rows_written(s: _monitoring.HardwareMetricsSession) -> int:
    sampler = s._sampler
    assert sampler is not None, "the session has not started"
    return sampler.stats().rows_written


def wait_rows(s: _monitoring.HardwareMetricsSession, more: int = 2) -> None:
    """Wait until the sampler has written ``more`` rows beyond those written now."""
    goal = rows_written(s) + more
    deadline = time.monotonic() + 30
    while rows_written(s) < goal:
        assert time.monotonic() < deadline, "the sampler wrote no rows for 30 s"
        time.sleep(0.01)


def test_every_name_of_aitunes_module_is_here() -> None:
    names = {
        "annotate",
        "annotate_with_nvtx",
        "collect_hardware_metrics",
        "disable_hardware_metrics",
        "dump_metrics",
        "enable_hardware_metrics",
        "get_hardware_metrics",
        "snapshot",
        "with_backend_context",
    }
    assert names <= set(aitune.__all__)
    for name in names:
        assert callable(getattr(aitune, name))
    assert aitune.ParentReceiver.__module__.startswith("stroboscope.compat.aitune")


def test_none_before_start_and_nothing_started_when_disabled(
    session: _monitoring.HardwareMetricsSession,
) -> None:
    assert aitune.get_hardware_metrics() is None
    aitune.disable_hardware_metrics()
    with aitune.annotate("quiet"):
        pass
    assert aitune.get_hardware_metrics() is None and session._sampler is None
    aitune.enable_hardware_metrics()
    with aitune.annotate("loud"):
        assert session._sampler is not None and session._sampler.running
        wait_rows(session)
    df = aitune.get_hardware_metrics()
    assert df is not None and len(df) >= 1 and set(df["scope"]) == {"loud"}


def test_a_name_is_required_in_a_with_statement(
    session: _monitoring.HardwareMetricsSession,
) -> None:
    unnamed = aitune.annotate()
    with pytest.raises(ValueError, match="Name is required for annotate as context manager"):
        unnamed.__enter__()
    with pytest.raises(ValueError, match="name must be provided when using collect_hardware"):
        aitune.collect_hardware_metrics().__enter__()
    with pytest.raises(TypeError, match="name must be a str"):
        aitune.annotate(3)  # type: ignore[arg-type]
    for make, words in (
        (aitune.annotate, r"annotate: .* got function \(as a decorator, write @annotate\(\)"),
        (
            aitune.collect_hardware_metrics,
            r"got function \(as a decorator, write @collect_hardware_metrics\(\) with paren",
        ),
        (scopes.annotate, r"^name must be .* \(as a decorator, write @annotate\(\) with"),
        (
            scopes.collect_hardware_metrics,
            r"\(as a decorator, write @collect_hardware_metrics\(\) with parentheses\)",
        ),
    ):
        with pytest.raises(TypeError, match=words):
            make(test_a_name_is_required_in_a_with_statement)  # type: ignore[arg-type]  # no ()
    assert session._sampler is None  # nothing started


def test_decorators_name_the_scope_after_the_function(
    session: _monitoring.HardwareMetricsSession,
) -> None:
    @aitune.collect_hardware_metrics()
    def forward(x: int) -> int:
        wait_rows(session)
        return x + 1

    @aitune.annotate(color="green")
    def backward() -> str:
        wait_rows(session)
        return "done"

    @aitune.annotate("named")
    def anonymous() -> None:
        wait_rows(session)

    assert forward(1) == 2 and backward() == "done" and anonymous() is None
    assert forward.__name__ == "forward" and backward.__name__ == "backward"
    df = aitune.get_hardware_metrics()
    assert df is not None
    assert {"forward", "backward", "named"} <= set(df["scope"])
    assert session._open == 0


def test_nested_scopes_rows_carry_the_innermost(
    session: _monitoring.HardwareMetricsSession,
) -> None:
    marks: dict[str, float] = {}

    def mark(name: str) -> None:  # the time on the rows' clock (s since the session started)
        marks[name] = (time.monotonic_ns() - session._start_ns) / 1e9

    with aitune.annotate("outer"):
        wait_rows(session)
        mark("inner_open")
        with aitune.collect_hardware_metrics("inner"):
            wait_rows(session)
        mark("inner_closed")
        wait_rows(session)
    wait_rows(session)  # rows with no scope open are not kept
    df = aitune.get_hardware_metrics()
    assert df is not None
    assert list(df.columns) == [*HOST, *TORCH, *CONTEXT]  # no GPU here (no NVML)
    ts = df["timestamp"].to_numpy()
    assert (np.diff(ts) > 0).all() and ts[0] >= 0
    opened, closed = marks["inner_open"], marks["inner_closed"]
    inside = df[(df["timestamp"] > opened) & (df["timestamp"] < closed)]
    assert len(inside) >= 2 and set(inside["scope"]) == {"inner"}
    outside = df[(df["timestamp"] < opened) | (df["timestamp"] > closed)]
    assert len(outside) >= 2 and set(outside["scope"]) == {"outer"}


def test_labels_fill_module_and_backend(session: _monitoring.HardwareMetricsSession) -> None:
    @aitune.with_backend_context
    class Backend:
        def describe(self) -> str:
            return "TensorRTBackend(use_dynamo=False)"

        def key(self) -> str:
            return "k"

        def infer(self) -> dict[str, str]:
            with aitune.annotate("infer"):
                wait_rows(session)
            return scopes.current_labels()

        def _private(self) -> dict[str, str]:
            return scopes.current_labels()

    b = Backend()
    with scopes.labels(module="unet"):
        seen = b.infer()
        assert "backend" not in b._private() and b.key() == "k"
    assert seen == {"module": "unet", "backend": "TensorRTBackend(use_dynamo=False)"}
    with aitune.annotate("plain"):
        wait_rows(session)
    df = aitune.get_hardware_metrics()
    assert df is not None
    infer, plain = df[df["scope"] == "infer"], df[df["scope"] == "plain"]
    assert len(infer) >= 1 and len(plain) >= 1
    assert set(infer["module_name"]) == {"unet"}
    assert set(infer["backend"]) == {"TensorRTBackend(use_dynamo=False)"}
    assert plain["module_name"].isna().all() and plain["backend"].isna().all()


def test_host_and_torch_columns(session: _monitoring.HardwareMetricsSession) -> None:
    before = psutil.virtual_memory()
    with aitune.annotate("host"):
        wait_rows(session, 3)
    after = psutil.virtual_memory()
    df = aitune.get_hardware_metrics()
    assert df is not None
    assert df["host_memory_used"].dtype == np.int64 and df["host_memory_free"].dtype == np.int64
    assert df["host_cpu_percent"].dtype == np.float64
    # psutil's used is total - available, as mem.used_bytes; 64 MiB of slack for other processes
    slack = 64 << 20
    lo, hi = min(before.used, after.used) - slack, max(before.used, after.used) + slack
    assert df["host_memory_used"].between(lo, hi).all()
    total = df["host_memory_used"] + df["host_memory_free"]
    assert (total == before.total).all()
    cpu = df["host_cpu_percent"].dropna()
    assert len(cpu) >= 1 and cpu.between(0, 100).all()
    # torch reports 0 when CUDA is not initialised, so does this: torch is not imported here, or
    # it is (another test of the run imported it) and has not initialised CUDA (a CPU build).
    torch = sys.modules.get("torch")
    assert torch is None or not torch.cuda.is_initialized()
    assert (df[TORCH] == 0).all().all() and (df[TORCH].dtypes == np.int64).all()


def test_torch_figures_are_read_when_cuda_is_initialised(
    session: _monitoring.HardwareMetricsSession, monkeypatch: pytest.MonkeyPatch
) -> None:
    class Cuda:
        allocated = 1000

        def is_initialized(self) -> bool:
            return True

        def memory_allocated(self) -> int:
            return self.allocated

        def memory_reserved(self) -> int:
            return 4096

    class Torch:
        cuda = Cuda()

    torch = Torch()
    monkeypatch.setitem(sys.modules, "torch", torch)
    with aitune.annotate("a"):
        wait_rows(session)
        torch.cuda.allocated = 2000
        with aitune.annotate("b"):
            wait_rows(session)
    df = aitune.get_hardware_metrics()
    assert df is not None
    a, b = df[df["scope"] == "a"], df[df["scope"] == "b"]
    # A row of "a" taken after "b" closed (and before "a" did) reads the latest figures.
    before_b = a[a["timestamp"] < b["timestamp"].min()]
    assert len(before_b) >= 2 and set(before_b["torch_allocated"]) == {1000}
    assert set(a["torch_allocated"]) <= {1000, 2000} and set(b["torch_allocated"]) == {2000}
    assert set(df["torch_reserved"]) == {4096}


def test_rows_before_the_open_is_counted_get_the_reading_of_their_scope(
    session: _monitoring.HardwareMetricsSession, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The torch figures read for a scope hold from the scope's own begin: rows the sampler
    took between the native open and the session's count of it (a preempted thread) are the
    scope's rows and read as the scope's figures, not as the figures before it."""

    class Cuda:
        def is_initialized(self) -> bool:
            return True

        def memory_allocated(self) -> int:
            return 1000

        def memory_reserved(self) -> int:
            return 4096

    monkeypatch.setitem(sys.modules, "torch", type("Torch", (), {"cuda": Cuda()})())
    after_open = session.after_open

    def late(name: str, *opened_ns: int) -> bool:
        wait_rows(session)  # rows inside the scope, before it is counted
        return after_open(name, *opened_ns)

    monkeypatch.setattr(session, "after_open", late)
    with aitune.annotate("a"):
        wait_rows(session)
    df = aitune.get_hardware_metrics()
    assert df is not None
    a = df[df["scope"] == "a"]
    assert len(a) >= 3 and set(a["torch_allocated"]) == {1000}


def test_snapshot_resets_or_keeps(session: _monitoring.HardwareMetricsSession) -> None:
    aitune.snapshot("never.csv")  # not active: a warning, no file
    assert not Path("never.csv").exists()
    with aitune.annotate("one"):
        wait_rows(session)
    aitune.snapshot("first.csv", reset_metrics=False)
    first = pd.read_csv("first.csv")
    assert len(first) >= 1 and list(first.columns) == [*HOST, *TORCH, *CONTEXT]
    assert os.stat("first.csv").st_mode & 0o777 == 0o600
    aitune.snapshot("second.csv")  # the same rows again, then forgotten
    second = pd.read_csv("second.csv")
    assert len(second) >= len(first)
    pd.testing.assert_frame_equal(second.iloc[: len(first)], first)
    df = aitune.get_hardware_metrics()
    assert df is not None and len(df) == 0
    with aitune.annotate("two"):
        wait_rows(session)
    df = aitune.get_hardware_metrics()
    assert df is not None and len(df) >= 1 and set(df["scope"]) == {"two"}


def test_edge_row_for_a_short_scope(session: _monitoring.HardwareMetricsSession) -> None:
    """A scope of a new name gets a row at once, even when it closes before the next tick."""
    with aitune.annotate("long"):
        wait_rows(session)
        # Each closes at once; the row it asked for comes later and is still its own. (Requests
        # made before the sampler wakes coalesce into one row, the latest one's: so each waits.)
        for name in ("blink", "wink"):
            with aitune.annotate(name):
                pass
            wait_rows(session, 1)
        wait_rows(session)
    df = aitune.get_hardware_metrics()
    assert df is not None
    assert (df["scope"] == "blink").sum() >= 1 and (df["scope"] == "wink").sum() >= 1


def test_disable_dumps_and_a_later_enable_starts_afresh(
    session: _monitoring.HardwareMetricsSession, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setattr(_monitoring, "HARDWARE_METRICS_PATH", str(tmp_path / "d.csv"))
    with scopes.labels(module="m", backend="b"), aitune.annotate("first"):
        wait_rows(session)
    aitune.disable_hardware_metrics()
    assert aitune.get_hardware_metrics() is None
    assert set(pd.read_csv(tmp_path / "d.csv")["scope"]) == {"first"}
    aitune.enable_hardware_metrics()
    with aitune.annotate("second"):
        wait_rows(session)
    df: Any = aitune.get_hardware_metrics()
    assert set(df["scope"]) == {"second"}


def test_a_sampler_that_cannot_start_disables_collection(
    session: _monitoring.HardwareMetricsSession,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
) -> None:
    def refuse() -> Any:
        raise RuntimeError("cannot build sampler: no /proc")

    monkeypatch.setattr(_monitoring, "_make_sampler", refuse)

    @aitune.annotate()
    def work() -> int:
        return 5

    assert work() == 5 and work() == 5  # the code runs on; the failure is logged once
    assert [r.getMessage() for r in caplog.records if r.levelname == "ERROR"] == [
        "hardware metrics: cannot start the sampler; disabled"
    ]
    assert aitune.get_hardware_metrics() is None and not session.should_collect()
