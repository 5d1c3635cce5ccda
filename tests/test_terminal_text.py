"""Text from files and data printed to a terminal with its control characters escaped: a host,
command line, job or file name holding ESC sequences or a newline cannot clear the screen,
retitle the window or forge a line of `stroboscope info`, `report` or an error message."""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import pyarrow as pa
import pytest
import test_cluster_report as ranks_fixture
from stroboscope.cli import main
from stroboscope.formats.writers import write_parquet
from stroboscope.sampling._provenance import attach

ESC_HOST = "\x1b[2J\x1b]0;pwn\x07evil"  # clear the screen, set the window title
FORGED = "FAKE: line"
CMDLINE = ["python", f"\x1b[31mred\n{FORGED}"]


def _assert_inert(out: str, shown: list[str]) -> None:
    """No raw control character but the line ends, no line forged, the escapes shown."""
    assert not [c for c in out.replace("\n", "") if not c.isprintable()], repr(out)
    for line in out.splitlines():
        assert not line.startswith((FORGED, "# x")), repr(line)
    for text in shown:
        assert text in out, (text, out)


def test_info_escapes_the_provenance(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    mono = np.arange(5, dtype=np.int64) * 10_000_000
    table = pa.table({"mono_ns": mono, "cpu.util_pct": np.linspace(1.0, 5.0, 5)})
    path = tmp_path / "run.parquet"
    write_parquet(attach(table, {"host": ESC_HOST, "cmdline": CMDLINE, "pid": 7}), path)
    assert main(["info", str(path)]) == 0
    out = capsys.readouterr().out
    _assert_inert(out, ["\\x1b[2J\\x1b]0;pwn\\x07evil", "\\x1b[31mred\\nFAKE: line"])


def test_the_cluster_report_escapes_hosts_and_jobs(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    for table in (ranks_fixture.MONO0, ranks_fixture.ANCHOR, ranks_fixture.SYNC):
        monkeypatch.setitem(table, ESC_HOST, table["alpha"])
    monkeypatch.setitem(ranks_fixture.DELAY, ESC_HOST, 0)
    monkeypatch.setitem(ranks_fixture.HOST, 1, ESC_HOST)
    # the host's clock unsynchronised: a note names it
    syncs = {ESC_HOST: ranks_fixture._sync(ESC_HOST, synchronized=False)}
    root = ranks_fixture.make_dataset(tmp_path / "ds", syncs, job="j\n# x")
    assert any("%1B%5B2J" in name for _, dirs, _ in os.walk(root) for name in dirs)
    assert main(["report", str(root)]) == 0
    out = capsys.readouterr().out
    notes = out[out.index("\nnotes:") :]
    assert "host \\x1b[2J\\x1b]0;pwn\\x07evil: realtime clock UNSYNCHRONISED" in notes, notes
    _assert_inert(out, ["job j\\n# x"])


def test_error_messages_escape_the_names_they_quote(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    fifo = tmp_path / f"{ESC_HOST}\n# x.parquet"
    os.mkfifo(fifo)
    assert main(["report", str(fifo)]) == 2
    err = capsys.readouterr().err
    assert err.startswith("stroboscope report: error: ") and err.count("\n") == 1, err
    _assert_inert(err, ["\\x1b[2J\\x1b]0;pwn\\x07evil\\n# x.parquet"])


def test_the_report_of_a_recording_escapes_its_name_and_provenance(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    mono = np.arange(5, dtype=np.int64) * 10_000_000
    time = pa.array(mono + 1_790_000_000_000_000_000, pa.timestamp("ns", tz="UTC"))
    table = pa.table({"time": time, "mono_ns": mono, "cpu.util_pct": np.linspace(1.0, 5.0, 5)})
    path = tmp_path / f"{ESC_HOST}\n# x.parquet"
    gpus = {"reason": f"{ESC_HOST}\n{FORGED}", "devices": []}
    prov = {"host": ESC_HOST, "missing": [f"pid {ESC_HOST}\n{FORGED}"], "gpus": gpus}
    write_parquet(attach(table, prov), path)
    assert main(["report", str(path)]) == 0
    out = capsys.readouterr().out
    _assert_inert(out, ["\\x1b[2J\\x1b]0;pwn\\x07evil\\n# x"])
