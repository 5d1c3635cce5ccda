"""Scopes used in ways that must not break the code they observe: a scope exited in another
thread than the one it was entered in is closed (its end on its own stack), and the opening
thread's later scopes do not nest under it, on the C path and on the Python path; nesting deeper
than the events log's depth (65,535) never raises out of ``with annotate()``, it is counted and
said once."""

from __future__ import annotations

import logging
import threading
from typing import Any

import pytest
import stroboscope.scopes as scopes
from stroboscope._base.ratelimit import RateLimitedLog
from stroboscope.recording.sampler import Sampler
from stroboscope.scopes import _scope, _stack


def _rows(s: Sampler) -> list[dict[str, Any]]:
    s.stop()
    rows: list[dict[str, Any]] = s.scope_intervals().to_pylist()
    return rows


def _in_thread(fn: Any) -> None:
    t = threading.Thread(target=fn)
    t.start()
    t.join(60)
    assert not t.is_alive()


@pytest.mark.parametrize("path", ["c", "python"])
def test_a_scope_exited_in_another_thread_is_closed_there(
    scope_sampler: Sampler,
    caplog: pytest.LogCaptureFixture,
    monkeypatch: pytest.MonkeyPatch,
    path: str,
) -> None:
    monkeypatch.setattr(_scope, "_say_elsewhere", RateLimitedLog(_scope.logger))
    labels: dict[str, Any] = {} if path == "c" else {"k": 1}  # own labels: the Python path
    crossed = scopes.annotate("xt", **labels)
    with caplog.at_level(logging.WARNING, logger="stroboscope"):
        crossed.__enter__()
        _in_thread(lambda: crossed.__exit__(None, None, None))
        with scopes.annotate("after", **labels):
            pass
        with scopes.annotate("after2"), scopes.annotate("inner", **labels):
            pass
    assert scopes.current_stack() == ()
    rows = {r["name"]: r for r in _rows(scope_sampler)}
    assert rows["xt"]["end_ns"] is not None and rows["xt"]["depth"] == 0
    assert rows["after"]["path"] == "after" and rows["after"]["depth"] == 0
    assert rows["after2"]["depth"] == 0 and rows["inner"]["path"] == "after2/inner"
    assert rows["xt"]["end_ns"] <= rows["after"]["begin_ns"]
    said = [r for r in caplog.records if "another thread" in r.getMessage()]
    assert len(said) == 1 and "'xt'" in said[0].getMessage()


def test_a_cross_thread_exit_in_a_later_sampler_leaves_no_nesting(
    caplog: pytest.LogCaptureFixture,
) -> None:
    crossed = scopes.annotate("xt")
    with Sampler(0.005, sources=["memory"]):
        crossed.__enter__()
        _in_thread(lambda: crossed.__exit__(None, None, None))
    with Sampler(0.005, sources=["memory"]) as later:
        with scopes.annotate("later"):
            pass
        rows = later.scope_intervals().to_pylist()
    assert [(r["name"], r["depth"], r["path"]) for r in rows] == [("later", 0, "later")]
    assert scopes.current_stack() == ()


def test_a_scope_entered_while_nothing_recorded_and_exited_elsewhere_is_nothing(
    scope_sampler: Sampler,
) -> None:
    scope_sampler.stop()
    quiet = scopes.annotate("quiet")
    quiet.__enter__()
    scope_sampler.start()
    _in_thread(lambda: quiet.__exit__(None, None, None))
    with scopes.annotate("next"):
        pass
    rows = _rows(scope_sampler)
    assert [(r["name"], r["depth"]) for r in rows] == [("next", 0)]


def _at_depth(depth: int) -> Any:
    """Put a frame at ``depth`` on this stack (as 65,535 scopes open would; building them costs
    minutes): the token that takes it off again."""
    below = scopes.annotate("below")
    frame = _stack.new_frame((below, below._scope_id, 0, _stack.stack_id(), depth))
    return _stack.STACK_VAR.set((frame,))


def test_nesting_deeper_than_the_log_holds_never_raises(
    scope_sampler: Sampler, caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(_scope, "_say_too_deep", RateLimitedLog(_scope.logger))
    before = _scope.too_deep()
    token = _at_depth(_scope.MAX_DEPTH - 1)
    try:
        with caplog.at_level(logging.WARNING, logger="stroboscope"):
            # depth 65,535: written; 65,536: the C path hands it to Python, which writes nothing
            with scopes.annotate("deepest"), scopes.annotate("d"):
                with scopes.annotate("labelled", k=1):  # the Python path itself
                    pass
                with scopes.annotate("d2"):
                    pass
            with scopes.annotate("sibling"):
                pass
    finally:
        _stack.STACK_VAR.reset(token)
    with scopes.annotate("top"):
        pass
    rows = _rows(scope_sampler)
    assert [(r["name"], r["depth"]) for r in rows] == [
        ("deepest", 0xFFFF),
        ("sibling", 0xFFFF),
        ("top", 0),
    ]
    assert all(r["end_ns"] is not None for r in rows)
    assert _scope.too_deep() - before == 3
    said = [r for r in caplog.records if "nested deeper than 65535" in r.getMessage()]
    assert len(said) == 1
