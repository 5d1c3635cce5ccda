"""Scopes: names, nesting, labels, threads, asyncio tasks, generators, exceptions, and what a
Sampler records of them (checked against the events the scopes must have written)."""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Generator, Iterator
from typing import Any

import pyarrow as pa
import pytest
import stroboscope.scopes as scopes
from stroboscope import _core
from stroboscope.recording.sampler import Sampler
from stroboscope.scopes import _switchboard as _events


def _rows(s: Sampler) -> list[dict[str, Any]]:
    s.stop()
    rows: list[dict[str, Any]] = s.scope_intervals().to_pylist()
    return rows


def test_names_paths_depths_and_exact_edges(scope_sampler: Sampler) -> None:
    @scopes.annotate()
    def outer() -> None:
        with scopes.annotate("inner"):
            time.sleep(0.001)

    class Model:
        @scopes.annotate()
        def forward(self) -> int:
            return 7

    before = time.monotonic_ns()
    outer()
    assert Model().forward() == 7
    after = time.monotonic_ns()
    rows = _rows(scope_sampler)
    qual = outer.__qualname__
    assert [(r["name"], r["path"], r["depth"]) for r in rows] == [
        (qual, qual, 0),
        ("inner", f"{qual}/inner", 1),
        (Model.forward.__qualname__, Model.forward.__qualname__, 0),
    ]
    for r in rows:
        assert before <= r["begin_ns"] <= r["end_ns"] <= after
        assert r["thread_id"] == threading.get_native_id()
    assert rows[1]["end_ns"] - rows[1]["begin_ns"] >= 1_000_000  # it slept 1 ms inside
    assert rows[0]["begin_ns"] <= rows[1]["begin_ns"] and rows[1]["end_ns"] <= rows[0]["end_ns"]


def test_a_context_manager_needs_a_name_and_bad_arguments_are_named() -> None:
    with pytest.raises(ValueError, match="needs a name"), scopes.annotate():
        pass
    with pytest.raises(ValueError, match="needs a name"), scopes.collect_hardware_metrics():
        pass
    with pytest.raises(TypeError, match="parentheses"):
        scopes.annotate(lambda: None)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="empty"):
        scopes.annotate("")
    with pytest.raises(ValueError, match="'depth' is a column"):
        scopes.annotate("x", depth=1)
    with pytest.raises(ValueError, match="'path' is a column"):
        scopes.labels(path="a")
    with pytest.raises(TypeError, match="must be a str, int, float or bool"):
        scopes.labels(step=[1])  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="nvtx"):
        scopes.annotate("x", nvtx=3)  # type: ignore[arg-type]


def test_an_exception_closes_the_scope_and_goes_on_unchanged(scope_sampler: Sampler) -> None:
    err = KeyError("mine")
    with pytest.raises(KeyError) as caught, scopes.annotate("fails"):
        raise err
    assert caught.value is err
    assert scopes.current_stack() == ()
    (row,) = _rows(scope_sampler)
    assert row["name"] == "fails" and row["end_ns"] is not None


def test_labels_ambient_and_own(scope_sampler: Sampler) -> None:
    with scopes.labels(module="resnet", backend="trt"):
        assert scopes.current_labels() == {"module": "resnet", "backend": "trt"}
        with scopes.labels(backend="onnx"), scopes.annotate("build", step=3):
            pass
        with scopes.annotate("plain"):
            pass
    assert scopes.current_labels() == {}
    rows = _rows(scope_sampler)
    assert [(r["name"], r["module"], r["backend"], r["step"]) for r in rows] == [
        ("build", "resnet", "onnx", "3"),
        ("plain", "resnet", "trt", None),
    ]


def test_threads_have_their_own_stacks(scope_sampler: Sampler) -> None:
    ids: dict[str, int] = {}
    barrier = threading.Barrier(2)

    def run(tag: str) -> None:
        ids[tag] = threading.get_native_id()
        with scopes.annotate(f"outer-{tag}"):
            barrier.wait()  # both outer scopes are open at once
            with scopes.annotate("inner"):
                barrier.wait()

    threads = [threading.Thread(target=run, args=(t,)) for t in "ab"]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    rows = _rows(scope_sampler)
    by_thread = {tag: [r for r in rows if r["thread_id"] == tid] for tag, tid in ids.items()}
    for tag, mine in by_thread.items():
        assert [(r["path"], r["depth"]) for r in mine] == [
            (f"outer-{tag}", 0),
            (f"outer-{tag}/inner", 1),
        ]
    assert len({r["stack_id"] for r in rows}) == 2


def test_asyncio_tasks_have_their_own_stacks(scope_sampler: Sampler) -> None:
    @scopes.annotate()
    async def step(i: int) -> int:
        with scopes.annotate("wait"):
            await asyncio.sleep(0.002)
        return i

    async def main() -> list[int]:
        with scopes.annotate("main"):
            return list(await asyncio.gather(*(step(i) for i in range(3))))

    assert asyncio.run(main()) == [0, 1, 2]
    rows = _rows(scope_sampler)
    steps = [r for r in rows if r["name"] == step.__qualname__]
    waits = [r for r in rows if r["name"] == "wait"]
    assert len(steps) == 3 and len(waits) == 3
    # Three tasks ran their scopes at the same time, each on its own stack at depth 0, not
    # nested under "main" (which their creator held open on another stack).
    assert len({r["stack_id"] for r in steps}) == 3
    assert all(r["depth"] == 0 for r in steps)
    assert {r["path"] for r in waits} == {f"{step.__qualname__}/wait"}
    assert max(r["begin_ns"] for r in steps) < min(r["end_ns"] for r in steps)


