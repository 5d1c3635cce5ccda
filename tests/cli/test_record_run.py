"""How `record` runs a command, ends, and meets a new user: the order of start-up, signals,
exit codes, --pid, --version, equal paths."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pyarrow.parquet as pq
import pytest
from _paths import ROOT
from stroboscope.cli import main

ENV = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
CLI = [sys.executable, "-m", "stroboscope"]


def test_a_command_that_exits_at_once_is_recorded_and_its_code_returned(tmp_path: Path) -> None:
    out = tmp_path / "t.parquet"
    assert main(["record", "--interval", "0.001", "-o", str(out), "--", "true"]) == 0
    assert pq.read_table(out).num_rows >= 1
    assert main(["record", "-o", str(tmp_path / "f.parquet"), "--", "sh", "-c", "exit 3"]) == 3


def test_the_first_rows_of_the_command_are_recorded(tmp_path: Path) -> None:
    """The command runs only once sampling has started: a row exists from before the command's
    own first instruction (its start time comes after the first row's)."""
    out = tmp_path / "first.parquet"
    marker = tmp_path / "started"
    code = main(
        [
            "record",
            "--interval",
            "0.001",
            "-o",
            str(out),
            "--",
            sys.executable,
            "-c",
            f"import time; open({str(marker)!r}, 'w').write(repr(time.time_ns()))",
        ]
    )
    assert code == 0
    started_ns = int(marker.read_text())
    first_row_ns = pq.read_table(out).column("time").cast("int64")[0].as_py()
    assert first_row_ns <= started_ns


def test_a_command_killed_by_a_signal_gives_128_plus_it(tmp_path: Path) -> None:
    code = main(["record", "-o", str(tmp_path / "k.parquet"), "--", "sh", "-c", "kill -9 $$"])
    assert code == 128 + signal.SIGKILL


def test_an_unknown_command_fails_before_anything_is_made(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "u.parquet"
    assert main(["record", "-o", str(out), "--", "no-such-command-here"]) == 2
    assert "cannot run 'no-such-command-here': no such command" in capsys.readouterr().err
    assert list(tmp_path.iterdir()) == []
    script = tmp_path / "job.sh"  # there, but not executable: said so, not "no such command"
    script.write_text("#!/bin/sh\n")
    folder = tmp_path / "work"
    folder.mkdir()
    for given, why in (
        (script, "it is not executable (chmod +x it"),
        (folder, "it is a directory"),
    ):
        assert main(["record", "-o", str(out), "--", str(given)]) == 2
        assert f"cannot run {str(given)!r}: {why}" in capsys.readouterr().err
    assert sorted(p.name for p in tmp_path.iterdir()) == ["job.sh", "work"]
    assert main(["record", "-o", str(out), "--job", "", "--", "true"]) == 2
    assert "--job must be a non-empty str, got an empty str" in capsys.readouterr().err


def test_setup_failure_after_the_sampler_leaves_no_spool(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "s.parquet"
    code = main(["record", "--duration", "0.1", "--sender", "bogus", "-o", str(out)])
    assert code == 2 and "unknown sender 'bogus'" in capsys.readouterr().err
    assert list(tmp_path.iterdir()) == []


def test_output_and_spool_must_differ(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "same.parquet"
    assert main(["record", "--duration", "0.1", "-o", str(out), "--spool", str(out)]) == 2
    assert "is the output file too" in capsys.readouterr().err
    assert not out.exists()


@pytest.mark.parametrize(
    "sources", [[], ["--sources", "cpu,memory"]], ids=["default", "no-process-source"]
)
def test_pid_recording_stops_when_the_process_exits(tmp_path: Path, sources: list[str]) -> None:
    """Also without a process source (then nothing reads the pid on each tick)."""
    child = subprocess.Popen(
        [sys.executable, "-c", "import sys; sys.stdin.read()"], stdin=subprocess.PIPE
    )
    out = tmp_path / "p.parquet"
    recorder = subprocess.Popen(
        [*CLI, "record", "--pid", str(child.pid), *sources, "-o", str(out)],
        env=ENV,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        deadline = time.monotonic() + 60
        while not any(tmp_path.glob("*.spool")) and time.monotonic() < deadline:
            time.sleep(0.02)
        assert child.stdin is not None
        child.stdin.close()  # the process exits now (a zombie until we wait for it)
        try:
            stdout, stderr = recorder.communicate(timeout=60)
        except subprocess.TimeoutExpired:
            pytest.fail("record --pid went on recording after the process exited")
    finally:
        for proc in (recorder, child):
            if proc.poll() is None:
                proc.kill()
            proc.communicate()  # reaps it and closes its pipes
    assert recorder.returncode == 0, stderr
    assert "recorded" in stdout and pq.read_table(out).num_rows >= 1


def test_version_and_no_command() -> None:
    got = subprocess.run([*CLI, "--version"], env=ENV, capture_output=True, text=True, timeout=60)
    assert got.returncode == 0 and got.stdout.strip() == "stroboscope 0.1.0"
    got = subprocess.run(CLI, env=ENV, capture_output=True, text=True, timeout=60)
    assert got.returncode == 2 and "record" in got.stderr and "required" not in got.stderr


def test_bad_durations_are_refused(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    for bad in ("nan", "-1", "0", "inf"):
        assert main(["record", "--duration", bad, "-o", str(tmp_path / "d.parquet")]) == 2
        assert "--duration must be a positive finite number of seconds" in capsys.readouterr().err
    assert main(["info", "--pid", "-5"]) == 2
    assert "pid must be a positive process id" in capsys.readouterr().err


def test_the_readme_synopsis_puts_options_before_the_command() -> None:
    """argparse hands everything after `--` to the command: the README must not show an option
    there, and its record line must parse as documented."""
    readme = (ROOT / "README.md").read_text()
    block = readme.split("## Command line", 1)[1].split("```text", 1)[1].split("```", 1)[0]
    record = " ".join(line.strip() for line in block.splitlines() if line.strip())
    record = record.split("stroboscope recover", 1)[0]
    assert record.startswith("stroboscope record ")
    after = record.split("-- COMMAND ARGS...", 1)[1]
    assert after.strip(" ]") == "", f"options after the command in {record!r}"
    from stroboscope.cli import build_parser

    args = build_parser().parse_args(["record", "-o", "m.parquet", "--", "sleep", "1"])
    assert args.output == "m.parquet" and args.command == ["--", "sleep", "1"]


def test_an_output_after_the_command_is_explained(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    argv = ["record", "--", "sleep", "1", "-o", str(tmp_path / "m.parquet")]
    assert main(argv) == 2
    assert "-o after the command is the command's own argument" in capsys.readouterr().err
    assert main(["record", "--duration", "1"]) == 2
    assert "the output file is required: give -o FILE" in capsys.readouterr().err
    assert list(tmp_path.iterdir()) == []


def test_a_command_never_runs_when_setup_fails_after_it_was_spawned(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The command is spawned before the sampler (to follow its pid) but held at a gate: a
    setup that then fails (here a bad sender) must not let it run."""
    marker = tmp_path / "ran"
    out = tmp_path / "s.parquet"
    code = main(
        [
            "record",
            "--sender",
            "bogus",
            "-o",
            str(out),
            "--",
            sys.executable,
            "-c",
            f"open({str(marker)!r}, 'w')",
        ]
    )
    assert code == 2 and "unknown sender 'bogus'" in capsys.readouterr().err
    assert list(tmp_path.iterdir()) == []  # no marker: it never ran; no spool


def test_record_runs_from_a_thread_too(tmp_path: Path) -> None:
    """Only the main thread may set signal handlers: elsewhere record runs without them."""
    import threading

    out = tmp_path / "t.parquet"
    codes: list[int] = []
    argv = ["record", "--interval", "0.005", "--duration", "0.2", "-o", str(out)]
    worker = threading.Thread(target=lambda: codes.append(main(argv)))
    worker.start()
    worker.join(120)
    assert codes == [0] and pq.read_table(out).num_rows >= 1


def test_the_duration_ends_the_recording_and_the_command_runs_to_its_end(tmp_path: Path) -> None:
    out = tmp_path / "d.parquet"
    marker = tmp_path / "ended"
    code = main(
        [
            "record",
            "--interval",
            "0.01",
            "--duration",
            "0.3",
            "-o",
            str(out),
            "--",
            sys.executable,
            "-c",
            "import sys, time; time.sleep(3); "
            f"open({str(marker)!r}, 'w').write(repr(time.time_ns())); sys.exit(5)",
        ]
    )
    assert code == 5  # waited for, its code returned
    ended_ns = int(marker.read_text())
    last_row_ns = pq.read_table(out).column("time").cast("int64")[-1].as_py()
    # The recording stopped at --duration (0.3 s), not when the command ended 3 s after its start.
    assert last_row_ns < ended_ns - 1_000_000_000


def test_the_command_starts_with_the_signal_dispositions_a_shell_gives(tmp_path: Path) -> None:
    # The gate is a Python program, and Python ignores SIGPIPE at start-up: the command must not
    # inherit that (`yes | head` would print "Broken pipe" errors), nor an ignored SIGINT.
    status = tmp_path / "status"
    out = tmp_path / "s.parquet"
    assert (
        main(["record", "-o", str(out), "--", "sh", "-c", f"cat /proc/self/status > {status}"]) == 0
    )
    ignored = int(
        next(ln for ln in status.read_text().splitlines() if ln.startswith("SigIgn:")).split()[1],
        16,
    )
    for sig in (signal.SIGPIPE, signal.SIGXFSZ, signal.SIGINT):
        assert not ignored & (1 << (sig - 1)), sig


def test_record_makes_no_events_directory_for_its_own_sampler(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """record's only children are the command (its scopes have a directory of their own) and
    the watchdog: its sampler makes no directory for children, which a SIGKILL would leave in
    the temporary folder. A sampler started afterwards in the same process still makes one."""
    from stroboscope import Sampler
    from stroboscope.sampling import _child_events

    made: list[str | None] = []
    real = _child_events._make_dir

    def counted(last: str | None) -> str | None:
        path = real(last)
        made.append(path)
        return path

    monkeypatch.setattr(_child_events, "_make_dir", counted)
    monkeypatch.delenv("STROBOSCOPE_EVENTS_DIR", raising=False)
    for n, tail in enumerate(([], ["--", sys.executable, "-c", "pass"])):
        out = tmp_path / f"r{n}.parquet"
        assert main(["record", "-q", "--duration", "0.05", "-o", str(out), *tail]) == 0
    assert made == []
    with Sampler(0.01, sources=["memory"]):
        assert len(made) == 1 and made[0] is not None and os.path.isdir(made[0])
    assert not os.path.exists(made[0])
