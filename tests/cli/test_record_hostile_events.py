"""`record -- CMD` against a command that damages its own events: a FIFO among its events files
never hangs the end (SIGTERM still ends the run), a ring size no writer makes is refused before
anything runs, a drain that fails costs neither the rows nor the scopes, an end that fails says
how to recover, and a header damaged after a drain read it keeps the scopes drained."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pyarrow.parquet as pq
import pytest
from stroboscope.cli import main
from stroboscope.formats.provenance import from_schema
from stroboscope.formats.shared_events import EVENTS_CAPACITY_ENV
from stroboscope.formats.shared_events_drain import FileDrain
from stroboscope.recording import _finish

# Makes FIFOs where the drain and the end look (an events file, and the .drained file of its
# own events file), writes scopes, says so, and waits to be ended.
FIFOS = """
import os, time, stroboscope
d = os.environ["STROBOSCOPE_EVENTS_DIR"]
os.mkfifo(os.path.join(d, "1.py.sev"))
os.mkfifo(os.path.join(d + ".drained", f"{os.getpid()}.py.sev.drained"))
for i in range(10):
    with stroboscope.annotate("step"):
        pass
print("ready", flush=True)
time.sleep(120)
"""


def test_a_fifo_in_the_events_directory_never_hangs_the_end(tmp_path: Path) -> None:
    out = tmp_path / "run.parquet"
    proc = subprocess.Popen(
        [
            *(sys.executable, "-m", "stroboscope", "record", "-q", "--interval", "0.01"),
            *("-o", str(out), "--", sys.executable, "-c", FIFOS),
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert proc.stdout is not None
        assert proc.stdout.readline().strip() == "ready"
        time.sleep(1.5)  # a drain poll or more meets the FIFOs
        proc.send_signal(signal.SIGTERM)
        _, err = proc.communicate(timeout=90)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == 128 + signal.SIGTERM, err
    assert pq.read_metadata(out).num_rows > 0


@pytest.mark.parametrize("value", ["4294967296", "33554432", "3", "1", "2**20", "-4", ""])
def test_a_ring_size_no_writer_makes_is_refused_before_anything_runs(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    value: str,
) -> None:
    monkeypatch.setenv(EVENTS_CAPACITY_ENV, value)
    marker = tmp_path / "ran"
    out = tmp_path / "run.parquet"
    code = main(
        ["record", "-q", "-o", str(out), "--", sys.executable, "-c", f"open({str(marker)!r}, 'w')"]
    )
    err = capsys.readouterr().err
    assert code == 2
    assert EVENTS_CAPACITY_ENV in err and repr(value) in err and "[2, 2**24]" in err
    assert not marker.exists() and not out.exists()


SCOPES = """
import stroboscope
for i in range(50):
    with stroboscope.annotate("step"):
        pass
"""


def test_a_drain_that_fails_costs_neither_rows_nor_scopes(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    def fails(self: FileDrain) -> int:
        raise MemoryError("a header that claims too much")

    monkeypatch.setattr(FileDrain, "poll", fails)
    out = tmp_path / "run.parquet"
    code = main(["record", "-q", "-o", str(out), "--", sys.executable, "-c", SCOPES])
    captured = capsys.readouterr()
    assert code == 0, captured.err
    assert pq.read_metadata(out).num_rows > 0
    assert "scopes: 50 calls recorded" in captured.out  # read from the rings at the end


def test_an_end_that_fails_keeps_the_rows_and_says_how_to_recover(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    def fails(*args: object, **kwargs: object) -> None:
        raise MemoryError("the end ran out of memory")

    monkeypatch.setattr(_finish, "write_clean", fails)
    out = tmp_path / "run.parquet"
    spool = tmp_path / "run.spool"
    code = main(
        ["record", "-q", "--spool", str(spool), "-o", str(out), "--", sys.executable, "-c", "0"]
    )
    err = capsys.readouterr().err
    assert code == 2
    assert "stroboscope recover" in err and str(spool) in err and "MemoryError" in err
    assert spool.exists()  # the rows are there
    monkeypatch.undo()
    assert main(["recover", str(spool), "-o", str(out)]) == 0
    assert pq.read_metadata(out).num_rows > 0


# Writes 20 calls, waits until a drain kept them (its copy of the header is there), then
# scribbles over its own header.
DAMAGES = """
import glob, os, time, stroboscope
for i in range(20):
    with stroboscope.annotate("kept"):
        pass
d = os.environ["STROBOSCOPE_EVENTS_DIR"]
(path,) = glob.glob(os.path.join(d, "*.py.sev"))
deadline = time.monotonic() + 60
kept = os.path.join(d + ".drained", os.path.basename(path) + ".drained")
while not os.path.exists(kept) and time.monotonic() < deadline:
    time.sleep(0.05)
time.sleep(0.2)
with open(path, "r+b") as f:
    f.write(os.urandom(64))
