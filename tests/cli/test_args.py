"""Bad option values of the command line: each is refused the argparse way (usage, then an error
naming the option, the value and what is accepted; exit code 2), before anything is made."""

from __future__ import annotations

import csv
from pathlib import Path

import pytest
from stroboscope.cli import main
from stroboscope.cli._publish import parse_sender_spec

SECONDS = "must be a positive finite number of seconds"

BAD_INPUTS = [
    # (arguments before -o, words the error must hold)
    (["record", "--duration", "nan"], ["--duration", "'nan'", SECONDS]),
    (["record", "--duration", "inf"], ["--duration", "'inf'", SECONDS]),
    (["record", "--duration", "-1"], ["--duration", "'-1'", SECONDS]),
    (["record", "--duration", "0"], ["--duration", "'0'", SECONDS]),
    (["record", "--duration", "soon"], ["--duration", "'soon'", SECONDS]),
    (
        ["record", "--duration", "1", "--publish-every", "nan"],
        ["--publish-every", "'nan'", SECONDS],
    ),
    (["record", "--duration", "1", "--publish-every", "0"], ["--publish-every", "'0'", SECONDS]),
    (
        ["record", "--duration", "1", "--sources", "cpu,cpu=0.02"],
        ["--sources", "'cpu' is listed twice", "'cpu,cpu=0.02'", "NAME or NAME=SECONDS"],
    ),
    (
        ["record", "--duration", "1", "--sources", "cpu=nan"],
        ["--sources cpu", "got float nan", SECONDS],
    ),
    (["record", "--duration", "1", "--sources", ","], ["--sources", "at least one source"]),
    (["record", "--duration", "1", "--interval", "0"], ["--interval", "0", "[0.0001, 3600]"]),
    (["record", "--duration", "1", "--interval", "fast"], ["--interval", "'fast'", "seconds"]),
    (["record", "--duration", "1", "--capacity", "1"], ["--capacity", "1", "[2, 1073741824]"]),
    (["record", "--duration", "1", "--pid", "-5"], ["--pid", "-5", "positive process id"]),
    (["record", "--duration", "1", "--pid", "x"], ["--pid", "'x'", "positive process id"]),
]


@pytest.mark.parametrize(("argv", "words"), BAD_INPUTS, ids=[" ".join(a) for a, _ in BAD_INPUTS])
def test_a_bad_option_is_refused_before_anything_is_made(
    argv: list[str], words: list[str], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main([*argv, "-o", str(tmp_path / "m.parquet")]) == 2
    err = capsys.readouterr().err
    assert err.startswith("usage: stroboscope record"), err
    assert "stroboscope record: error: " in err
    for word in words:
        assert word in err, (word, err)
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("pid", ["-5", "0", "seven"])
def test_info_refuses_a_bad_pid(pid: str, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["info", "--pid", pid]) == 2
    err = capsys.readouterr().err
    assert "stroboscope info: error: --pid" in err and pid in err
    assert "positive process id" in err


def test_a_sender_path_that_reads_as_a_number_stays_a_path(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    argv = ["record", "--interval", "0.005", "--duration", "0.3", "--publish-every", "0.05"]
    assert main([*argv, "--sender", "csv:path=1e3", "-o", "m.parquet"]) == 0
    with open(tmp_path / "1e3", newline="") as f:
        rows = list(csv.DictReader(f))
    assert rows and "cpu.util_pct" in rows[0]


def test_sender_values_follow_the_types_the_sender_declares() -> None:
    assert parse_sender_spec("csv:path=1e3,flush=false") == ("csv", {"path": "1e3", "flush": False})
    assert parse_sender_spec("prometheus:port=9464,addr=10.0") == (
        "prometheus",
        {"port": 9464, "addr": "10.0"},
    )
    assert parse_sender_spec("logging:level=20") == ("logging", {"level": 20})
    assert parse_sender_spec("logging:level=INFO") == ("logging", {"level": "INFO"})
    assert parse_sender_spec("jsonl:path=007") == ("jsonl", {"path": "007"})
    # A plugin's types are unknown here: the text reads as what it looks like.
    assert parse_sender_spec("someplugin:x=1e3,y=true,z=a") == (
        "someplugin",
        {"x": 1000.0, "y": True, "z": "a"},
    )
