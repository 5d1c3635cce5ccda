"""Crafted recordings and datasets: every reader (``report``, ``info``, the cross-rank report,
:func:`stroboscope.open_dataset`) refuses them with one line that names the file (or the
dataset directory) and what is wrong, and the CLI exits 2 with no traceback.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from stroboscope import open_dataset
from stroboscope.cli import main
from stroboscope.formats.provenance import MAX_DEPTH, loads

PROV = b"stroboscope.provenance"
MARKER = json.dumps({"format": "stroboscope-dataset", "layout": 1})


def _table(
    mono: pa.Array | None = None, time: pa.Array | None = None, prov: bytes | None = None
) -> pa.Table:
    table = pa.table(
        {
            "time": time if time is not None else pa.array([1, 2, 3], pa.timestamp("ns", "UTC")),
            "mono_ns": mono if mono is not None else pa.array([10, 20, 30], pa.int64()),
            "cpu.util_pct": [1.0, 2.0, 3.0],
        }
    )
    return table if prov is None else table.replace_schema_metadata({PROV: prov})


def _nested(levels: int) -> bytes:
    return b'{"a":' + b"[" * (levels - 1) + b"]" * (levels - 1) + b"}"


def _file(table: pa.Table) -> Callable[[Path], Path]:
    def make(tmp: Path) -> Path:
        pq.write_table(table, tmp / "run.parquet")
        return tmp / "run.parquet"

    return make


def _sidecar(text: bytes) -> Callable[[Path], Path]:
    def make(tmp: Path) -> Path:
        (tmp / "run.csv").write_text("time,mono_ns\n")
        (tmp / "run.csv.meta.json").write_bytes(text)
        return tmp / "run.csv"

    return make


def _dataset(partition: str, table: pa.Table | None = None) -> Callable[[Path], Path]:
    def make(tmp: Path) -> Path:
        root = tmp / "root"
        (root / partition).mkdir(parents=True)
        (root / "_stroboscope_dataset.json").write_text(MARKER)
        pq.write_table(_table() if table is None else table, root / partition / "part-1.parquet")
        return root

    return make


NULL_MONO = _table(mono=pa.array([None, None, None], pa.int64()))
NULL_TIME = _table(time=pa.array([None, None, None], pa.timestamp("ns", "UTC")))
NO_ROW = (
    "is not a readable recording: none of its 3 rows has both a mono_ns and a time (they are null)"
)
DEEP = f"schema metadata stroboscope.provenance is nested deeper than {MAX_DEPTH} levels"
CASES = [
    ("report-null-mono_ns", "report", _file(NULL_MONO), "run.parquet " + NO_ROW),
    ("report-null-time-html", "report-html", _file(NULL_TIME), "run.parquet " + NO_ROW),
    (
        "info-provenance-nested-100k",
        "info",
        _file(_table(prov=_nested(100_000))),
        "run.parquet: " + DEEP,
    ),
    (
        "info-provenance-nested-200",
        "info",
        _file(_table(prov=_nested(200))),
        "run.parquet: " + DEEP,
    ),
    (
        "info-provenance-not-utf8",
        "info",
        _file(_table(prov=b'{"a": "\xff\xfe"}')),
        "run.parquet: schema metadata stroboscope.provenance is not valid JSON: 'utf-8' codec",
    ),
    (
        "info-sidecar-nested-100k",
        "info",
        _sidecar(_nested(100_000)),
        f"run.csv.meta.json is nested deeper than {MAX_DEPTH} levels",
    ),
    (
        "report-dataset-rank-abc",
        "report",
        _dataset("job=j/host=h/rank=abc"),
        "directory 'job=j/host=h/rank=abc' is not a partition of the layout job=…/host=…/rank=…: "
        "rank must be a whole number >= 0, got 'abc'",
    ),
    (
        "report-dataset-host-not-utf8",
        "report",
        _dataset("job=j/host=%FF/rank=0"),
        "directory 'job=j/host=%FF' is not a partition of the layout job=…/host=…/rank=…: its "
        "host is not percent-encoded UTF-8",
    ),
    (
        "report-dataset-wrong-level",
        "report",
        _dataset("job=j/rank=0/host=h"),
        "directory 'job=j/rank=0' is not a partition of the layout job=…/host=…/rank=…: expected "
        "host=… at this level",
    ),
    (
        "report-dataset-mono_ns-strings",
        "report",
        _dataset("job=j/host=h/rank=0", _table(mono=pa.array(["a", "b", "c"]))),
        "a part of job=j host=h rank=0 is not a stroboscope recording: mono_ns must be integers",
    ),
]


@pytest.mark.parametrize(
    ("command", "make", "message"),
    [pytest.param(cmd, make, msg, id=name) for name, cmd, make, msg in CASES],
)
def test_a_crafted_input_exits_2_with_one_line_naming_it(
    command: str,
    make: Callable[[Path], Path],
    message: str,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.chdir(tmp_path)
    path = make(tmp_path)
    args = [command.split("-")[0], os.path.relpath(path, tmp_path)]
    if command == "report-html":
        args += ["-o", "out.html"]
    assert main(args) == 2
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1 and "Traceback" not in err, err
    assert err.startswith(f"stroboscope {args[0]}: error: "), err
    assert message in err, err
    assert not (tmp_path / "out.html").exists()


def test_open_dataset_names_the_directory_of_a_bad_partition(tmp_path: Path) -> None:
    root = _dataset("job=j/host=h/rank=-1")(tmp_path)
    with pytest.raises(ValueError) as info:
        open_dataset(root)
    assert str(info.value) == (
        f"dataset {str(root)!r}: directory 'job=j/host=h/rank=-1' is not a partition of the "
        f"layout job=…/host=…/rank=…: rank must be a whole number >= 0, got '-1'"
    )


def test_a_dataset_with_good_partitions_and_other_entries_still_opens(tmp_path: Path) -> None:
    root = _dataset("job=j%2Fk/host=h/rank=12")(tmp_path)
    (root / "notes").mkdir()  # no "=": not a partition, left out by discovery
    (root / "_scopes").mkdir()
    got = open_dataset(root).to_table()
    assert got.column("rank").to_pylist() == [12, 12, 12]
    assert got.column("job").to_pylist() == ["j/k"] * 3
    assert got.column("mono_ns").to_pylist() == [10, 20, 30]


@pytest.mark.parametrize(
    ("raw", "message"),
    [
        (_nested(MAX_DEPTH + 1), f"x is nested deeper than {MAX_DEPTH} levels"),
        (b"[1, 2]", "x is not a JSON object"),
        (b"{", "x is not valid JSON: "),
    ],
)
def test_the_provenance_loader_names_what_is_wrong(raw: bytes, message: str) -> None:
    with pytest.raises(ValueError) as info:
        loads(raw, "x")
    assert str(info.value).startswith(message)


def test_the_provenance_loader_takes_the_deepest_allowed() -> None:
    value = loads(_nested(MAX_DEPTH), "x")
    depth, item = 2, value["a"]  # the object, then its outermost list
    while item:
        depth, item = depth + 1, item[0]
    assert depth == MAX_DEPTH
