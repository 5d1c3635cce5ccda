"""The stroboscope command: record to Parquet/CSV (wrapping a command or not), info."""

from __future__ import annotations

import csv
import os
import re
import stat
import subprocess
import sys
from pathlib import Path

import pyarrow.parquet as pq
import pytest
from stroboscope.cli import main


def test_record_parquet_for_a_duration(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "m.parquet"
    assert main(["record", "--interval", "0.002", "--duration", "0.6", "-o", str(out)]) == 0
    table = pq.read_table(out)
    assert stat.S_IMODE(os.stat(out).st_mode) == 0o600
    text = capsys.readouterr().out
    # Bounded by what the recorder reports, not by how many ticks a loaded machine allowed.
    got = re.search(r"recorded (\d+) rows x \d+ columns over ([\d.]+) (m?s) \(first", text)
    taken = re.search(r"sampled for ([\d.]+) (m?s), ticks taken (\d+)", text)
    assert got and taken, text
    assert table.num_rows == int(got.group(1)) == int(taken.group(3)) >= 1
    sampled = float(taken.group(1)) * (1e-3 if taken.group(2) == "ms" else 1)
    assert sampled >= 0.6  # it recorded for the whole --duration
    # "over" is the span of the rows written (first to last), to its 3 significant digits
    span = float(got.group(2)) * (1e-3 if got.group(3) == "ms" else 1)
    mono = table.column("mono_ns").to_pylist()
    assert mono == sorted(mono) and span == pytest.approx((mono[-1] - mono[0]) / 1e9, rel=5e-3)
    assert "mem.util_pct" in text and "column" in text and "mean" in text


def test_record_wraps_a_command_and_returns_its_exit_code(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Every tick the sampler reports taken is a row of the output (however few a loaded
    machine allows), and the rows hold the command's RSS, not ours."""
    out = tmp_path / "m.csv"
    code = main(
        [
            "record",
            "--interval",
            "0.005",
            "-o",
            str(out),
            "--",
            sys.executable,
            "-c",
            "import time, sys; time.sleep(0.5); sys.exit(7)",
        ]
    )
    assert code == 7
    with open(out, newline="") as f:
        rows = list(csv.DictReader(f))
    text = capsys.readouterr().out
    recorded = re.search(r"recorded (\d+) rows", text)
    taken = re.search(r"ticks taken (\d+), missed (\d+)", text)
    assert recorded and taken, text
    assert len(rows) == int(recorded.group(1)) == int(taken.group(1))
    assert "rows lost 0" in text
    rss = max(int(r["proc.rss_bytes"]) for r in rows if r["proc.rss_bytes"])
    with open("/proc/self/statm") as f:
        ours = int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    assert 1 << 20 < rss < ours  # the child's RSS (a small Python), not ours (pytest, Arrow)


def test_record_rejects_bad_input(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert (
        main(["record", "--interval", "0", "--duration", "1", "-o", str(tmp_path / "a.parquet")])
        == 2
    )
    assert "interval" in capsys.readouterr().err
    assert (
        main(["record", "--duration", "0.1", "--sources", "bogus", "-o", str(tmp_path / "a.csv")])
        == 2
    )
    assert "unknown source 'bogus'" in capsys.readouterr().err
    assert main(["record", "--duration", "0.1", "-o", str(tmp_path / "a.txt")]) == 2
    assert ".parquet" in capsys.readouterr().err


def test_info_lists_sources(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["info"]) == 0
    text = capsys.readouterr().out
    for name in ("cpu", "memory", "network", "disk", "diskio", "process", "pressure"):
        assert f"  {name} " in text


def test_console_script_runs() -> None:
    out = subprocess.run(
        [sys.executable, "-m", "stroboscope", "info"], capture_output=True, text=True, timeout=60
    )
    assert out.returncode == 0 and "sources:" in out.stdout


def test_record_leaves_no_spool_after_a_clean_run(tmp_path: Path) -> None:
    out = tmp_path / "m.parquet"
    assert main(["record", "--interval", "0.005", "--duration", "0.3", "-o", str(out)]) == 0
    assert sorted(p.name for p in tmp_path.iterdir()) == ["m.parquet"]
    keep = tmp_path / "k.parquet"
    assert (
        main(
            ["record", "--interval", "0.005", "--duration", "0.3", "--keep-spool", "-o", str(keep)]
        )
        == 0
    )
    import stroboscope

    assert len(stroboscope.recover(tmp_path / "k.parquet.spool")) == pq.read_table(keep).num_rows


def test_killed_record_still_writes_its_output(tmp_path: Path) -> None:
    """SIGKILL once the spool holds 500 rows (as the spool itself says, however long a loaded
    machine takes): the watchdog writes every row of the spool to the output (--keep-spool keeps
    the spool to compare with)."""
    import signal
    import time

    import stroboscope

    out = tmp_path / "killed.csv"
    spool = tmp_path / "killed.csv.spool"
    marker = tmp_path / "running"
    proc = subprocess.Popen(
        [
            *(sys.executable, "-m", "stroboscope", "record", "--interval", "0.001", "--keep-spool"),
            *("-o", str(out), "--", sys.executable, "-c"),
            f"import time; open({str(marker)!r}, 'w'); time.sleep(120)",
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        deadline = time.monotonic() + 60
        # The command runs once sampling (and the watchdog) started.
        while not marker.exists() or len(stroboscope.recover(spool)) < 500:
            assert proc.poll() is None and time.monotonic() < deadline
            time.sleep(0.05)
        proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    expected = len(stroboscope.recover(spool))  # the recorder is dead: the spool is final
    assert expected >= 500
    rows: list[dict[str, str]] = []
    deadline = time.monotonic() + 60
    while len(rows) != expected:  # the watchdog may still be writing it
        assert time.monotonic() < deadline, f"the watchdog wrote {len(rows)} of {expected} rows"
        time.sleep(0.1)
        if out.exists():
            with open(out, newline="") as f:
                rows = list(csv.DictReader(f))
    assert stat.S_IMODE(os.stat(out).st_mode) == 0o600


def test_recover_command(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from stroboscope import Sampler

    spool = tmp_path / "s.spool"
    s = Sampler(0.01, sources=["memory"], spool=spool, capacity=1024, segment_seconds=1)
    s.tick_now(25)
    out = tmp_path / "s.csv"
    assert main(["recover", str(spool), "-o", str(out)]) == 0
    assert "recovered 25 rows" in capsys.readouterr().out
    with open(out, newline="") as f:
        assert len(list(csv.DictReader(f))) == 25
    bad = tmp_path / "bad.spool"
    bad.write_bytes(b"")
    assert main(["recover", str(bad), "-o", str(tmp_path / "b.csv")]) == 2
    assert "is empty" in capsys.readouterr().err


def test_record_reports_failed_segment_writes_and_keeps_every_row(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    from _segment_faults import failing_writes

    failing_writes(monkeypatch, 1000)  # every segment write hits a full disk
    out = tmp_path / "m.parquet"
    # A ring of 0.64 s: its writer tries a segment every 0.16 s (a run the ring holds whole
    # writes none: its rows go from the ring to FILE).
    args = ["--interval", "0.01", "--capacity", "64", "--duration", "0.3", "-o", str(out)]
    assert main(["record", *args]) == 0
    printed = capsys.readouterr().out
    assert "segment writes failed" in printed and "No space left on device" in printed
    recorded = int(re.search(r"recorded (\d+) rows", printed).group(1))  # type: ignore[union-attr]
    assert recorded >= 1 and pq.read_table(out).num_rows == recorded  # from the spool


def test_recover_of_a_spool_still_written_says_so(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A look at a run still going is allowed, and said to be only the rows so far."""
    from stroboscope import Sampler

    spool = tmp_path / "live.spool"
    s = Sampler(0.01, sources=["memory"], spool=spool, capacity=1024, segment_seconds=1)
    try:
        s.tick_now(4)
        out = tmp_path / "live.parquet"
        assert main(["recover", str(spool), "-o", str(out)]) == 0
        got = capsys.readouterr()
        said = f"{spool} is still being written (pid {os.getpid()}): these are its rows so far"
        assert said in got.err and "recovered 4 rows" in got.out
    finally:
        s.close()
