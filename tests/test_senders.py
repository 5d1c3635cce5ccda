"""The built-in senders against their real libraries in local mode, the plugin registry, and
the isolation of senders from each other and from sampling."""

from __future__ import annotations

import csv
import json
import logging
import os
import stat
import struct
import sys
import threading
import time
import urllib.request
from pathlib import Path
from typing import Any, Callable

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from stroboscope.compat import AbstractBackendSender, StatsDict, SystemMonitor
from stroboscope.senders import (
    BUILTIN_SENDERS,
    Fanout,
    available_senders,
    flatten_event,
    load_sender,
)
from stroboscope.senders.csv_file import CSVSender
from stroboscope.senders.jsonl_file import JSONLinesSender
from stroboscope.senders.log import LoggingSender
from stroboscope.senders.parquet_file import ParquetSender

EVENTS: list[dict[str, Any]] = [
    {"rank0.cpu": 12.5, "rank0.memory": 40.0, "rank0.network": {"sent": 100, "recv": 200}},
    {"rank0.cpu": 25.0, "rank0.memory": 41.0, "rank0.network": {"sent": 300, "recv": 500}},
    {
        "rank0.cpu": 50.0,
        "rank0.memory": 42.0,
        "rank0.network": {"sent": 700, "recv": 900},
        "rank0.gpu.0.gpu": 99.0,
    },
]
T0 = 1_800_000_000.25  # a fixed publish time (UTC seconds) so the files can be checked exactly


def publish_all(sender: AbstractBackendSender) -> None:
    for i, event in enumerate(EVENTS):
        sender.publish(event, timestamp=T0 + 2 * i)
    sender.close()


def private(path: Path) -> bool:
    return stat.S_IMODE(path.stat().st_mode) == 0o600


def test_flatten_event() -> None:
    flat = flatten_event({"a": 1, "net": {"sent": 2, "x": {"y": 3.5}}, "s": "text", "n": None})
    assert flat == {"a": 1.0, "net.sent": 2.0, "net.x.y": 3.5}


# -- files -----------------------------------------------------------------------------------


def test_csv_rolls_to_a_new_part_when_keys_appear(tmp_path: Path) -> None:
    sender = CSVSender(tmp_path / "m.csv")
    publish_all(sender)
    assert sender.paths == [tmp_path / "m.csv", tmp_path / "m.1.csv"]
    with open(tmp_path / "m.csv", newline="") as f:
        first = list(csv.DictReader(f))
    with open(tmp_path / "m.1.csv", newline="") as f:
        second = list(csv.DictReader(f))
    assert [float(r["rank0.cpu"]) for r in first] == [12.5, 25.0]
    assert [float(r["rank0.network.recv"]) for r in first] == [200, 500]
    assert first[0]["time"] == "2027-01-15T08:00:00.250000Z"
    assert list(second[0]) == [
        "time",
        "rank0.cpu",
        "rank0.memory",
        "rank0.network.sent",
        "rank0.network.recv",
        "rank0.gpu.0.gpu",
    ]
    assert float(second[0]["rank0.gpu.0.gpu"]) == 99.0
    assert all(private(p) for p in sender.paths)


def test_csv_fixed_columns_and_missing_cells(tmp_path: Path) -> None:
    sender = CSVSender(tmp_path / "m.csv", columns=["rank0.cpu", "rank0.gpu.0.gpu"])
    publish_all(sender)
    with open(tmp_path / "m.csv", newline="") as f:
        rows = list(csv.DictReader(f))
    assert [r["rank0.gpu.0.gpu"] for r in rows] == ["", "", "99.0"]
    assert sender.paths == [tmp_path / "m.csv"]


def test_jsonl(tmp_path: Path) -> None:
    sender = JSONLinesSender(tmp_path / "m.jsonl")
    event: dict[str, Any] = {"cpu": float("nan"), "network": {"sent": 1, "recv": 2}}
    sender.publish(event, timestamp=T0)
    publish_all(sender)
    lines = [json.loads(line) for line in (tmp_path / "m.jsonl").read_text().splitlines()]
    assert lines[0] == {
        "time": "2027-01-15T08:00:00.250000Z",
        "cpu": None,
        "network": {"sent": 1, "recv": 2},
    }
    assert [line["rank0.network"]["sent"] for line in lines[1:]] == [100, 300, 700]
    assert lines[3]["rank0.gpu.0.gpu"] == 99.0
    assert private(tmp_path / "m.jsonl")
    flat = JSONLinesSender(tmp_path / "f.jsonl", flatten=True)
    publish_all(flat)
    first = json.loads((tmp_path / "f.jsonl").read_text().splitlines()[0])
    assert first["rank0.network.sent"] == 100.0


