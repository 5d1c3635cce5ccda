"""A scope's edges taken in C (``ScopeEdges``, annotate's base) write what the Python path
writes, edge for edge, and each case takes the path the switchboard's state says."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
import stroboscope.scopes as scopes
from stroboscope import _core
from stroboscope.recording.sampler import Sampler
from stroboscope.scopes import _switchboard
from stroboscope.scopes._stack import OpenScope, ambient


class Counted(scopes.annotate):
    """A scope that counts the entries the Python path took."""

    __slots__ = ()
    slow = 0

    def _enter_slow(self) -> scopes.annotate:
        Counted.slow += 1
        return super()._enter_slow()


def _edges(first: int) -> list[tuple[Any, ...]]:
    """The log's edges from ``first`` on, their stack ids numbered by first appearance (a
    task's id differs from run to run)."""
    t = _core.events_read(first).to_arrow()
    cols = [t.column(c).to_pylist() for c in ("kind", "scope_id", "depth", "labels_id")]
    stacks: dict[int, int] = {}
    sids = [stacks.setdefault(s, len(stacks)) for s in t.column("stack_id").to_pylist()]
    tids = t.column("thread_id").to_pylist()
    return list(zip(*cols, sids, tids))


def _workload(a: scopes.annotate, b: scopes.annotate) -> None:
    own = scopes.annotate("own", k=1)  # labels of its own: the Python path, between C ones
    with scopes.labels(run="x"):
        with a:
            with b:
                pass
            with own, b:
                pass
        with b:
            pass
    with pytest.raises(KeyError), a:
        raise KeyError("goes on unchanged")

    async def task() -> None:
        with b:
            await asyncio.sleep(0)
            with a:
                pass

    async def main() -> None:
        with a:
            await asyncio.gather(task(), task())

    asyncio.run(main())
    a.__enter__()
    b.__enter__()  # left open above a: closed with it
    a.__exit__(None, None, None)
    assert scopes.current_stack() == ()


def test_c_edges_write_what_the_python_path_writes(scope_sampler: Sampler) -> None:
    a, b = scopes.annotate("a"), scopes.annotate("b")
    assert a._fast_id >= 0 and b._fast_id >= 0
    first = _core.events_written()
    _workload(a, b)
    fast = _edges(first)
    a._fast_id = b._fast_id = -1  # the same scopes, every edge through _enter_slow/_exit_slow
    first = _core.events_written()
    _workload(a, b)
    slow = _edges(first)
    assert fast == slow
    depths = [e[2] for e in fast if e[0] == 1]
    assert depths[:5] == [0, 1, 1, 2, 0]  # a, b, own, b, b
    assert max(e[4] for e in fast) >= 3  # the thread and two tasks at least: stacks apart
    assert len(fast) == 2 * sum(1 for e in fast if e[0] == 1)


def test_frames_made_in_c_are_the_stacks_own(scope_sampler: Sampler) -> None:
    a = scopes.annotate("a")
    with scopes.labels(run="y"), a:
        (frame,) = scopes.current_stack()
        assert type(frame) is OpenScope
        assert frame.owner is a and frame.scope_id == a._fast_id and frame.depth == 0
        assert frame.labels_id == ambient()[1] != 0
    assert scopes.current_stack() == ()


def test_each_case_takes_the_path_the_switchboard_says() -> None:
    plain, labelled = Counted("plain"), Counted("labelled", k=2)
    Counted.slow = 0
    written = _core.events_written()
    for _ in range(5):  # nothing records: C says so, nothing is written
        with plain:
            pass
    assert (Counted.slow, _core.events_written()) == (0, written)
    with Sampler(0.005, sources=["memory"]):  # started
        for _ in range(5):
            with plain:
                pass
        assert (Counted.slow, _core.events_written()) == (0, written + 10)
        seen: list[str] = []
        remove = scopes.add_open_hook(seen.append)
        try:
            with plain:
                pass
        finally:
            remove()
        assert (Counted.slow, seen) == (1, ["plain"])  # a hook waits: the Python path
        with plain, labelled:
            pass
        assert Counted.slow == 2  # own labels: always the Python path
        assert _switchboard.state.recording
    with plain:
        pass
    assert Counted.slow == 2 and _core.events_written() == written + 16


def test_a_bad_exit_call_is_refused_in_words() -> None:
    with pytest.raises(TypeError, match=r"__exit__\(\) takes 3 arguments"):
        scopes.annotate("x").__exit__(None)  # type: ignore[call-arg]


def test_a_name_id_out_of_the_logs_range_goes_to_the_python_path(scope_sampler: Sampler) -> None:
    a = scopes.annotate("a")
    good = a._fast_id
    a._fast_id = 2**32 + good + 1  # by hand: the log holds 32 bits; C would write good + 1
    first = _core.events_written()
    with a:
        pass
    got = _core.events_read(first).to_arrow().column("scope_id").to_pylist()
    assert got == [good, good]  # the Python path writes the scope's own id
