"""Edge rows across processes (``_scope_log.ring_rows``): a scope opening in a process that
writes shared events asks the recorder's sampler for a row, which is taken after the scope
opened."""

from __future__ import annotations

import time
from pathlib import Path

import pytest
from _shared_events import run
from stroboscope import Sampler
from stroboscope.formats.shared_events import read_events_dir
from stroboscope.sampling._scope_log import ring_rows

HOUR = 3600.0  # no regular tick but the first one during the test


def test_a_scope_in_another_process_gets_a_row_at_its_begin(tmp_path: Path) -> None:
    with Sampler(HOUR, sources=["memory"]) as s:
        bell = ring_rows(tmp_path, s)
        try:
            # Each scope waits for the row it asked for before the next opens (bounded).
            run(
                """
                import time
                import stroboscope
                for i in range(5):
                    with stroboscope.annotate("step"):
                        time.sleep(0.05)
                    time.sleep(0.2)
                """,
                tmp_path,
            )
            until = time.monotonic() + 20
            while s.stats().ticks_requested < 5 and time.monotonic() < until:
                time.sleep(0.01)
        finally:
            bell.close()
        rows = s.snapshot().to_arrow().column("mono_ns").to_pylist()
    events = read_events_dir(tmp_path).to_pydict()
    begins = [t for t, k in zip(events["mono_ns"], events["kind"]) if k == 1]
    assert len(begins) == 5
    assert bell.wakes >= 5 and s.stats().ticks_requested >= 5
    # Each begin has a row after it and before its scope ended (scopes last 50 ms).
    ends = [t for t, k in zip(events["mono_ns"], events["kind"]) if k == 2]
    for b, e in zip(begins, ends):
        assert any(b <= r <= e for r in rows), (b, e)


def test_ring_rows_refuses_what_is_no_sampler_or_no_directory(tmp_path: Path) -> None:
    with pytest.raises(TypeError, match=r"sampler must be a stroboscope\.Sampler"):
        ring_rows(tmp_path, object())
    with Sampler(HOUR, sources=["memory"]) as s:
        with pytest.raises(OSError):
            ring_rows(tmp_path / "missing", s)
        ring_rows(tmp_path, s).close()
        with pytest.raises(OSError):
            ring_rows(tmp_path, s)  # one doorbell per directory


def test_scopes_are_attached_before_the_first_row(monkeypatch: pytest.MonkeyPatch) -> None:
    # Whoever waits for the first row (the aitune session, on another thread than a slow
    # start) finds the scopes it opens next recorded as this run's: the run's scope window and
    # recorder exist before the thread runs, not after it took a row.
    s = Sampler(0.01, sources=["memory"])
    real = s._attach_scopes
    running: list[bool] = []

    def attach() -> None:
        running.append(bool(s._core.running))
        real()

    monkeypatch.setattr(s, "_attach_scopes", attach)
    with s:
        pass
    assert running == [False]
