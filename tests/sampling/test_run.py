"""The run a sampler records (stroboscope.sampling._run.RunRecord), on its own: its facts
gathered once, the budget's rate changes taken in (the fill limits, the provenance, one log
line each), and the command line a provenance carries."""

from __future__ import annotations

import dataclasses
import logging

import pytest
from _fake_proc import PID, FakeProc
from _sampler_core import bare_core
from stroboscope._base.identity import Identity
from stroboscope.sampling._run import RunRecord, describe_change
from stroboscope.sampling._stats import RateChange, SamplerStats


def _record(fake_proc: FakeProc) -> tuple[RunRecord, SamplerStats]:
    core, plan = bare_core(fake_proc, {"memory": 1, "process": 1}, interval=0.01)
    core.run_ticks_inline(2)
    stats = SamplerStats.from_core(core.stats(), plan.details, interval_s=0.01, pid=PID)
    record = RunRecord(
        interval=0.01,
        pid=PID,
        column_names=["time", *[c["name"] for c in core.columns()]],
        gpu_labels={3: 0},
        details=plan.details,
        fill_within=plan.fill_within_ns,
        max_overhead=0.05,
    )
    return record, stats


def test_the_facts_are_gathered_once_from_the_stats_handed_in(fake_proc: FakeProc) -> None:
    record, stats = _record(fake_proc)
    calls: list[int] = []

    def counted() -> SamplerStats:
        calls.append(1)
        return stats

    assert not record.gathered
    record.identity = Identity(host="node-7", rank=3, world_size=8)
    facts = record.facts(counted)
    assert record.gathered and len(calls) == 1
    assert record.facts(counted) is facts and len(calls) == 1  # kept, not gathered again
    prov = facts.provenance((2, 0, 0))
    assert prov["pid"] == PID and prov["interval_s"] == 0.01
    assert prov["identity"]["host"] == "node-7" and prov["identity"]["rank"] == 3
    assert [source["name"] for source in prov["sources"]] == ["memory", "process"]
    assert prov["budget"] == {"max_overhead": 0.05, "rate_changes_total": 0, "rate_changes": []}


def test_a_rate_change_reaches_the_fill_limits_the_provenance_and_the_log_once(
    fake_proc: FakeProc, caplog: pytest.LogCaptureFixture
) -> None:
    record, stats = _record(fake_proc)
    before = dict(record.fill_within)
    change = RateChange(1_000, "process", 10_000_000, 1_280_000_000, "over_budget", 0.07)
    changed = dataclasses.replace(stats, rate_changes=(change,), rate_changes_total=1)
    assert not record.budget_changed(0) and record.budget_changed(1)
    with caplog.at_level(logging.INFO, logger="stroboscope"):
        run = record.current(lambda: changed, 1)
        assert record.current(lambda: changed, 1) is run  # seen: nothing taken in again
    lines = [r.getMessage() for r in caplog.records if "rate change" in r.getMessage()]
    assert len(lines) == 1 and describe_change(change) in lines[0]
    assert not record.budget_changed(1)
    budget = run.provenance((2, 0, 0))["budget"]
    assert budget["rate_changes_total"] == 1
    assert budget["rate_changes"] == [dataclasses.asdict(change)]
    # The slowed source's columns hold their values up to its new period (less half a tick);
    # the others keep their planned limits.
    process = [c["name"] for c in record._details["process"]["columns"]]
    assert process
    for name in process:
        assert record.fill_within[name] >= 1_280_000_000 - 5_000_000 > before[name]
    for name in record._details["memory"]["columns"]:
        assert record.fill_within[name["name"]] == before[name["name"]]


def test_a_given_command_is_for_that_answer_only(fake_proc: FakeProc) -> None:
    record, stats = _record(fake_proc)
    given = record.latest(lambda: stats, ["train.py", "--fast"])
    assert given.facts["cmdline"] == ["train.py", "--fast"]
    again = record.latest(lambda: stats)
    assert again.facts["cmdline"] != ["train.py", "--fast"]  # the process's own (recorded)


def test_the_sampler_holds_one_record_and_its_frames_carry_it(fake_proc: FakeProc) -> None:
    from stroboscope import Sampler

    s = Sampler(0.01, sources={"memory": 1}, proc_root=str(fake_proc.root), pid=PID)
    s.tick_now(2)
    first = s.snapshot().provenance
    assert s._run_record.gathered
    assert first is not None and first["pid"] == PID
    assert s.snapshot().provenance == first  # the same facts, gathered once
    assert s._fill_within == s._run_record.fill_within
    s.close()
