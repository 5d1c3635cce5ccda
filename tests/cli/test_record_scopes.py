"""`record -- CMD` and the scopes of the command: the events directory and NVTX library in the
command's environment, the intervals read at the end (a scripted reader here: the command
writes the table it wants read into the directory), written beside FILE and per rank in a
dataset, and the directory removed whatever the end."""

from __future__ import annotations

import json
import os
import stat
import sys
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from _scope_tables import intervals
from stroboscope.cli import main
from stroboscope.export.cluster_report import build_cluster_report
from stroboscope.formats import shared_events_drain
from stroboscope.formats.provenance import from_schema
from stroboscope.formats.shared_events import EVENTS_DIR_ENV, NVTX_INJECTION_ENV
from stroboscope.recording import _finish
from stroboscope.scopes import _outside, nvtx_capture

# The command: says what its environment held (and the events directory's mode), and leaves
# the calls the scripted reader is to give (name, begin offset, end offset, pid) in it.
COMMAND = r"""
import json, os, sys, time
d = os.environ.get("STROBOSCOPE_EVENTS_DIR")
now = time.monotonic_ns()
seen = {"dir": d, "mode": os.stat(d).st_mode & 0o777 if d else None,
        "nvtx": os.environ.get("NVTX_INJECTION64_PATH")}
open(sys.argv[1], "w").write(json.dumps(seen))
if d:
    calls = [["step", now, now + 1000, os.getpid()], ["step", now + 2000, now + 3000, os.getpid()],
             ["load", now + 500, now + 900, os.getpid() + 1]]
    open(os.path.join(d, "calls.json"), "w").write(json.dumps(calls))
"""


def scripted_reader(events_dir: str | os.PathLike[str]) -> pa.Table:
    """The stand-in of the shared events' reader: the calls the command left, as intervals."""
    calls = json.loads((Path(events_dir) / "calls.json").read_text())
    table = intervals(
        [(n, n, pid, pid, 0, b, e, {}) for n, b, e, pid in calls], anchor=None
    ).append_column("pid", pa.array([0] * len(calls), pa.int64()))
    pids = [pid for *_, pid in sorted(calls, key=lambda c: c[1])]
    return table.set_column(table.num_columns - 1, "pid", pa.array(pids, pa.int64()))


