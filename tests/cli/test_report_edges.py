"""``stroboscope report`` at its edges: time bounds beyond what a recording can hold, and an
output path that cannot be written (the message names the user's path)."""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from stroboscope.cli import main

T0_NS = 1_800_000_000_000_000_000  # the first row's time (2027-01-15)


@pytest.fixture
def tiny(tmp_path: Path) -> Path:
    """50 rows 10 ms apart with one metric, as a recording's Parquet holds them."""
    n = 50
    table = pa.table(
        {
            "time": pa.array([T0_NS + i * 10_000_000 for i in range(n)], pa.timestamp("ns", "UTC")),
            "mono_ns": pa.array([i * 10_000_000 for i in range(n)], pa.int64()),
            "cpu.util_pct": pa.array([float(i) for i in range(n)]),
        }
    )
    path = tmp_path / "tiny.parquet"
    pq.write_table(table, path)
    return path


@pytest.mark.parametrize(
    ("option", "text", "said"),
    [
        ("--from", "1e400", "is inf s after the run's start"),
        ("--from", "1e308m", "is inf s after the run's start"),
        ("--from", "100000000000000000000000h", "is 3.6e+26 s after the run's start"),
        ("--to", "1e400", "is inf s after the run's start"),
        ("--to", "1000000001", "is 1e+09 s after the run's start"),
        ("--to", "9999-12-31T00:00:00Z", "is outside the times a recording holds"),
    ],
)
def test_a_time_beyond_any_recording_is_refused_naming_the_option_and_the_range(
    tiny: Path, capsys: pytest.CaptureFixture[str], option: str, text: str, said: str
) -> None:
    assert main(["report", str(tiny), option, text]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"stroboscope report: error: {option} {text!r} {said}"), err
    assert ("1,000,000,000 s" in err) or ("between 1678 and 2261" in err), err
    assert "Traceback" not in err


def test_the_longest_offset_accepted_is_the_range_the_message_gives(
    tiny: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["report", str(tiny), "--from", "0", "--to", "1000000000"]) == 0
    assert "cpu.util_pct" in capsys.readouterr().out


def test_an_unwritable_output_is_named_as_the_user_gave_it(
    tiny: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "nonexistent" / "x.html"
    assert main(["report", str(tiny), "-o", str(out)]) == 2
    err = capsys.readouterr().err
    # checked before the report is built: the path as given, and which directory is missing
    assert err.strip().endswith(
        f"-o {str(out)!r}: its directory {str(out.parent)!r} does not exist"
    ), err
    assert ".tmp" not in err and ".x.html." not in err
    assert sorted(p.name for p in tmp_path.iterdir()) == ["tiny.parquet"]


def test_an_output_that_is_an_input_is_refused_and_the_input_kept(
    tiny: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """-o naming the recording read, its scope table, or the --scopes file (also through a
    link or a relative part) would replace what the report reads: refused, nothing written."""
    scopes = tmp_path / "tiny.scopes.parquet"
    scopes.write_bytes(b"kept")
    given = tmp_path / "given.parquet"
    given.write_bytes(b"kept too")
    link = tmp_path / "link"
    link.symlink_to(tmp_path, target_is_directory=True)
    before = tiny.read_bytes()
    for out, extra, words in (
        (tiny, [], f"is the input {str(tiny)!r}"),
        (tmp_path / "x" / ".." / "tiny.parquet", [], "is the input"),
        (link / "tiny.parquet", [], "is the input"),
        (scopes, [], f"is the scope intervals of the input {str(tiny)!r}"),
        (given, ["--scopes", str(given)], f"is the input {str(given)!r}"),
    ):
        (tmp_path / "x").mkdir(exist_ok=True)
        assert main(["report", str(tiny), *extra, "-o", str(out)]) == 2
        err = capsys.readouterr().err
        assert words in err and "give another path for the report" in err, err
    assert tiny.read_bytes() == before
    assert scopes.read_bytes() == b"kept" and given.read_bytes() == b"kept too"


def test_a_csv_recording_is_named_as_csv(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """record writes CSV too; report reads Parquet: the message says which, and what to do."""
    out = tmp_path / "r.csv"
    assert main(["record", "-q", "-o", str(out), "--duration", "0.05"]) == 0
    capsys.readouterr()
    assert main(["report", str(out)]) == 2
    err = capsys.readouterr().err
    assert f"{out} is a CSV file: report reads Parquet recordings and spools" in err
    assert "record with -o RUN.parquet" in err and "not a recording" not in err


@pytest.mark.parametrize("value", ["a,b", "3,5"])
def test_straggler_on_a_recording_is_refused_and_its_value_checked(
    tiny: Path, capsys: pytest.CaptureFixture[str], value: str
) -> None:
    assert main(["report", str(tiny), "--straggler", value]) == 2
    err = capsys.readouterr().err
    if value == "a,b":  # the value is checked first, as for a dataset
        assert "--straggler 'a,b': give K,PCT such as 3,5" in err, err
    else:
        assert "--straggler: used by the report of a dataset only" in err, err
