"""What one sampler records of the scopes (stroboscope.sampling._scope_log.ScopeRecording), on
its own over a bare core: the runs it covers in the events log, the recorder the scopes room
sees while attached, the edge counters it asks for, and the samples it joins to its scopes."""

from __future__ import annotations

import stroboscope
import stroboscope._core as _core
from _fake_proc import FakeProc
from _sampler_core import bare_core
from stroboscope.sampling._frame import Frame
from stroboscope.sampling._scope_log import ScopeRecording, recorders


def _names(part: ScopeRecording) -> list[str]:
    return [str(n) for n in part.intervals().column("name").to_pylist()]


def test_a_part_covers_the_scopes_of_its_own_runs_only(fake_proc: FakeProc) -> None:
    core, _ = bare_core(fake_proc, {"memory": 1})
    first, second = ScopeRecording(core, False, "off"), ScopeRecording(core, False, "off")
    owner, other = object(), object()
    with stroboscope.annotate("before"):
        pass
    first.attach(owner)
    try:
        assert first.attached and [r.sampler for r in recorders()] == [owner]
        with stroboscope.annotate("inside"):
            pass
        first.attach(owner)  # start() of a running sampler: the same run
    finally:
        first.detach(owner)
    assert not first.attached and recorders() == ()
    with stroboscope.annotate("between"):
        pass
    first.attach(owner)
    second.attach(other)
    try:
        assert [r.sampler for r in recorders()] == [owner, other]
        with stroboscope.annotate("both"):
            pass
    finally:
        second.detach(other)
        first.detach(owner)
    assert _names(first) == ["inside", "both"]
    assert _names(second) == ["both"]
    events = first.events()
    assert events.column("kind").to_pylist() == [1, 2, 1, 2]  # begin, end of each call
    assert events.schema.metadata[b"events_lost"] == b"0"


def test_edge_counters_are_asked_for_while_attached(fake_proc: FakeProc) -> None:
    core, _ = bare_core(fake_proc, {"memory": 1})
    part = ScopeRecording(core, False, "cpu")
    owner = object()
    before = _core.events_counters()
    assert before == "off"
    part.attach(owner)
    try:
        assert _core.events_counters() == "cpu"
        assert recorders()[0].edge_counters == "cpu" and recorders()[0].edge_target is None
    finally:
        part.detach(owner)
    assert _core.events_counters() == "off"  # back once no sampler asks


def test_samples_are_joined_to_the_scope_open_at_each(fake_proc: FakeProc) -> None:
    core, _ = bare_core(fake_proc, {"memory": 1})
    part = ScopeRecording(core, True, "off")
    owner = object()
    core.run_ticks_inline(1)  # a row before any scope
    part.attach(owner)
    try:
        assert recorders()[0].edge_target is not None  # edge_rows: a row asked at each begin
        with stroboscope.annotate("step"):
            core.run_ticks_inline(2)
    finally:
        part.detach(owner)
    rows = Frame(core.snapshot()).to_arrow()
    joined = part.samples_by_scope(rows)
    assert joined.column("scope_name").to_pylist() == [None, "step", "step"]
    table = part.summary(rows, by="name")
    assert list(table["calls"]) == [1]