"""


def test_scopes_drained_before_the_writer_damaged_its_header_are_kept(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "run.parquet"
    code = main(["record", "-q", "-o", str(out), "--", sys.executable, "-c", DAMAGES])
    captured = capsys.readouterr()
    assert code == 0, captured.err
    assert "scopes: 20 calls recorded" in captured.out, captured.out
    scopes = pq.read_table(tmp_path / "run.scopes.parquet")
    assert scopes.column("name").to_pylist() == ["kept"] * 20


# A file-size limit below an events file's size: the command's file cannot be made, as on a
# full disk.
UNMADE = """
import resource, signal, stroboscope
signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
resource.setrlimit(resource.RLIMIT_FSIZE, (1 << 20, 1 << 20))
for i in range(5):
    with stroboscope.annotate("lost"):
        pass
"""


def test_scopes_that_could_not_be_written_are_said_lost(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "run.parquet"
    code = main(["record", "-q", "-o", str(out), "--", sys.executable, "-c", UNMADE])
    captured = capsys.readouterr()
    assert code == 0, captured.err
    assert "1 process could not make its events file" in captured.out, captured.out
    prov = from_schema(pq.read_schema(out)) or {}
    assert prov["events"]["unmade"] == 1


# 200 calls, a wait until the drain keeps the file's records, then the command takes its events
# away: {how} (``d``: its events directory, ``path``: its own events file).
TAKES_AWAY = """
import glob, os, shutil, sys, time, stroboscope
for i in range(200):
    with stroboscope.annotate("drained"):
        pass
d = os.environ["STROBOSCOPE_EVENTS_DIR"]
(path,) = glob.glob(os.path.join(d, "*.py.sev"))
kept = os.path.join(d + ".drained", os.path.basename(path) + ".drained")
deadline = time.monotonic() + 60
while not os.path.exists(kept) and time.monotonic() < deadline:
    time.sleep(0.05)
print(d, flush=True)
{how}
"""


@pytest.mark.parametrize(
    "how",
    [
        "os.unlink(path)",
        "shutil.rmtree(d)",
        "shutil.rmtree(d); os.symlink(sys.argv[1], d)",
    ],
    ids=["file-unlinked", "directory-removed", "directory-replaced-by-a-link"],
)
def test_scopes_drained_before_the_command_took_its_events_away_are_kept(
    tmp_path: Path, capfd: pytest.CaptureFixture[str], how: str
) -> None:
    out, victim = tmp_path / "run.parquet", tmp_path / "victim"
    victim.mkdir()
    script = TAKES_AWAY.format(how=how)
    argv = ["record", "-q", "-o", str(out), "--", sys.executable, "-c", script, str(victim)]
    code = main(argv)
    captured = capfd.readouterr()
    assert code == 0, captured.err
    assert "scopes: 200 calls recorded" in captured.out, captured.out
    scopes = pq.read_table(tmp_path / "run.scopes.parquet")
    assert scopes.column("name").to_pylist() == ["drained"] * 200
    assert list(victim.iterdir()) == []  # nothing written through the link
    d = captured.out.splitlines()[0]
    assert not os.path.lexists(d) and not os.path.lexists(d + ".drained")  # all removed


# 100 calls, then the command removes the folder of record's -o: FILE cannot be written.
REMOVES_OUTPUT_DIR = """
import shutil, sys, stroboscope
for i in range(100):
    with stroboscope.annotate("kept for recover"):
        pass
shutil.rmtree(sys.argv[1])
"""


def test_an_end_that_cannot_write_keeps_the_commands_scopes_for_recover(
    tmp_path: Path, capfd: pytest.CaptureFixture[str]
) -> None:
    od = tmp_path / "od"
    od.mkdir()
    spool, out = tmp_path / "sp2.spool", tmp_path / "back.parquet"
    argv = ["record", "-q", "-o", str(od / "o.parquet"), "--spool", str(spool)]
    code = main([*argv, "--", sys.executable, "-c", REMOVES_OUTPUT_DIR, str(od)])
    err = capfd.readouterr().err
    assert code == 2 and "stroboscope recover" in err, err
    assert "scope events are kept" in err, err
    assert main(["recover", str(spool), "-o", str(out)]) == 0
    said = capfd.readouterr().out
    assert "recovered 100 scope calls" in said, said
    scopes = pq.read_table(tmp_path / "back.scopes.parquet")
    assert scopes.column("name").to_pylist() == ["kept for recover"] * 100
    assert "removed the command's events directory" in said  # and nothing left behind


# Three calls of its own, and a file at an events file's name that is none.
PLANTS_GARBAGE = """
import os, stroboscope
for i in range(3):
    with stroboscope.annotate("own"):
        pass
with open(os.path.join(os.environ["STROBOSCOPE_EVENTS_DIR"], "1.py.sev"), "wb") as f:
    f.write(os.urandom(100))
"""


def test_the_summary_says_which_events_files_were_damaged_or_skipped(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "run.parquet"
    code = main(["record", "-q", "-o", str(out), "--", sys.executable, "-c", PLANTS_GARBAGE])
    said = capsys.readouterr().out
    assert code == 0
    line = next(s for s in said.splitlines() if s.startswith("scopes:"))
    assert line.startswith("scopes: 3 calls recorded"), line
    assert "1 events file damaged or skipped (1.py.sev: no events header" in line, line