def test_parquet_rolling_schema_stable_files(tmp_path: Path) -> None:
    sender = ParquetSender(tmp_path / "m.parquet", rows_per_file=1, rows_per_group=1)
    publish_all(sender)
    assert [p.name for p in sender.paths] == [
        "m-00000.parquet",
        "m-00001.parquet",
        "m-00002.parquet",
    ]
    tables = [pq.read_table(p) for p in sender.paths]
    assert [t.num_rows for t in tables] == [1, 1, 1]
    assert tables[0].schema == tables[1].schema
    assert "rank0.gpu.0.gpu" in tables[2].column_names
    assert tables[1].column("rank0.network.sent").to_pylist() == [300.0]
    assert str(tables[0].schema.field("time").type) == "timestamp[us, tz=UTC]"
    assert tables[0].column("time").cast("int64").to_pylist() == [round(T0 * 1e6)]
    assert all(private(p) for p in sender.paths)

    grouped = ParquetSender(tmp_path / "g.parquet", rows_per_group=10)
    for i in range(25):
        grouped.publish({"cpu": float(i)}, timestamp=T0 + i)
    grouped.close()
    [path] = grouped.paths
    assert pq.ParquetFile(path).num_row_groups == 3
    assert pq.read_table(path).column("cpu").to_pylist() == [float(i) for i in range(25)]


def test_logging_sender(caplog: pytest.LogCaptureFixture) -> None:
    sender = LoggingSender("test.metrics", level="WARNING")
    with caplog.at_level(logging.INFO, logger="test.metrics"):
        publish_all(sender)
    records = [r for r in caplog.records if r.name == "test.metrics"]
    assert len(records) == 3 and all(r.levelno == logging.WARNING for r in records)
    assert records[0].getMessage() == (
        "metrics rank0.cpu=12.5 rank0.memory=40 rank0.network.sent=100 rank0.network.recv=200"
    )
    assert records[2].metrics["rank0.gpu.0.gpu"] == 99.0  # type: ignore[attr-defined]


# -- the real libraries, locally ---------------------------------------------------------------


def test_tensorboard_read_back_with_tensorboard(tmp_path: Path) -> None:
    from stroboscope.senders.tensorboard import TensorBoardSender
    from tensorboard.backend.event_processing import event_accumulator

    sender = TensorBoardSender(tmp_path / "tb")
    publish_all(sender)
    acc = event_accumulator.EventAccumulator(
        str(tmp_path / "tb"), size_guidance={event_accumulator.SCALARS: 0}
    )
    acc.Reload()
    assert "rank0.network.sent" in acc.Tags()["scalars"]
    cpu = acc.Scalars("rank0.cpu")
    assert [(e.step, e.value) for e in cpu] == [(0, 12.5), (1, 25.0), (2, 50.0)]
    assert cpu[1].wall_time == pytest.approx(T0 + 2)
    assert [e.value for e in acc.Scalars("rank0.gpu.0.gpu")] == [99.0]
    files = list((tmp_path / "tb").glob("events.out.tfevents.*"))
    assert len(files) == 1 and private(files[0])


def _wandb_records(path: Path) -> list[bytes]:
    """The records of a .wandb file: a 7-byte header (":W&B", magic, version), then LevelDB-style
    log records (crc32c, length, type) in 32 KiB blocks, long records split FIRST/MIDDLE/LAST."""
    data = path.read_bytes()
    assert data[:4] == b":W&B"
    block, pos, out, pending = 32768, 7, [], b""
    while pos + 7 <= len(data):
        left = block - pos % block
        if left < 7:  # a block's tail too short for a header is padding
            pos += left
            continue
        _crc, length, kind = struct.unpack_from("<IHB", data, pos)
        chunk = data[pos + 7 : pos + 7 + length]
        pos += 7 + length
        if kind == 1:  # FULL
            out.append(chunk)
        elif kind == 2:  # FIRST
            pending = chunk
        elif kind == 3:  # MIDDLE
            pending += chunk
        elif kind == 4:  # LAST
            out.append(pending + chunk)
    return out


