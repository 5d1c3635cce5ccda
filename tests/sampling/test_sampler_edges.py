"""Edge rows (``Sampler.request_tick``) and the opt-in precise mode.

Behaviour, not speed: rows are matched to the requests that asked for them by their times, and
counts are checked to add up; bounds on waiting are generous (a loaded 2-core machine).
"""

from __future__ import annotations

import time
from typing import Callable

import pyarrow as pa
import pytest
from stroboscope import Sampler

HOUR = 3600.0  # the longest interval: no regular tick but the first one during a test


def eventually(pred: Callable[[], bool], timeout: float = 20.0) -> bool:
    """Polls ``pred`` until it holds or ``timeout`` seconds passed."""
    until = time.monotonic() + timeout
    while not pred():
        if time.monotonic() > until:
            return False
        time.sleep(0.001)
    return True


def edge_rows_reach(s: Sampler, n: int) -> Callable[[], bool]:
    """A predicate: ``s`` has taken ``n`` edge rows."""
    return lambda: s.stats().ticks_requested == n


def last_row_at_or_after(s: Sampler, t_ns: int) -> Callable[[], bool]:
    """A predicate: the newest row of ``s`` was taken at or after ``t_ns``."""

    def holds() -> bool:
        written = s.stats().rows_written
        last = mono(s.copy_since(max(written - 1, 0)).to_arrow())
        return bool(last) and last[-1] >= t_ns

    return holds


def mono(table: pa.Table) -> list[int]:
    values: list[int] = table.column("mono_ns").to_pylist()
    return values


def test_each_request_gets_its_own_row_after_it() -> None:
    # Interval an hour: every row after the first is an edge row, and each request waits for its
    # row before the next one is made, so requests and rows pair up one to one.
    s = Sampler(HOUR, sources=["process"])
    with s:
        assert eventually(lambda: s.stats().ticks_taken == 1)
        asked: list[int] = []
        for i in range(10):
            asked.append(time.monotonic_ns())
            s.request_tick()
            assert eventually(edge_rows_reach(s, i + 1))
        asked.append(time.monotonic_ns())
    st = s.stats()
    assert (st.ticks_taken, st.ticks_missed, st.ticks_requested, st.tick_requests) == (1, 0, 10, 10)
    assert st.rows_written == st.ticks_taken + st.ticks_requested
    rows = mono(s.snapshot().to_arrow())
    assert len(rows) == 11
    for i in range(10):
        # Edge row i + 1 was taken after request i and before request i + 1 was made.
        assert asked[i] <= rows[i + 1] <= asked[i + 1]


def test_requests_at_1khz_every_200us() -> None:
    s = Sampler(0.001, sources=["process"], capacity=1 << 16)
    asked: list[int] = []
    with s:
        time.sleep(0.02)
        for _ in range(1000):
            asked.append(time.monotonic_ns())
            s.request_tick()
            until = time.perf_counter() + 200e-6
            while time.perf_counter() < until:
                pass
        # A row after the last request (stop() never serves a pending one): wait for it.
        assert eventually(last_row_at_or_after(s, asked[-1]), timeout=60.0)
    st = s.stats()
    assert st.tick_requests == 1000
    # Each edge row serves at least one request (requests coalesce, never multiply).
    assert 1 <= st.ticks_requested <= 1000
    assert st.rows_written == st.ticks_taken + st.ticks_requested
    rows = mono(s.snapshot().to_arrow())
    assert len(rows) == st.rows_written
    assert rows == sorted(rows) and len(set(rows)) == len(rows)
    # Every request is followed by a row, within a generous second.
    j = 0
    for t in asked:
        while rows[j] < t:
            j += 1
        assert rows[j] - t < 1_000_000_000
    # The 1 ms grid alone gives at most one row per elapsed ms (+1; the first row may have been
    # late by up to lateness_max); the edge rows come on top.
    span_ms = (rows[-1] - rows[0] + st.lateness_max_ns) // 1_000_000
    assert st.ticks_taken <= span_ms + 1
    assert len(rows) == st.ticks_taken + st.ticks_requested


def test_request_tick_is_a_no_op_when_not_running() -> None:
    s = Sampler(HOUR, sources=["process"])
    s.request_tick()
    with s:
        assert eventually(lambda: s.stats().ticks_taken == 1)
    s.request_tick()
    st = s.stats()
    assert (st.tick_requests, st.ticks_requested, st.rows_written) == (0, 0, 1)
    s.close()
    s.request_tick()  # closed: still harmless
    assert s.stats().tick_requests == 0


def test_edge_rows_read_slower_sources_only_when_due() -> None:
    # process every tick (30 min), memory every 2 ticks: on the edge rows between tick 0 and
    # tick 1 memory is not due, so its cells are null there while the process cells are filled.
    s = Sampler(HOUR / 2, sources={"process": None, "memory": HOUR})
    with s:
        assert eventually(lambda: s.stats().ticks_taken == 1)
        for i in range(3):
            s.request_tick()
            assert eventually(edge_rows_reach(s, i + 1))
    t = s.snapshot().to_arrow()
    assert t.num_rows == 4
    rss = t.column("proc.rss_bytes").to_pylist()
    used = t.column("mem.used_bytes").to_pylist()
    assert all(v is not None and v > 0 for v in rss)
    assert used[0] is not None and used[1:] == [None, None, None]
    assert s.stats().source("memory").reads == 1


def test_precise_mode() -> None:
    s = Sampler(0.001, sources=["process"], precise=True)
    with s:
        assert eventually(lambda: s.stats().ticks_taken >= 50)
        # A request made just as a regular tick starts is served by that tick's row; ask until
        # one gets an edge row of its own.
        for _ in range(200):
            s.request_tick()
            if eventually(lambda: s.stats().ticks_requested >= 1, timeout=0.01):
                break
        assert s.stats().ticks_requested >= 1
    st = s.stats()
    assert st.precise
    # It learned a spin window from its own sleeps: at least the floor, at most half an interval.
    assert 20_000 <= st.spin_window_ns <= 500_000
    assert st.rows_written == st.ticks_taken + st.ticks_requested
    plain = Sampler(0.001, sources=["process"])
    assert not plain.stats().precise and plain.stats().spin_window_ns == 0


@pytest.mark.parametrize("bad", ["yes", 1, None])
def test_precise_must_be_a_bool(bad: object) -> None:
    with pytest.raises((TypeError, ValueError), match="precise"):
        Sampler(0.001, sources=["process"], precise=bad)  # type: ignore[arg-type]
