"""The isolation of senders: a raising or slow sender is logged, held or dropped on its own
while the others receive every event and the monitor keeps sampling, and the sender threads
end with the monitor."""

from __future__ import annotations

import csv
import json
import logging
import os
import threading
import time
from pathlib import Path
from typing import Any, Callable

import pytest
from stroboscope.compat import SystemMonitor
from stroboscope.senders import AbstractBackendSender, Fanout, StatsDict
from stroboscope.senders.csv_file import CSVSender
from stroboscope.senders.jsonl_file import JSONLinesSender


class Raising(AbstractBackendSender):
    def __init__(self) -> None:
        self.calls = 0
        self.closed = 0

    def publish(self, event: StatsDict, **kwargs: Any) -> None:
        self.calls += 1
        raise RuntimeError("backend down")

    def close(self) -> None:
        self.closed += 1


class Slow(AbstractBackendSender):
    def __init__(self, seconds: float) -> None:
        self.seconds = seconds
        self.events: list[dict[str, Any]] = []
        self.closed = 0

    def publish(self, event: StatsDict, **kwargs: Any) -> None:
        time.sleep(self.seconds)
        self.events.append(dict(event))

    def close(self) -> None:
        self.closed += 1


def test_raising_sender_is_logged_rate_limited_and_others_still_receive(
    caplog: pytest.LogCaptureFixture,
) -> None:
    bad = Raising()
    good: list[dict[str, Any]] = []
    fan = Fanout([bad, good.append])
    with caplog.at_level(logging.ERROR, logger="stroboscope.senders"):
        for i in range(5):
            fan.wait(fan.submit({"i": float(i)}), timeout=5)
        fan.close()
    assert [e["i"] for e in good] == [0.0, 1.0, 2.0, 3.0, 4.0]
    assert bad.calls == 5 and bad.closed == 1
    failures = [r for r in caplog.records if "failed to publish" in r.getMessage()]
    assert len(failures) == 1 and failures[0].exc_info is not None  # later ones rate-limited


def test_slow_sender_blocks_only_itself() -> None:
    # The slow sender (Gated, below) holds every event until released (a minute at most), so a
    # submit that waited for it would take that minute, not a few seconds of a loaded machine.
    slow = Gated()
    fast: list[dict[str, Any]] = []
    fan = Fanout([slow, fast.append])
    try:
        started = time.monotonic()
        tickets = [fan.submit({"i": float(i)}) for i in range(4)]
        assert time.monotonic() - started < 10  # submitting never waits for a sender
        deadline = time.monotonic() + 60
        while len(fast) < 4 and time.monotonic() < deadline:
            time.sleep(0.01)
        assert len(fast) == 4 and len(slow.events) < 4  # the fast one is not held back
    finally:
        slow.release.set()
    assert fan.wait(tickets[-1], timeout=60)  # in order: the last handled means all are
    assert fan.close(timeout=60)
    assert [e["i"] for e in slow.events] == [0.0, 1.0, 2.0, 3.0] and slow.closed == 1


def test_too_slow_sender_drops_oldest(caplog: pytest.LogCaptureFixture) -> None:
    slow = Slow(0.3)
    fan = Fanout([slow], max_pending=2)
    with caplog.at_level(logging.WARNING, logger="stroboscope.senders"):
        for i in range(6):
            fan.submit({"i": float(i)})
        assert fan.close(timeout=5)
    worker = fan.workers[0]
    assert worker.dropped >= 2 and worker.dropped + len(slow.events) == 6
    assert slow.events[-1]["i"] == 5.0  # the newest always gets through
    assert any("too slow" in r.getMessage() for r in caplog.records)


class Gated(AbstractBackendSender):
    """Held in publish() until the test releases it: as slow as wanted, with no sleeping."""

    def __init__(self) -> None:
        self.entered = threading.Event()
        self.release = threading.Event()
        self.events: list[dict[str, Any]] = []
        self.closed = 0

    def publish(self, event: StatsDict, **kwargs: Any) -> None:
        self.entered.set()
        self.release.wait(60)
        self.events.append(dict(event))

    def close(self) -> None:
        self.closed += 1


def wait_for(condition: Callable[[], bool], timeout: float = 30.0) -> bool:
    """Poll ``condition`` until it holds (True) or ``timeout`` seconds pass (False)."""
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.01)
    return True


def test_monitor_sampling_and_other_senders_are_not_held_by_a_slow_one() -> None:
    gated = Gated()
    bad = Raising()
    fast: list[dict[str, Any]] = []
    mon = SystemMonitor(os.getpid(), [gated, bad, fast.append], 0.1, interval=0.01)
    mon.start()
    try:
        assert gated.entered.wait(30)  # the gated sender is held on its first event from now on
        ticks_then, published_then = mon.raw_sampler.stats().ticks_taken, len(fast)
        # While it is held, the other senders keep receiving and the sampler keeps sampling.
        assert wait_for(lambda: len(fast) >= published_then + 3)
        assert mon.raw_sampler.stats().ticks_taken > ticks_then
        assert gated.events == []  # (still held)
    finally:
        gated.release.set()
        mon.shutdown()
    # shutdown() let the held sender work through its backlog, then closed everyone once.
    assert len(gated.events) == len(fast) and gated.closed == 1 and bad.closed == 1
    assert bad.calls == len(fast)
    assert fast[-1] == mon.sampler


def test_monitor_with_builtin_senders_end_to_end(tmp_path: Path) -> None:
    csv_sender = CSVSender(tmp_path / "m.csv")
    jsonl_sender = JSONLinesSender(tmp_path / "m.jsonl")
    seen: list[dict[str, Any]] = []
    mon = SystemMonitor(os.getpid(), [csv_sender, jsonl_sender, seen.append], 0.2, rank=0)
    mon.start()
    assert wait_for(lambda: len(seen) >= 2)  # two windows published (not: 0.5 s passed)
    mon.shutdown()
    lines = [json.loads(x) for x in (tmp_path / "m.jsonl").read_text().splitlines()]
    with open(tmp_path / "m.csv", newline="") as f:
        rows = list(csv.DictReader(f))
    assert len(lines) == len(rows) == len(seen) >= 3  # + the last window, at shutdown
    assert set(lines[-1]) - {"time"} == set(mon.sampler)
    assert float(rows[-1]["rank0.network.sent"]) == mon.sampler["rank0.network"]["sent"]  # type: ignore[index]
    assert float(rows[-1]["rank0.memory"]) == pytest.approx(mon.sampler["rank0.memory"])


def test_sender_threads_end_with_the_monitor() -> None:
    before = {t.ident for t in threading.enumerate()}
    mon = SystemMonitor(os.getpid(), [lambda e: None, lambda e: None], 60)
    mon.start()
    # (Only our threads: a library may start one of its own meanwhile.)
    ours = [t for t in threading.enumerate() if t.name.startswith("stroboscope-")]
    during = sorted(t.name for t in ours if t.ident not in before)
    mon.shutdown()
    leftover = [t for t in ours if t.ident not in before and t.is_alive()]
    # The check sees the threads (one per sender and the monitor's own): a leftover would show.
    assert during == ["stroboscope-monitor"] + ["stroboscope-sender-CallableSender"] * 2
    assert leftover == []
