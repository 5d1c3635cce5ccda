"""The command line's edges a new user meets: a missing extra, a closed pipe, an existing output,
a misspelt source, a missing directory, a sender without its options, --duration with a command
that runs on, what proc.* describe without --pid, and durations written for people."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import pyarrow.parquet as pq
import pytest
from stroboscope._base.text import fmt_seconds
from stroboscope.cli import main

ENV = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
CLI = [sys.executable, "-m", "stroboscope"]


@pytest.mark.parametrize(
    ("option", "value", "blocked", "extra"),
    [
        ("--prometheus", "0", ["prometheus_client"], "prometheus"),
        (
            "--otlp",
            "http://127.0.0.1:9/v1/metrics",
            ["opentelemetry"],
            "otel",
        ),
    ],
)
def test_an_exporter_without_its_extra_names_the_option_and_the_extra(
    option: str,
    value: str,
    blocked: list[str],
    extra: str,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    for name in blocked:  # it and every module of it, as in a process where it is missing
        for loaded in [m for m in sys.modules if m.startswith(name + ".")]:
            monkeypatch.delitem(sys.modules, loaded)
        monkeypatch.setitem(sys.modules, name, None)
    # Our module that needs it is imported again, as in a process where it was never imported.
    monkeypatch.delitem(sys.modules, "stroboscope.cluster.otel", raising=False)
    out = tmp_path / "m.parquet"
    assert main(["record", "--duration", "0.2", "-o", str(out), option, value]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"stroboscope record: error: {option} needs "), err
    assert "a library that is not installed" in err
    assert err.count("pip install") == 1 and f"pip install 'stroboscope[{extra}]'" in err, err
    assert list(tmp_path.iterdir()) == []  # refused before anything was made


def _closed_stdout(argv: list[str], cwd: Path) -> tuple[int, str]:
    """Run the command with a standard output whose reader has gone (``| head`` that exited)."""
    proc = subprocess.Popen(
        [*CLI, *argv], env=ENV, cwd=cwd, stdout=subprocess.PIPE, stderr=subprocess.PIPE
    )
    assert proc.stdout is not None and proc.stderr is not None
    proc.stdout.close()  # the reader is gone before anything is written
    with proc.stderr:
        err = proc.stderr.read().decode()
    return proc.wait(timeout=120), err


def test_a_closed_pipe_ends_info_quietly_as_unix_tools_do(tmp_path: Path) -> None:
    code, err = _closed_stdout(["info", "--pid", "1"], tmp_path)
    assert code == 128 + signal.SIGPIPE and err == ""


def test_a_closed_pipe_after_recording_loses_nothing(tmp_path: Path) -> None:
    out = tmp_path / "m.parquet"
    argv = ["record", "-q", "--interval", "0.01", "--duration", "0.3", "-o", str(out)]
    code, err = _closed_stdout(argv, tmp_path)
    assert code == 128 + signal.SIGPIPE and "Traceback" not in err and "Broken pipe" not in err
    assert pq.read_table(out).num_rows >= 1  # written whole before the summary was printed
    assert sorted(p.name for p in tmp_path.iterdir()) == ["m.parquet"]  # spool cleaned up


def test_an_existing_output_is_refused_unless_forced(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "m.parquet"
    out.write_bytes(b"earlier results")
    assert main(["record", "--duration", "0.2", "-o", str(out)]) == 2
    err = capsys.readouterr().err
    assert f"-o {str(out)!r} already exists" in err and "--force" in err, err
    assert out.read_bytes() == b"earlier results"
    assert main(["record", "--duration", "0.2", "--force", "-o", str(out)]) == 0
    assert pq.read_table(out).num_rows >= 1


@pytest.mark.parametrize("planted", ["symlink", "fifo", "sidecar symlink"])
def test_a_forced_output_that_cannot_be_replaced_is_refused_before_the_command_runs(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], planted: str
) -> None:
    """``--force`` replaces a regular file only: a symlink or a FIFO at ``-o`` (or at a file
    written with it) is refused at the start, by the rule the final write uses, before the
    command runs, not after the whole run was recorded."""
    suffix = ".csv" if planted == "sidecar symlink" else ".parquet"
    out = tmp_path / f"m{suffix}"
    target = tmp_path / "theirs"
    target.write_bytes(b"theirs")
    at = tmp_path / "m.csv.meta.json" if planted == "sidecar symlink" else out
    if planted == "fifo":
        os.mkfifo(at)
    else:
        at.symlink_to(target)
    ran = tmp_path / "ran"
    command = [sys.executable, "-c", f"open({str(ran)!r}, 'w').close()"]
    assert main(["record", "--force", "-o", str(out), "--", *command]) == 2
    err = capsys.readouterr().err
    assert str(at) in err and ("symbolic link" in err or "FIFO" in err), err
    assert not ran.exists()  # refused before the command ran
    assert target.read_bytes() == b"theirs"
    assert at.is_symlink() if planted != "fifo" else at.is_fifo()
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted([at.name, "theirs"])


def test_an_unknown_source_is_refused_before_anything_is_said_or_made(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["record", "--sources", "cpu,bogus", "-o", str(tmp_path / "m.parquet")]) == 2
    err = capsys.readouterr().err
    assert err.startswith("usage: stroboscope record"), err  # nothing said before the refusal
    assert "--sources 'cpu,bogus'" in err and "unknown source 'bogus'" in err
    assert "known sources: cpu" in err and "recording until" not in err
    assert list(tmp_path.iterdir()) == []


def test_an_output_in_a_missing_directory_names_the_output(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "nonexistent" / "x.parquet"
    assert main(["record", "--duration", "0.2", "-o", str(out)]) == 2
    err = capsys.readouterr().err
    assert f"-o {str(out)!r}: directory {str(out.parent)!r} does not exist" in err, err
    assert "spool" not in err
    assert list(tmp_path.iterdir()) == []


def test_a_sender_without_its_required_option_names_them(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    argv = ["record", "--duration", "0.2", "-o", str(tmp_path / "m.parquet")]
    assert main([*argv, "--sender", "csv"]) == 2
    err = capsys.readouterr().err
    assert "--sender csv: the csv sender needs path=..." in err, err
    assert "required: path; optional: columns, flush" in err and "__init__" not in err
    assert main([*argv, "--sender", "csv:path=a.csv,every=3"]) == 2
    err = capsys.readouterr().err
    assert "the csv sender takes no option 'every'" in err and "required: path" in err, err
    assert list(tmp_path.iterdir()) == []


def test_the_duration_stops_recording_says_the_recorder_waits_and_reports_the_rows_span(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "d.parquet"
    code = main(
        [
            *("record", "-q", "--interval", "0.01", "--duration", "0.5", "-o", str(out), "--"),
            *(sys.executable, "-c", "import time; time.sleep(3)"),
        ]
    )
    assert code == 0
    captured = capsys.readouterr()
    assert "--duration 500 ms is up: recording stopped; waiting for the command (pid " in (
        captured.err
    )
    mono = pq.read_table(out).column("mono_ns").to_pylist()
    span = (mono[-1] - mono[0]) / 1e9
    assert span < 1.5  # the command ran 3 s; the rows cover the --duration (loaded machine: < 1.5)
    # the summary gives the span of the rows written, not the 3 s the recorder waited
    assert f"over {fmt_seconds(span)} (first to last row)" in captured.out, captured.out


def test_without_pid_or_command_the_startup_line_says_proc_is_the_recorder(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["record", "--duration", "0.2", "-o", str(tmp_path / "a.parquet")]) == 0
    err = capsys.readouterr().err
    assert f"the proc.* columns describe this recorder (pid {os.getpid()})" in err, err
    # with --pid (or a command) they describe that process: nothing to say
    argv = ["--duration", "0.2", "--pid", str(os.getpid()), "-o", str(tmp_path / "b.parquet")]
    assert main(["record", *argv]) == 0
    assert "proc.*" not in capsys.readouterr().err
    # without proc columns there is nothing to say either
    argv = ["--duration", "0.2", "--sources", "memory", "-o", str(tmp_path / "c.parquet")]
    assert main(["record", *argv]) == 0
    assert "proc.*" not in capsys.readouterr().err
    assert main(["record", "--help"]) == 0
    assert "columns describe the recorder itself" in " ".join(capsys.readouterr().out.split())


@pytest.mark.parametrize(
    ("seconds", "text"),
    [
        (0.0009999, "1 ms"),  # was "1e+03 µs": the unit is chosen after rounding
        (0.00099949, "999 µs"),
        (0.9996, "1 s"),  # was "1e+03 ms"
        (0.01, "10 ms"),
        (0.0001, "100 µs"),
        (999.4, "999 s"),
        (999.6, "1000 s"),  # was "1e+03 s"
        (12345.0, "12345 s"),  # was "1.23e+04 s"
        (None, "-"),
    ],
)
def test_durations_are_written_for_people(seconds: float | None, text: str) -> None:
    assert fmt_seconds(seconds) == text


def test_the_summary_writes_the_interval_for_people(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "m.parquet"
    argv = ["record", "-q", "--interval", "0.001", "--duration", "0.3", "-o", str(out)]
    assert main(argv) == 0
    text = capsys.readouterr().out
    assert "sampler: interval 1 ms, sampled for " in text, text
    assert "e+" not in text  # no number anywhere in the summary in exponent notation


def test_an_output_that_cannot_be_written_keeps_the_rows_and_says_how_to_recover_them(
    tmp_path: Path,
) -> None:
    """The command removes the output's directory while it is recorded: the end's write fails.
    The message names -o, the rows and the recover command; the watchdog is stopped (it would
    otherwise take this for a death and try the same write); the spool holds every row."""
    spool = tmp_path / "sp.spool"
    gone = tmp_path / "gone"
    gone.mkdir()
    argv = ["record", "-q", "--interval", "0.01", "--spool", str(spool)]
    argv += ["-o", str(gone / "x.parquet"), "--", sys.executable, "-c"]
    argv += [f"import shutil, time; time.sleep(0.3); shutil.rmtree({str(gone)!r})"]
    # (the watchdog child shares stderr: run() returns once it has exited too)
    done = subprocess.run([*CLI, *argv], env=ENV, capture_output=True, text=True, timeout=120)
    assert done.returncode == 2, done.stderr
    said = done.stderr.strip()
    assert said.startswith(
        f"stroboscope record: error: cannot write -o {str(gone / 'x.parquet')!r} (No such file"
    ), said
    assert ".tmp" not in said and "watchdog" not in said and "parent" not in said, said
    rows = int(said.split("; the ")[1].split()[0])
    assert (
        f"are safe in the spool {str(spool)!r}: write them with: "
        f"stroboscope recover {spool} -o FILE; the command's scope events are kept in "
    ) in said, said
    assert said.endswith("(recover reads them)"), said
    out = tmp_path / "recovered.parquet"
    assert main(["recover", str(spool), "-o", str(out)]) == 0
    assert pq.read_table(out).num_rows == rows >= 1


def test_record_help_states_the_interval_bounds_the_checks_enforce() -> None:
    import argparse

    from stroboscope.cli._args import add_record_arguments
    from stroboscope.sampling._checks import MAX_INTERVAL_S, MIN_INTERVAL_S, check_interval

    parser = argparse.ArgumentParser()
    add_record_arguments(parser)
    interval = next(a for a in parser._actions if "--interval" in a.option_strings)
    assert interval.help is not None
    low, high = interval.help.rsplit("; ", 1)[1].rstrip(")").split(" to ")
    assert (float(low), float(high)) == (MIN_INTERVAL_S, MAX_INTERVAL_S)
    assert check_interval("i", float(low)) == MIN_INTERVAL_S  # the bounds themselves are taken
    with pytest.raises(ValueError, match="must be within"):
        check_interval("i", float(high) * 2)


def test_a_slow_interval_records_to_a_file(tmp_path: Path) -> None:
    """--interval 0.5 (a quarter of the default ring is hours): the segment length is capped
    at the longest interval, not refused as a segment_seconds the user never gave."""
    out = tmp_path / "slow.parquet"
    args = ["record", "-q", "-o", str(out), "--interval", "0.5", "--duration", "1.2"]
    assert main(args) == 0
    assert pq.read_metadata(out).num_rows >= 2
