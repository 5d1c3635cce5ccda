"""No work done for nothing in the sampling facade: a sampler's provenance is gathered once and its
frames refer to it (each adding only its own counters and rows), the JSON a frame's table
carries is the one ``dumps`` gives, and each source is built once."""

from __future__ import annotations

from typing import Any

import pytest
from stroboscope import _core
from stroboscope.formats.provenance import PROVENANCE_KEY
from stroboscope.sampling import CoreSampler, _plan
from stroboscope.sampling._clock_sync import clock_sync
from stroboscope.sampling._provenance import RunFacts, dumps, from_schema, read_cmdline


def test_provenance_is_gathered_once_and_frames_keep_their_own_counters(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    calls = {"cmdline": 0, "clock_sync": 0}

    def counted_cmdline(pid: int) -> list[str] | None:
        calls["cmdline"] += 1
        return read_cmdline(pid)

    def counted_clock_sync() -> dict[str, Any]:
        calls["clock_sync"] += 1
        return clock_sync()

    monkeypatch.setattr("stroboscope.sampling._run.read_cmdline", counted_cmdline)
    monkeypatch.setattr("stroboscope.sampling._provenance.clock_sync", counted_clock_sync)
    s = CoreSampler(0.01, sources=["memory"], capacity=8)
    frames, counted = [], []
    for ticks in (3, 4, 20):
        s.tick_now(ticks)
        for take in (s.snapshot, s.drain):
            frames.append(take())
            st = s.stats()  # the sampler's counters when the frame was made
            counted.append((st.ticks_taken, st.ticks_missed, st.rows_lost))
    s.close()
    assert calls == {"cmdline": 1, "clock_sync": 1}
    provs = [f.provenance or {} for f in frames]
    # The run's facts are the same in every frame; the counters are each frame's own: the
    # last drain found 12 rows overwritten, the frames made before it still say none.
    assert [(p["ticks_taken"], p["ticks_missed"], p["rows_lost"]) for p in provs] == counted
    assert [p["rows_lost"] for p in provs] == [0, 0, 0, 0, 0, 12]
    assert [p["table_rows_lost"] for p in provs] == [f.rows_lost for f in frames]
    assert len({dumps(p["cmdline"]) for p in provs}) == 1 and provs[0]["cmdline"]


def test_a_frames_stored_provenance_is_the_text_dumps_gives() -> None:
    s = CoreSampler(0.01, sources=["memory", "cpu"], capacity=64)
    s.tick_now(5)
    full, empty = s.snapshot(), s.copy_since(1 << 40)
    s.close()
    for frame in (full, empty):
        table = frame.to_arrow()
        text = table.schema.metadata[PROVENANCE_KEY.encode()].decode()
        assert text == dumps(frame.provenance or {})
        assert from_schema(table.schema) == frame.provenance
    assert len(empty) == 0 and empty.provenance is not None
    assert empty.provenance["start_ns"] is None and empty.provenance["rows"] == 0


def test_run_facts_encode_any_json_as_dumps_does() -> None:
    facts = {
        "cmdline": ["prog", 'quote " and \\ and ü and \x01', "😀"],
        "clock": {"clock": "CLOCK_MONOTONIC", "anchor_ns": None, "anchor_uncertainty_ns": 7},
        "nested": {"b": [1, 2.5, None, True], "a": {}},
        "zz": None,
        "aa": 1.0,
    }
    run = RunFacts(facts)
    s = CoreSampler(0.01, sources=["memory"], capacity=16)
    s.tick_now(3)
    table = s.snapshot().to_arrow()
    s.close()
    for t in (table, table.slice(0, 0)):
        assert run.encoded((5, 6, 7), t, 2) == dumps(run.for_rows((5, 6, 7), t, 2))


def test_each_source_is_built_once(monkeypatch: pytest.MonkeyPatch) -> None:
    built: list[_core.BuiltSource] = []
    build = _core.build_source

    def counted(name: str, options: _core.SourceOptions) -> _core.BuiltSource:
        source = build(name, options)
        built.append(source)
        return source

    def refused(*args: object) -> None:
        raise AssertionError("a source built only to describe it")

    monkeypatch.setattr(_core, "build_source", counted)  # the module _plan calls through
    monkeypatch.setattr(_core, "source_details", refused)
    s = CoreSampler(0.01, sources=["memory", "cpu", "process"])
    s.tick_now(2)
    names = [src.name for src in s.stats().sources]
    s.close()
    assert sorted(names) == ["cpu", "memory", "process"]
    assert len(built) == 3 and all(b.taken for b in built)  # the Sampler reads those very ones


def test_a_built_source_goes_to_one_sampler() -> None:
    options = _plan.source_options(None, "/proc", "/sys", "/sys/fs/cgroup", ("/",))
    source = _core.build_source("memory", options)
    assert source.name == "memory" and not source.taken
    assert [c["name"] for c in source.details()["columns"]][:1] == ["mem.total_bytes"]
    other = _core.build_source("cpu", options)
    with pytest.raises(ValueError, match=r"sources\[1\] is listed twice"):
        _core.Sampler([(other, 1), (other, 1)], 1_000_000, 16)
    assert not other.taken  # refused before any source was taken
    _core.Sampler([(source, 1)], 1_000_000, 16)
    assert source.taken and source.name is None
    with pytest.raises(ValueError, match=r"sources\[0\] was taken by another Sampler"):
        _core.Sampler([(source, 1)], 1_000_000, 16)
    with pytest.raises(ValueError, match="taken by a Sampler"):
        source.details()