@pytest.fixture
def reader(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(_finish, "read_shared_intervals", scripted_reader)


def _run(tmp_path: Path, *options: str) -> tuple[int, dict[str, Any]]:
    seen = tmp_path / "seen.json"
    code = main(["record", "-q", *options, "--", sys.executable, "-c", COMMAND, str(seen)])
    return code, json.loads(seen.read_text())


def test_the_command_writes_into_a_private_directory_read_and_removed_at_the_end(
    tmp_path: Path, reader: None, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "run.parquet"
    code, seen = _run(tmp_path, "--interval", "0.005", "-o", str(out))
    assert code == 0
    assert seen["dir"] is not None and seen["mode"] == 0o700
    assert not os.path.exists(seen["dir"])  # removed once read
    scopes = pq.read_table(tmp_path / "run.scopes.parquet")
    assert scopes.column("name").to_pylist() == ["step", "load", "step"]
    assert len(set(scopes.column("pid").to_pylist())) == 2
    assert stat.S_IMODE(os.stat(tmp_path / "run.scopes.parquet").st_mode) == 0o600
    prov = from_schema(scopes.schema) or {}
    recording = from_schema(pq.read_schema(out)) or {}
    assert prov["rows"] == 3 and prov["cmdline"] == recording["cmdline"]
    assert prov["clock"]["anchor_ns"] == recording["clock"]["anchor_ns"]
    assert "scopes: 3 calls recorded to " + str(tmp_path / "run.scopes.parquet") in (
        capsys.readouterr().out
    )
    # and the report of the recording reads them beside it
    assert main(["report", str(out)]) == 0
    text = capsys.readouterr().out
    assert "step" in text and "load" in text


def test_no_nvtx_leaves_the_injection_library_out(
    tmp_path: Path, reader: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    library = tmp_path / "libnvtx-stand-in.so"
    library.write_bytes(b"")
    monkeypatch.setattr(nvtx_capture, "nvtx_injection_path", lambda: str(library))
    monkeypatch.delenv(NVTX_INJECTION_ENV, raising=False)
    _, seen = _run(tmp_path, "-o", str(tmp_path / "a.parquet"))
    assert seen["nvtx"] == str(library)
    _, seen = _run(tmp_path, "--no-nvtx", "-o", str(tmp_path / "b.parquet"))
    assert seen["nvtx"] is None
    assert seen["dir"] is not None  # the scopes of stroboscope.annotate are still recorded


def test_another_tools_injection_library_is_kept_and_named(
    tmp_path: Path,
    reader: None,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    monkeypatch.setattr(nvtx_capture, "nvtx_injection_path", lambda: str(tmp_path / "ours.so"))
    monkeypatch.setenv(NVTX_INJECTION_ENV, "/opt/other/libToolInjection64.so")
    code = main(["record", "-o", str(tmp_path / "c.parquet"), "--", "true"])
    assert code == 0
    err = capsys.readouterr().err
    assert "'/opt/other/libToolInjection64.so' (another tool's)" in err


def test_a_command_that_calls_no_scope_leaves_no_scopes_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    stale = tmp_path / "r.scopes.parquet"
    stale.write_bytes(b"from an earlier recording of r.parquet")
    (tmp_path / "r.parquet").write_bytes(b"")
    monkeypatch.setattr(_finish, "read_shared_intervals", lambda d: intervals([], anchor=None))
    assert main(["record", "--force", "-o", str(tmp_path / "r.parquet"), "--", "true"]) == 0
    assert not stale.exists()  # it described the recording --force replaced
    assert "scopes: none called" in capsys.readouterr().out


def test_an_unreadable_events_directory_costs_the_scopes_not_the_rows(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    def broken(events_dir: str | os.PathLike[str]) -> pa.Table:
        raise ValueError("bad magic")

    monkeypatch.setattr(_finish, "read_shared_intervals", broken)
    out = tmp_path / "d.parquet"
    code, seen = _run(tmp_path, "-o", str(out))
    assert code == 0 and pq.read_table(out).num_rows >= 1
    assert not (tmp_path / "d.scopes.parquet").exists()
    assert not os.path.exists(seen["dir"])
    assert "could not be read (ValueError: bad magic)" in caplog.text


def test_setup_that_fails_removes_the_events_directory(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    made: list[str] = []
    real = _outside.command_environment

    def spy(events_dir: str | os.PathLike[str], **kw: Any) -> dict[str, str]:
        made.append(os.fspath(events_dir))
        return real(events_dir, **kw)

    monkeypatch.setattr("stroboscope.cli._command.command_environment", spy)
    code = main(["record", "--sender", "bogus", "-o", str(tmp_path / "s.parquet"), "--", "true"])
    assert code == 2
    assert made and not os.path.exists(made[0])


def test_a_pid_started_with_an_events_directory_has_it_read_and_left(
    tmp_path: Path, reader: None
) -> None:
    import subprocess

    events = tmp_path / "events"
    events.mkdir(mode=0o700)
    seen = tmp_path / "seen.json"
    env = {**os.environ, EVENTS_DIR_ENV: str(events)}
    proc = subprocess.Popen(
        [sys.executable, "-c", COMMAND + "\ntime.sleep(0.5)\n", str(seen)], env=env
    )
    try:
        code = main(["record", "-q", "--pid", str(proc.pid), "-o", str(tmp_path / "p.parquet")])
    finally:
        proc.wait()
    assert code == 0
    assert pq.read_table(tmp_path / "p.scopes.parquet").num_rows == 3
    assert events.is_dir()  # not the recorder's to remove


def test_a_dataset_rank_gets_the_commands_scopes(
    tmp_path: Path, reader: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    for name in ("RANK", "LOCAL_RANK", "WORLD_SIZE", "LOCAL_WORLD_SIZE"):
        monkeypatch.delenv(name, raising=False)
    root = tmp_path / "runs"
    code, _ = _run(tmp_path, "--dataset", str(root), "--job", "exp1")
    assert code == 0
    report = build_cluster_report(root)
    assert report.step == "step"
    (row,) = report.rows
    assert row.step is not None and row.step.count == 2


def _record_in_a_ring_of_64(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    drain_s: float,
    bursts: int,
    calls: int,
) -> tuple[str, dict[str, Any]]:
    """``record`` of a command whose process has a ring of 64 edges and makes ``bursts`` bursts
    of ``calls`` calls 0.3 s apart, drained every ``drain_s``: the summary's scopes line and the
    scopes file's provenance."""
    monkeypatch.setenv("STROBOSCOPE_EVENTS_CAPACITY", "64")
    monkeypatch.setattr(shared_events_drain, "DRAIN_INTERVAL_S", drain_s)
    command = (
        "import time, stroboscope\n"
        f"for burst in range({bursts}):\n"
        f"    for _ in range({calls}):\n"
        "        with stroboscope.annotate('s'):\n"
        "            pass\n"
        f"    time.sleep(0.3 if burst < {bursts - 1} else 0)\n"
    )
    out = tmp_path / "run.parquet"
    argv = ["record", "--interval", "0.01", "-o", str(out), "--", sys.executable, "-c", command]
    assert main(argv) == 0
    lines = capsys.readouterr().out.splitlines()
    line = next(ln for ln in lines if ln.startswith("scopes: "))
    return line, from_schema(pq.read_schema(tmp_path / "run.scopes.parquet")) or {}


def test_edges_a_lapped_events_ring_lost_are_counted_in_the_summary(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    # 200 calls (400 edges) at once, polled only at the end: the first 336 are overwritten
    # before the end reads the file, and the summary says so.
    line, prov = _record_in_a_ring_of_64(tmp_path, monkeypatch, capsys, 3600.0, 1, 200)
    assert line.startswith("scopes: 32 calls recorded to ")
    assert "; 336 scope edges lost (a process's events ring lapped" in line
    assert line.endswith("STROBOSCOPE_EVENTS_CAPACITY sets a larger ring")
    assert prov["events"]["lost"] == 336 and prov["rows"] == 32


def test_the_commands_events_are_drained_while_it_runs(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    # 5 bursts of 10 calls (20 edges) 0.3 s apart, polled every 50 ms: all 50 calls recorded,
    # none lost.
    line, prov = _record_in_a_ring_of_64(tmp_path, monkeypatch, capsys, 0.05, 5, 10)
    assert line.startswith("scopes: 50 calls recorded to ") and "lost" not in line
    assert prov["events"]["lost"] == 0 and prov["rows"] == 50