def test_wandb_offline_run_read_back(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("WANDB_MODE", "offline")
    monkeypatch.setenv("WANDB_DIR", str(tmp_path))
    monkeypatch.setenv("WANDB_SILENT", "true")
    monkeypatch.setenv("WANDB_CONFIG_DIR", str(tmp_path / "config"))
    monkeypatch.setenv("WANDB_CACHE_DIR", str(tmp_path / "cache"))
    from stroboscope.senders.wandb import WandbSender
    from wandb.proto import wandb_internal_pb2

    sender = WandbSender(project="stroboscope-test", mode="offline", dir=str(tmp_path))
    publish_all(sender)
    [run_file] = list(tmp_path.glob("wandb/offline-run-*/run-*.wandb"))

    def read_history() -> list[dict[str, Any]]:
        out = []
        for raw in _wandb_records(run_file):
            record = wandb_internal_pb2.Record()  # type: ignore[attr-defined]
            record.ParseFromString(raw)
            if record.WhichOneof("record_type") == "history":
                out.append(
                    {
                        item.key or ".".join(item.nested_key): json.loads(item.value_json)
                        for item in record.history.item
                    }
                )
        return out

    # wandb's service process writes the run file on its own schedule, even after finish() has
    # returned on a loaded machine: wait (bounded) for the three records to land.
    deadline = time.monotonic() + 20
    history = read_history()
    while len(history) < 3 and time.monotonic() < deadline:
        time.sleep(0.2)
        history = read_history()
    assert [h["rank0.cpu"] for h in history] == [12.5, 25.0, 50.0]
    assert [h["rank0.network.recv"] for h in history] == [200, 500, 900]
    assert history[2]["rank0.gpu.0.gpu"] == 99.0


def test_mlflow_file_store_read_back(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # MLflow 3 keeps the file store only on request; it is the local store the issue asks for.
    monkeypatch.setenv("MLFLOW_ALLOW_FILE_STORE", "true")
    from mlflow.tracking import MlflowClient
    from stroboscope.senders.mlflow import MlflowSender

    uri = (tmp_path / "mlruns").as_uri()
    sender = MlflowSender(tracking_uri=uri, experiment_name="stroboscope", run_name="t")
    publish_all(sender)
    client = MlflowClient(tracking_uri=uri)
    history = client.get_metric_history(sender.run_id, "rank0.network.sent")
    assert [(m.step, m.value) for m in history] == [(0, 100.0), (1, 300.0), (2, 700.0)]
    assert history[1].timestamp == round((T0 + 2) * 1000)
    assert [m.value for m in client.get_metric_history(sender.run_id, "rank0.cpu")] == [
        12.5,
        25.0,
        50.0,
    ]
    assert client.get_run(sender.run_id).info.status == "FINISHED"


def test_prometheus_scraped_over_http() -> None:
    from prometheus_client.parser import text_string_to_metric_families
    from stroboscope.senders.prometheus import PrometheusSender

    sender = PrometheusSender(port=0)
    try:
        assert sender.addr == "127.0.0.1" and sender.port > 0
        for event in EVENTS:
            sender.publish(event)
        with urllib.request.urlopen(sender.url, timeout=5) as response:
            text = response.read().decode()
    finally:
        sender.close()
    values = {s.name: s.value for fam in text_string_to_metric_families(text) for s in fam.samples}
    assert values["stroboscope_rank0_cpu"] == 50.0
    assert values["stroboscope_rank0_network_sent"] == 700.0
    assert values["stroboscope_rank0_gpu_0_gpu"] == 99.0
    sender.close()  # closing twice is harmless
    with pytest.raises(OSError):
        urllib.request.urlopen(sender.url, timeout=1)


@pytest.mark.parametrize(
    ("module", "cls", "blocked", "extra"),
    [
        ("tensorboard", "TensorBoardSender", ["tensorboardX", "torch"], "tensorboard"),
        ("wandb", "WandbSender", ["wandb"], "wandb"),
        ("mlflow", "MlflowSender", ["mlflow"], "mlflow"),
        ("prometheus", "PrometheusSender", ["prometheus_client"], "prometheus"),
    ],
)
def test_missing_library_names_the_extra(
    module: str,
    cls: str,
    blocked: list[str],
    extra: str,
    monkeypatch: pytest.MonkeyPatch,
    tmp_path: Path,
) -> None:
    import importlib

    mod = importlib.import_module(f"stroboscope.senders.{module}")
    for name in blocked:
        monkeypatch.setitem(sys.modules, name, None)
    args = (tmp_path,) if module == "tensorboard" else ()
    with pytest.raises(ImportError, match=rf"pip install 'stroboscope\[{extra}\]'"):
        getattr(mod, cls)(*args)


# -- registry and plugins ----------------------------------------------------------------------


def test_load_builtin_sender(tmp_path: Path) -> None:
    sender = load_sender("csv", path=tmp_path / "x.csv")
    assert isinstance(sender, CSVSender)
    sender.close()
    assert set(BUILTIN_SENDERS) <= set(available_senders())
    with pytest.raises(ValueError, match=r"unknown sender 'nope'.*csv"):
        load_sender("nope")


@pytest.fixture
def plugins(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A distribution on sys.path with two sender entry points: one good, one broken."""
    (tmp_path / "strobo_test_plugin.py").write_text(
        "def make(scale=1.0):\n"
        "    seen = []\n"
        "    def send(event):\n"
        "        seen.append({k: v * scale for k, v in event.items()})\n"
        "    send.seen = seen\n"
        "    return send\n"
    )
    dist = tmp_path / "strobo_test_plugin-1.0.dist-info"
    dist.mkdir()
    (dist / "METADATA").write_text(
        "Metadata-Version: 2.1\nName: strobo-test-plugin\nVersion: 1.0\n"
    )
    (dist / "entry_points.txt").write_text(
        "[stroboscope.senders]\n"
        "scaled = strobo_test_plugin:make\n"
        "broken = strobo_test_missing_module:Sender\n"
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    return tmp_path


def test_plugin_entry_points(plugins: Path) -> None:
    senders = available_senders()
    assert senders["scaled"] == "strobo_test_plugin:make"
    assert senders["broken"] == "strobo_test_missing_module:Sender"
    sender = load_sender("scaled", scale=2.0)
    sender.publish({"cpu": 3.0})
    assert sender.func.seen == [{"cpu": 6.0}]  # type: ignore[attr-defined]
    with pytest.raises(ImportError, match=r"sender plugin 'broken'.*failed to load"):
        load_sender("broken")


def test_broken_plugin_leaves_the_others_working(plugins: Path) -> None:
    events: list[dict[str, Any]] = []
    with pytest.raises(ImportError):
        load_sender("broken")
    good = load_sender("scaled")
    fan = Fanout([good, events.append])
    fan.wait(fan.submit({"cpu": 1.0}), timeout=5)
    fan.close()
    assert events == [{"cpu": 1.0}]
    assert good.func.seen == [{"cpu": 1.0}]  # type: ignore[attr-defined]


# -- isolation ---------------------------------------------------------------------------------


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


# -- the command-line helpers --------------------------------------------------------------------


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


def test_record_publisher_windows(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import argparse
    import types

    from _fake_proc import PID, FakeProc
    from stroboscope import Sampler
    from stroboscope.cli import _publish
    from stroboscope.cli._publish import RecordPublisher, add_sender_arguments

    # The publisher's clock is a script and the sampler ticks deterministically on a recorded
    # /proc whose counters we advance: which window each row falls in, and so every published
    # value, is known by hand.
    clock = [1000.0]
    monkeypatch.setattr(_publish, "time", types.SimpleNamespace(monotonic=lambda: clock[0]))
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
    fake = FakeProc(tmp_path / "proc")
    sampler = Sampler(
        0.01, pid=PID, sources=["cpu", "network"], cpu_window=0, proc_root=str(fake.root)
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


def test_empty_events_write_no_rows(tmp_path: Path) -> None:
    # SystemMonitor.flush() before start() publishes {} as the originals do; files stay clean.
    csv_sender = CSVSender(tmp_path / "m.csv")
    parquet_sender = ParquetSender(tmp_path / "m.parquet")
    for sender in (csv_sender, parquet_sender):
        sender.publish({})
        publish_all(sender)
    assert csv_sender.paths[0] == tmp_path / "m.csv"
    with open(tmp_path / "m.csv", newline="") as f:
        assert len(list(csv.DictReader(f))) == 2  # the two events before the new key
    assert pq.read_table(parquet_sender.paths[0]).num_rows == 2


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
