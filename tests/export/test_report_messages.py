"""What ``report``, ``info`` and the writers say about odd paths: a symbolic link loop or a
dangling link is called that (not "no such file"), ``--png`` names what is there instead of a
directory, ``-o``/``--png`` are checked before the terminal report is printed, an empty path
is named (not a temporary file), and a file no read succeeds on is named."""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from stroboscope._base.files import open_regular
from stroboscope.cli import main
from stroboscope.export import write_csv, write_parquet


def _recording(tmp: Path) -> Path:
    table = pa.table(
        {
            "time": pa.array([1, 2, 3], pa.timestamp("ns", "UTC")),
            "mono_ns": pa.array([10, 20, 30], pa.int64()),
            "cpu.util_pct": [1.0, 2.0, 4.0],
        }
    )
    pq.write_table(table, tmp / "run.parquet")
    return tmp / "run.parquet"


def _loop(tmp: Path) -> str:
    (tmp / "a.parquet").symlink_to("b.parquet")
    (tmp / "b.parquet").symlink_to("a.parquet")
    return "a.parquet"


def _dangling(tmp: Path) -> str:
    (tmp / "a.parquet").symlink_to("gone.parquet")
    return "a.parquet"


LINKS: dict[str, tuple[Callable[[Path], str], str]] = {
    "loop": (_loop, "is a symbolic link loop"),
    "dangling": (_dangling, "is a dangling symbolic link (to 'gone.parquet')"),
}


@pytest.mark.parametrize(
    ("argv", "shown"),
    [
        (["report", "{}"], "'{}'"),
        (["info", "{}"], "{}"),
        (["report", "run.parquet", "--scopes", "{}"], "--scopes '{}'"),
    ],
)
@pytest.mark.parametrize("link", list(LINKS))
def test_a_link_that_leads_nowhere_is_called_what_it_is(
    argv: list[str],
    shown: str,
    link: str,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    monkeypatch.chdir(tmp_path)
    _recording(tmp_path)
    make, why = LINKS[link]
    name = make(tmp_path)
    assert main([a.format(name) for a in argv]) == 2
    err = capsys.readouterr().err
    assert err == f"stroboscope {argv[0]}: error: {shown.format(name)} {why}\n"


@pytest.mark.parametrize("link", list(LINKS))
def test_open_regular_says_what_the_link_is(link: str, tmp_path: Path) -> None:
    make, why = LINKS[link]
    name = make(tmp_path)
    with pytest.raises(ValueError) as info:
        open_regular(tmp_path / name, "recording")
    assert str(info.value) == f"recording {tmp_path / name} {why}"


def _fifo(path: Path) -> str:
    os.mkfifo(path)
    return "a FIFO"


def _file(path: Path) -> str:
    path.write_bytes(b"x")
    return "a regular file"


@pytest.mark.parametrize("make", [_fifo, _file])
def test_png_names_what_is_there_instead_of_a_directory_before_the_report(
    make: Callable[[Path], str],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    pytest.importorskip("matplotlib")
    monkeypatch.chdir(tmp_path)
    _recording(tmp_path)
    kind = make(tmp_path / "plots")
    assert main(["report", "run.parquet", "--png", "plots"]) == 2
    got = capsys.readouterr()
    assert got.err == f"stroboscope report: error: --png 'plots' is {kind}, not a directory\n"
    assert got.out == ""  # said first, not after the whole terminal report


@pytest.mark.parametrize(
    ("make", "why"),
    [
        (lambda p: p.mkdir(), "is a directory; give a file path"),
        (os.mkfifo, "is a FIFO, not a regular file: refusing to replace it"),
    ],
)
def test_output_is_checked_before_the_report(
    make: Callable[[Path], object],
    why: str,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    pytest.importorskip("matplotlib")
    monkeypatch.chdir(tmp_path)
    _recording(tmp_path)
    make(tmp_path / "out.html")
    assert main(["report", "run.parquet", "-o", "out.html"]) == 2
    got = capsys.readouterr()
    assert got.err == f"stroboscope report: error: -o 'out.html' {why}\n"
    assert got.out == ""


def test_an_output_in_a_missing_directory_is_said_before_the_report(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    pytest.importorskip("matplotlib")
    monkeypatch.chdir(tmp_path)
    _recording(tmp_path)
    assert main(["report", "run.parquet", "-o", "nodir/r.html"]) == 2
    got = capsys.readouterr()
    assert got.err == (
        f"stroboscope report: error: -o 'nodir/r.html': its directory "
        f"{str(tmp_path / 'nodir')!r} does not exist\n"
    )
    assert got.out == ""


@pytest.mark.parametrize("writer", [write_parquet, write_csv])
def test_an_empty_path_is_named_not_a_temporary_file(
    writer: Callable[[pa.Table, str], None], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    with pytest.raises(ValueError) as info:
        writer(pa.table({"a": [1]}), "")
    assert str(info.value) == "path is an empty path; give a non-empty path"
    assert os.listdir(tmp_path) == []


def test_a_file_no_read_succeeds_on_is_named(capsys: pytest.CaptureFixture[str]) -> None:
    if not os.path.exists("/proc/self/mem"):
        pytest.skip("no /proc/self/mem here")
    assert main(["report", "/proc/self/mem"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("stroboscope report: error: /proc/self/mem cannot be read: "), err