def test_generators_get_one_call_per_resume(scope_sampler: Sampler) -> None:
    @scopes.annotate()
    def numbers() -> Generator[int, int, None]:
        got = yield 1
        yield got * 10
        return

    gen = numbers()
    assert next(gen) == 1
    with scopes.annotate("between"):  # the caller's scope is not inside the generator's
        pass
    assert gen.send(4) == 40
    with pytest.raises(StopIteration):
        next(gen)
    rows = _rows(scope_sampler)
    assert [(r["name"], r["depth"]) for r in rows] == [
        (numbers.__qualname__, 0),
        ("between", 0),
        (numbers.__qualname__, 0),
        (numbers.__qualname__, 0),
    ]


def test_async_generators_and_throw(scope_sampler: Sampler) -> None:
    @scopes.annotate()
    async def ticks() -> Any:
        for i in range(2):
            yield i

    @scopes.annotate()
    def catcher() -> Generator[str, None, None]:
        try:
            yield "ready"
        except ValueError as exc:
            yield f"caught {exc}"

    async def main() -> list[int]:
        return [i async for i in ticks()]

    assert asyncio.run(main()) == [0, 1]
    gen = catcher()
    assert next(gen) == "ready"
    assert gen.throw(ValueError("x")) == "caught x"
    gen.close()
    names = [r["name"] for r in _rows(scope_sampler)]
    assert names.count(ticks.__qualname__) == 3  # two yields and the final resume
    assert names.count(catcher.__qualname__) == 2


def test_nothing_is_written_while_nothing_records() -> None:
    assert not _events.state.recording
    before = _core.events_written()

    @scopes.annotate()
    def f() -> int:
        return 1

    with scopes.annotate("idle"):
        assert f() == 1
    assert _core.events_written() == before
    assert scopes.current_stack() == ()


def test_a_sampler_covers_only_its_own_runs() -> None:
    s = Sampler(0.005, sources=["memory"])
    try:
        with scopes.annotate("before"):
            pass
        s.start()
        with scopes.annotate("during"):
            pass
        s.stop()
        with scopes.annotate("after"):
            pass
        s.start()
        with scopes.annotate("again"):
            pass
        s.stop()
        assert [r["name"] for r in s.scope_intervals().to_pylist()] == ["during", "again"]
        events = s.scope_events()
        assert events.schema.metadata[b"events_lost"] == b"0"
        assert events.column("kind").to_pylist() == [1, 2, 1, 2]
    finally:
        s.close()


def test_a_scope_open_when_read_has_no_end(scope_sampler: Sampler) -> None:
    with scopes.annotate("open"):
        table = scope_sampler.scope_intervals()
    assert table.column("end_ns").to_pylist() == [None]
    assert table.schema.field("end_ns").type == pa.int64()


def test_one_nvtx_loader_serves_annotate_and_aitunes_ranges(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    import contextlib
    import types

    from stroboscope._base.nvtx import nvtx_module
    from stroboscope.compat.aitune import annotate_with_nvtx

    calls: list[tuple[str, str | None, str | None]] = []
    fake = types.ModuleType("nvtx")
    fake.push_range = lambda message, color, domain: calls.append(("push", message, domain))  # type: ignore[attr-defined]
    fake.pop_range = lambda domain: calls.append(("pop", None, domain))  # type: ignore[attr-defined]

    @contextlib.contextmanager
    def annotate(message: str, color: object, domain: str) -> Iterator[None]:
        calls.append(("open", message, domain))
        yield

    fake.annotate = annotate  # type: ignore[attr-defined]
    monkeypatch.setitem(__import__("sys").modules, "nvtx", fake)
    nvtx_module.cache_clear()  # looked up again: the fake
    try:
        with scopes.annotate("mine", nvtx=True):
            pass
        with annotate_with_nvtx("theirs"):
            pass
    finally:
        nvtx_module.cache_clear()
    assert calls == [
        ("push", "mine", "stroboscope"),
        ("pop", None, "stroboscope"),
        ("open", "theirs", "AITune"),
    ]


def test_every_accepted_colour_opens_a_range_as_nvtx_resolves_it(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A colour is checked when the scope is made, and what the range then gets is a value the
    real ``nvtx`` resolves (its own colour table, no matplotlib) to the ARGB colour asked for;
    aitune's ranges take the same check."""
    import contextlib
    import sys
    import types

    colors = pytest.importorskip("nvtx.colors")
    from stroboscope._base.nvtx import nvtx_module
    from stroboscope.compat.aitune import annotate_with_nvtx

    got: list[object] = []
    fake = types.ModuleType("nvtx")
    fake.push_range = lambda message, color, domain: got.append(color)  # type: ignore[attr-defined]
    fake.pop_range = lambda domain: None  # type: ignore[attr-defined]

    @contextlib.contextmanager
    def annotate(message: str, color: object, domain: str) -> Iterator[None]:
        got.append(color)
        yield

    fake.annotate = annotate  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "nvtx", fake)
    monkeypatch.setitem(sys.modules, "matplotlib", None)  # what nvtx resolves without it
    nvtx_module.cache_clear()
    asked = {
        None: None,
        "green": 0x008000,  # nvtx's own table: no alpha
        0x80FF8800: 0x80FF8800,
        "#ff8800": 0xFFFF8800,
        "#FF880080": 0x80FF8800,
    }
    try:
        for color in asked:
            with scopes.annotate("mine", nvtx=True, color=color):
                pass
            with annotate_with_nvtx("theirs", color=color):
                pass
    finally:
        nvtx_module.cache_clear()
    resolved = [None if c is None else colors.color_to_hex.__wrapped__(c) for c in got]
    assert resolved == [argb for argb in asked.values() for _ in range(2)]
