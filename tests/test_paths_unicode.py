"""File names that are not UTF-8 and strings that are no file name.

A Linux file name is bytes; Python hands an undecodable byte to us as a lone surrogate
``'\\udcff'`` (``os.fsdecode``). Such a path must work, also where it goes to the C++ side
(passed as ``os.fsencode`` bytes: it was a pybind "incompatible arguments" error). A lone
surrogate that stands for no byte (``'\\ud800'``) is refused by :func:`check_path`, naming the
argument (it was a UnicodeEncodeError naming nothing, or accepted and failing later).
"""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from _fake_proc import DATA, PID, FakeProc
from stroboscope import Sampler as RecordingSampler
from stroboscope._base.checks import check_path
from stroboscope._base.identity import Identity
from stroboscope.cli import main
from stroboscope.compat.zeus import ZeusMonitor
from stroboscope.export import write_csv, write_parquet
from stroboscope.export.traces import write_chrome_trace
from stroboscope.formats.dataset import write_part
from stroboscope.recording.spool import recover
from stroboscope.sampling import CoreSampler as Sampler
from stroboscope.senders import CSVSender, JSONLinesSender

BAD = "run\ud800.parquet"
UNDECODABLE = os.fsdecode(b"run-\xff")  # 'run-\udcff': a name that is not UTF-8


def _table() -> pa.Table:
    return pa.table(
        {
            "time": pa.array([1_700_000_000_000_000_000], pa.timestamp("ns", "UTC")),
            "mono_ns": pa.array([5_000_000_000], pa.int64()),
            "cpu.util_pct": [1.0],
        }
    )


CALLS: dict[str, tuple[str, Callable[[str], object]]] = {
    "Sampler(proc_root)": ("proc_root", lambda p: Sampler(0.01, proc_root=p)),
    "Sampler(sys_root)": ("sys_root", lambda p: Sampler(0.01, sys_root=p)),
    "Sampler(spool)": ("spool", lambda p: RecordingSampler(0.01, spool=p)),
    "Sampler(dataset)": ("dataset", lambda p: RecordingSampler(0.01, dataset=p)),
    "write_parquet": ("path", lambda p: write_parquet(_table(), p)),
    "write_csv": ("path", lambda p: write_csv(_table(), p)),
    "write_chrome_trace": ("path", lambda p: write_chrome_trace(p, _table(), _table())),
    "JSONLinesSender": ("path", lambda p: JSONLinesSender(p)),
    "CSVSender": ("path", lambda p: CSVSender(p)),
    "ZeusMonitor(log_file)": ("log_file", lambda p: ZeusMonitor(log_file=p)),
    "recover": ("path", lambda p: recover(p)),
    "write_part(root)": (
        "dataset",  # the root is checked where every reader of a dataset checks it
        lambda p: write_part(_table(), p, identity=Identity(host="h"), name="part-1.parquet"),
    ),
}


@pytest.mark.parametrize("call", list(CALLS))
def test_a_lone_surrogate_that_is_no_byte_is_refused_naming_the_argument(
    call: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    name, make = CALLS[call]
    with pytest.raises(ValueError) as info:
        make(BAD)
    assert str(info.value).startswith(
        f"{name} {BAD!r} holds a lone surrogate ('\\ud800' at index 3) that stands for no byte "
        "of a file name"
    ), str(info.value)
    assert os.listdir(tmp_path) == []  # nothing created


def test_check_path_takes_an_undecodable_byte() -> None:
    assert check_path("path", UNDECODABLE) == UNDECODABLE


def test_writers_write_a_file_whose_name_is_not_utf8(tmp_path: Path) -> None:
    out = tmp_path / (UNDECODABLE + ".parquet")
    write_parquet(_table(), out)
    write_csv(_table(), tmp_path / (UNDECODABLE + ".csv"))
    assert sorted(os.listdir(os.fsencode(tmp_path))) == [b"run-\xff.csv", b"run-\xff.parquet"]
    with open(out, "rb") as f:
        assert pq.read_table(f).column("cpu.util_pct").to_pylist() == [1.0]


def test_the_sources_read_a_proc_root_whose_name_is_not_utf8(tmp_path: Path) -> None:
    fake = FakeProc(tmp_path / UNDECODABLE)
    total_kb = next(
        int(line.split()[1])
        for line in (fake.root / "meminfo").read_text().splitlines()
        if line.startswith("MemTotal:")
    )
    s = Sampler(
        0.01, pid=PID, sources=["memory"], proc_root=fake.root, sys_root=DATA / "sys" / "basic"
    )
    s.tick_now(1)
    assert s.snapshot().to_arrow().column("mem.total_bytes").to_pylist() == [total_kb * 1024]


def test_a_spool_whose_name_is_not_utf8_is_made_where_asked(tmp_path: Path) -> None:
    spool = tmp_path / (UNDECODABLE + ".spool")
    s = RecordingSampler(0.01, sources=["memory"], spool=spool)
    s.tick_now(1)
    s.close()
    assert os.path.exists(os.fsencode(spool))
    assert recover(spool).to_arrow().num_rows >= 1


def test_record_writes_to_a_name_that_is_not_utf8(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.chdir(tmp_path)
    out = UNDECODABLE + ".parquet"
    assert main(["record", "-o", out, "--duration", "0.2", "--interval", "0.01"]) == 0
    capsys.readouterr()
    with open(out, "rb") as f:
        rows = pq.read_table(f).num_rows
    assert rows >= 2  # 0.2 s at 10 ms, however loaded the machine is
