"""``stroboscope.enable(edge_counters=...)``: the default session's scopes carry their threads'
own CPU clocks, and ``stroboscope.summary()`` the exact CPU time per call."""

from __future__ import annotations

import time

import stroboscope
import stroboscope._core as _core
import stroboscope.scopes as scopes


def test_enable_with_edge_counters_gives_cpu_ms_edges() -> None:
    scopes.enable(edge_counters=True, sources=["cpu"])
    try:
        for _ in range(3):
            with stroboscope.annotate("spin"):
                t0 = time.thread_time_ns()
                while time.thread_time_ns() - t0 < 200_000:
                    pass
        assert _core.events_counters() == "cpu"
        df = scopes.summary()
        assert df.loc["spin", "cpu_ms_edges_n"] == 3
        assert float(df["cpu_ms_edges"].iloc[0]) >= 0.2
    finally:
        scopes.disable()
        session = scopes.session()
        if session is not None:
            session.close()
    assert _core.events_counters() == "off"
