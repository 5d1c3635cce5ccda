"""stroboscope.compat.aitune at a scope's edges: a scope with nothing in it still has its row
(asked for at its open) however late the sampler takes it, and a session's first scope has one
row at its open, not two at the same instant. The sampler's lateness is made certain by
deferring its start or its edge requests on a timer, never left to the machine's load."""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest

pytest.importorskip("pandas")  # the pandas extra: aitune's tables are DataFrames
import pandas as pd
from stroboscope.compat import aitune
from stroboscope.compat.aitune import _monitoring

LATE_S = 0.05  # how late the sampler serves what it is asked for


@pytest.fixture
def session(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> Iterator[_monitoring.HardwareMetricsSession]:
    monkeypatch.chdir(tmp_path)
    fresh = _monitoring.HardwareMetricsSession()
    monkeypatch.setattr(_monitoring, "_DEFAULT_SESSION", fresh)
    fresh.enable()
    yield fresh
    fresh._end(dump=False)


class Late:
    """Calls ``fn`` ``LATE_S`` after it is asked to, on a timer thread (joined by :meth:`join`)."""

    def __init__(self, fn: Callable[[], Any]) -> None:
        self.fn = fn
        self.timers: list[threading.Timer] = []

    def __call__(self) -> None:
        timer = threading.Timer(LATE_S, self.fn)
        self.timers.append(timer)
        timer.start()

    def join(self) -> None:
        for timer in self.timers:
            timer.join()


def _scope_rows(df: pd.DataFrame | None, name: str) -> int:
    assert df is not None
    return int((df["scope"] == name).sum())


def test_an_empty_scope_has_its_row_however_late_the_sampler_takes_it(
    session: _monitoring.HardwareMetricsSession, monkeypatch: pytest.MonkeyPatch
) -> None:
    with aitune.collect_hardware_metrics("first"):
        pass
    assert _scope_rows(aitune.get_hardware_metrics(), "first") == 1  # asked for at once
    assert session._request is not None
    late = Late(session._request)
    session._request = late
    with aitune.collect_hardware_metrics("tiny"):
        pass
    df = aitune.get_hardware_metrics()  # at once: the row is still LATE_S away
    assert _scope_rows(df, "tiny") == 1
    with aitune.collect_hardware_metrics("last"):
        pass
    dumped: list[pd.DataFrame] = []
    monkeypatch.setattr(_monitoring, "dump_metrics", dumped.append)
    aitune.disable_hardware_metrics()  # the dump at the end waits for the last scope's row too
    late.join()
    assert len(dumped) == 1 and _scope_rows(dumped[0], "last") == 1
    assert list(dumped[0]["scope"]) == ["first", "tiny", "last"]


def test_a_first_scope_has_one_row_at_its_open(
    session: _monitoring.HardwareMetricsSession, monkeypatch: pytest.MonkeyPatch
) -> None:
    made = _monitoring._make_sampler
    lates: list[Late] = []
    seen: list[int] = []

    def late_sampler() -> Any:
        sampler = made()
        late = Late(sampler.start)  # its thread starts LATE_S after start() returns
        lates.append(late)
        monkeypatch.setattr(sampler, "start", late)
        request = sampler.request_tick

        def counted_request() -> None:
            seen.append(sampler.stats().rows_written)
            request()

        monkeypatch.setattr(sampler, "request_tick", counted_request)
        return sampler

    monkeypatch.setattr(_monitoring, "_make_sampler", late_sampler)
    with aitune.collect_hardware_metrics("a"):
        # The sampler's first row was taken before this scope opened: when the scope asked for
        # its edge row, there was one already.
        assert seen and seen[0] >= 1
        sampler = session._sampler
        assert sampler is not None
        goal = sampler.stats().rows_written + 2
        while sampler.stats().rows_written < goal:
            threading.Event().wait(0.01)
    for late in lates:
        late.join()
    df = aitune.get_hardware_metrics()
    assert df is not None and set(df["scope"]) == {"a"} and len(df) >= 2
    stamps = df["timestamp"].to_numpy(dtype=float)
    # One row at the open, then one an interval on: never two at the same instant.
    assert np.diff(stamps).min() > _monitoring.INTERVAL_S / 4
