"""A recording whose provenance has an interpreted field of the wrong type (a hand-edited or
foreign file): ``info``, ``info --json`` and ``report`` show that field as unreadable, naming
the file and the key, and show everything else; nothing crashes."""

from __future__ import annotations

import json
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from stroboscope.cli import main
from stroboscope.formats.provenance import unreadable

GOOD = {
    "format": 1,
    "host": "testhost",
    "pid": 4242,
    "cmdline": ["python", "train.py"],
    "interval_s": 0.001,
    "clock": {"anchor_ns": 1, "anchor_uncertainty_ns": 17, "clock": "CLOCK_MONOTONIC"},
    "clock_sync": {"synchronised": True},
    "sources": [{"name": "cpu", "every": 4, "interval_s": 0.004, "interface": "/proc/stat"}],
    "gpus": {"driver_version": "550.54.15", "devices": [], "reason": None},
    "missing": ["cmdline of the monitored process"],
}
FIELDS = ["clock", "clock_sync", "gpus", "sources", "missing", "cmdline", "interval_s"]
BAD = {  # name: (value, how a message shows it)
    "str": ("x", "str 'x'"),
    "nested-list": ([[[]]], "list [[[]]]"),
    "huge-negative": (-1e308, "float -1e+308"),
    "number-list": ([1, 2], "list [1, 2]"),
}


def _recording(tmp: Path, key: str, value: object) -> Path:
    prov = dict(GOOD, **{key: value})
    table = pa.table(
        {
            "time": pa.array([1, 2, 3], pa.timestamp("ns", "UTC")),
            "mono_ns": pa.array([10, 20, 30], pa.int64()),
            "cpu.util_pct": [1.0, 2.0, 4.0],
        }
    ).replace_schema_metadata({b"stroboscope.provenance": json.dumps(prov).encode()})
    path = tmp / "run.parquet"
    pq.write_table(table, path)
    return path


CASES = [
    pytest.param(key, bad, shown, id=f"{key}-{name}")
    for key in FIELDS
    for name, (bad, shown) in BAD.items()
    # a number is the right type for interval_s (whatever its value), a list of numbers the
    # wrong one only where a list of strings or objects is expected
    if not (key == "interval_s" and name == "huge-negative")
    and not (name == "number-list" and key not in ("missing", "cmdline", "sources"))
]


@pytest.mark.parametrize(("key", "bad", "shown"), CASES)
def test_info_shows_a_mistyped_field_as_unreadable(
    key: str, bad: object, shown: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = _recording(tmp_path, key, bad)
    assert main(["info", str(path)]) == 0
    got = capsys.readouterr()
    assert "Traceback" not in got.err
    note = f"stroboscope info: note: {path}: provenance key {key!r} is unreadable (expected "
    assert got.err.startswith(note), got.err
    line = next(x for x in got.out.splitlines() if x.startswith(f"{key} (unreadable):"))
    assert line.endswith(f", got {shown}"), line
    assert f", got {shown})" in got.err
    assert "host:                 testhost" in got.out  # the rest is still shown


@pytest.mark.parametrize(("key", "bad", "shown"), CASES)
def test_info_json_prints_the_provenance_as_stored_and_notes_the_field(
    key: str, bad: object, shown: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = _recording(tmp_path, key, bad)
    assert main(["info", "--json", str(path)]) == 0
    got = capsys.readouterr()
    assert json.loads(got.out) == dict(GOOD, **{key: bad})
    assert f"{path}: provenance key {key!r} is unreadable" in got.err


@pytest.mark.parametrize(("key", "bad", "shown"), CASES)
def test_report_lists_a_mistyped_field_as_not_available(
    key: str, bad: object, shown: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = _recording(tmp_path, key, bad)
    assert main(["report", str(path)]) == 0
    got = capsys.readouterr()
    assert f"== run  ({path})" in got.out
    section = got.out.split("\nnot available:\n", 1)[1]
    assert f"provenance: key {key!r} unreadable (expected " in section
    assert f", got {shown})" in section


@pytest.mark.parametrize(
    ("key", "bad", "why"),
    [
        ("clock", "x", "expected an object, got str 'x'"),
        ("interval_s", [[[]]], "expected a number of seconds, got list [[[]]]"),
        ("interval_s", True, "expected a number of seconds, got bool True"),
        ("missing", -1e308, "expected a list of strings, got float -1e+308"),
        ("missing", ["a", 1], "expected a list of strings, got list ['a', 1]"),
        (
            "sources",
            [{"name": "cpu"}],
            "expected a list of objects with a name, every and interval_s, got list "
            "[{'name': 'cpu'}]",
        ),
        (
            "gpus",
            {"devices": [{"name": "x"}]},
            "expected an object whose devices are objects with a label and an index, got dict "
            "{'devices': [{'name': 'x'}]}",
        ),
    ],
)
def test_unreadable_names_the_expected_type_and_the_value(key: str, bad: object, why: str) -> None:
    assert unreadable(dict(GOOD, **{key: bad})) == {key: why}


def test_a_well_typed_provenance_has_nothing_unreadable() -> None:
    assert unreadable(GOOD) == {}
    assert unreadable({k: None for k in FIELDS}) == {}  # not known is not wrong


@pytest.mark.parametrize("locale", ["C", "C.UTF-8"])
def test_info_prints_a_lone_surrogate_escaped_in_any_locale(locale: str, tmp_path: Path) -> None:
    import os
    import subprocess
    import sys

    table = pa.table({"time": pa.array([1], pa.timestamp("ns", "UTC")), "mono_ns": [10]})
    meta = {b"stroboscope.provenance": b'{"host": "a\\ud800b"}'}
    pq.write_table(table.replace_schema_metadata(meta), tmp_path / "run.parquet")
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PYTHONIO", "LC_", "LANG"))}
    env.update(LC_ALL=locale, PYTHONPATH=os.pathsep.join(sys.path))
    got = subprocess.run(
        [sys.executable, "-m", "stroboscope", "info", str(tmp_path / "run.parquet")],
        capture_output=True,
        env=env,
        timeout=120,
        check=False,
    )
    assert got.returncode == 0, got.stderr
    assert b"host:                 a\\ud800b\n" in got.stdout


def test_info_shows_gpus_whose_devices_are_not_known(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = _recording(tmp_path, "gpus", {"driver_version": "550", "devices": None})
    assert main(["info", str(path)]) == 0
    got = capsys.readouterr()
    assert "gpus:                 driver 550\n" in got.out
    assert got.err == ""  # devices: null is "not known", not a wrong type


@pytest.mark.parametrize("key", FIELDS)
def test_info_shows_a_field_that_is_null_as_not_known(
    key: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = _recording(tmp_path, key, None)  # GOOD has no rank: "not set" looks in missing
    assert main(["info", str(path)]) == 0
    got = capsys.readouterr()
    assert got.err == ""
    assert "host:                 testhost" in got.out
