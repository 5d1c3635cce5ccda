"""The command line's sender helpers: ``--sender`` specs parsed, and the record publisher's
windows, aggregates and errors."""

from __future__ import annotations

import json
from pathlib import Path

import pyarrow as pa
import pytest
from _fake_proc import FakeProc


def test_parse_sender_spec() -> None:
    from stroboscope.cli._publish import parse_sender_spec

    assert parse_sender_spec("prometheus:port=9464,addr=0.0.0.0,flag=true,x=1.5") == (
        "prometheus",
        {"port": 9464, "addr": "0.0.0.0", "flag": True, "x": 1.5},
    )
    assert parse_sender_spec("logging") == ("logging", {})
    with pytest.raises(ValueError, match="not key=value"):
        parse_sender_spec("csv:path")
    with pytest.raises(ValueError, match="give a sender name"):
        parse_sender_spec(":a=1")


def test_record_publisher_windows(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, fake_proc: FakeProc
) -> None:
    import argparse
    import types

    from _fake_proc import PID
    from stroboscope import Sampler
    from stroboscope.cli._publish import RecordPublisher, add_sender_arguments
    from stroboscope.compat import _publisher

    # The publisher's clock is a script and the sampler ticks deterministically on a recorded
    # /proc whose counters we advance: which window each row falls in, and so every published
    # value, is known by hand.
    clock = [1000.0]
    monkeypatch.setattr(_publisher, "time", types.SimpleNamespace(monotonic=lambda: clock[0]))
    parser = argparse.ArgumentParser()
    add_sender_arguments(parser)
    args = parser.parse_args(
        [
            "--sender",
            f"jsonl:path={tmp_path / 'm.jsonl'}",
            "--publish-every",
            "0.5",
            "--aggregate",
            "max",
        ]
    )
    fake = fake_proc
    sampler = Sampler(  # network on every tick (by default once per rate window + 5 %)
        0.01,
        pid=PID,
        sources={"cpu": None, "network": None},
        cpu_window=0,
        proc_root=str(fake.root),
    )
    publisher = RecordPublisher.from_args(args, sampler.columns)
    assert publisher is not None
    assert RecordPublisher.from_args(parser.parse_args([]), sampler.columns) is None
    tables = []
    for step in range(1, 6):  # at t = 0.25 ... 1.25 s: windows close at 0.5, 1.0 and at close
        for busy in (step, 2 * step):  # two rows a step: CPU 10*busy % busy, 100 bytes sent
            fake.advance(user=busy, idle=10 - busy, sent=100)
            sampler.tick_now(1)
        clock[0] += 0.25  # (binary fractions: no rounding in the publisher's comparisons)
        tables.append(sampler.drain().to_arrow())
        publisher.feed(tables[-1])
    publisher.close()
    lines = [json.loads(x) for x in (tmp_path / "m.jsonl").read_text().splitlines()]
    # Row 0 has no CPU % (no previous reading); then 10 % x busy of the step that ended there.
    assert [line["cpu.util_pct"] for line in lines] == [
        pytest.approx(40.0),  # steps 1-2: busy 1, 2, 2, 4 (the first is row 0: no reading)
        pytest.approx(80.0),  # steps 3-4: busy 3, 6, 4, 8
        pytest.approx(100.0),  # step 5: busy 5, 10
    ]
    # A counter publishes its last value: bytes sent since the first row, 100 per row.
    assert [line["net.sent_bytes"] for line in lines] == [300, 700, 900]
    whole = pa.concat_tables(tables)
    assert lines[-1]["net.sent_bytes"] == whole["net.sent_bytes"][-1].as_py()


def test_record_publisher_bad_sender_is_a_clear_exit(tmp_path: Path) -> None:
    import argparse

    from stroboscope.cli._publish import RecordPublisher, add_sender_arguments

    parser = argparse.ArgumentParser()
    add_sender_arguments(parser)
    args = parser.parse_args(["--sender", f"csv:path={tmp_path / 'm.csv'}", "--sender", "nope"])
    with pytest.raises(ValueError, match=r"--sender nope: unknown sender 'nope'"):
        RecordPublisher.from_args(args, [])


def test_record_publisher_counts_publish_the_last_value() -> None:
    from stroboscope.cli._publish import RecordPublisher
    from stroboscope.sampling import Column

    # A thread count averaged over a window reads 4.67 threads: a count publishes its last value,
    # a float gauge its mean.
    columns = [
        Column("proc.threads", "count", "int64", "gauge", "threads"),
        Column("proc.cpu_pct", "%", "float64", "gauge", "cpu"),
        Column("gpu.0.sm_clock_mhz", "MHz", "int64", "gauge", "clock"),
        Column("gpu.0.clock_event_reasons", "bitmask", "int64", "gauge", "reasons"),
    ]
    events: list[dict[str, object]] = []
    publisher = RecordPublisher([events.append], columns, every=3600.0, aggregate="mean")
    publisher.feed(
        pa.table(
            {
                "proc.threads": [4, 4, 6],
                "proc.cpu_pct": [10.0, 20.0, 60.0],
                "gpu.0.sm_clock_mhz": [1980, 1980, 345],
                "gpu.0.clock_event_reasons": [0, 4, 1],
            }
        )
    )
    publisher.close()
    assert events == [
        {
            "proc.threads": 6,
            "proc.cpu_pct": pytest.approx(30.0),
            "gpu.0.sm_clock_mhz": 345,
            "gpu.0.clock_event_reasons": 1,
        }
    ]
