"""The built-in file and logging senders, the plugin registry, and empty events that write no rows.

Split along the data flow: the senders against their real libraries are in
test_senders_libraries.py, the isolation of senders from each other and from sampling in
test_senders_isolation.py, and the command line's sender options and record publisher in
test_senders_cli.py. The events, their helpers and the .wandb reader stay here: other test
files import them.
"""

from __future__ import annotations

import csv
import json
import logging
import stat
import struct
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq
import pytest
from stroboscope.senders import (
    BUILTIN_SENDERS,
    AbstractBackendSender,
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
