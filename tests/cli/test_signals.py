"""Signals and `record -- CMD`, with real processes: SIGTERM/SIGINT are forwarded to the command
and the recording still ends with its output, summary and cleanup; a recorder killed by SIGKILL
takes its command with it. No test depends on timing: each waits for a marker the command writes."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Union

import pyarrow.parquet as pq
import pytest

ENV = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
CLI = [sys.executable, "-m", "stroboscope"]
WAIT_S = 60.0


def _alive(pid: int) -> bool:
    """Whether ``pid`` still runs (a zombie has ended)."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            state = f.read().rpartition(b")")[2].split()[0]
    except (FileNotFoundError, ProcessLookupError, IndexError):
        return False
    return state not in (b"Z", b"X")


def _wait_for(predicate: object, what: str) -> None:
    deadline = time.monotonic() + WAIT_S
    while not predicate():  # type: ignore[operator]
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.02)


def _text(path: Path) -> str:
    try:
        return path.read_text()
    except FileNotFoundError:
        return ""


Started = Union["subprocess.Popen[str]", "subprocess.Popen[bytes]", int]


@pytest.fixture
def procs() -> Iterator[list[Started]]:
    """Processes a test started (a Popen, or the pid of a grandchild): any still running at the
    end is killed, and each Popen reaped with its pipes closed."""
    started: list[Started] = []
    yield started
    for p in started:
        if isinstance(p, int):
            if _alive(p):
                os.kill(p, signal.SIGKILL)
        else:
            if p.poll() is None:
                p.kill()
            p.communicate()


def _child(tmp_path: Path, body: str) -> list[str]:
    """A Python command that writes its pid to ``child.pid`` once ``body`` set it up."""
    pid_file = tmp_path / "child.pid"
    script = (
        "import os, signal, sys, time\n"
        f"{body}\n"
        f"open({str(pid_file)!r} + '.tmp', 'w').write(str(os.getpid()))\n"
        f"os.rename({str(pid_file)!r} + '.tmp', {str(pid_file)!r})\n"
        "while True:\n"
        "    time.sleep(0.05)\n"
    )
    return [sys.executable, "-c", script]


def _start(
    tmp_path: Path, out: Path, body: str, procs: list[Started]
) -> tuple[subprocess.Popen[str], int]:
    cmd = [*CLI, "record", "--interval", "0.005", "-o", str(out), "--", *_child(tmp_path, body)]
    proc = subprocess.Popen(cmd, env=ENV, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    procs.append(proc)
    pid_file = tmp_path / "child.pid"
    _wait_for(lambda: pid_file.exists() or proc.poll() is not None, "the command to start")
    assert proc.poll() is None, proc.communicate()
    child = int(pid_file.read_text())
    procs.append(child)
    return proc, child


def test_sigkill_of_the_recorder_kills_the_command(tmp_path: Path, procs: list[Started]) -> None:
    out = tmp_path / "k.parquet"
    proc, child = _start(tmp_path, out, "", procs)
    proc.kill()
    proc.communicate(timeout=WAIT_S)
    _wait_for(lambda: not _alive(child), f"the command (pid {child}) to die with the recorder")
    _wait_for(out.exists, "the watchdog to write the output")  # then the watchdog exits too


def test_sigterm_is_forwarded_and_the_recording_ends_cleanly(
    tmp_path: Path, procs: list[Started]
) -> None:
    out = tmp_path / "term.parquet"
    proc, child = _start(tmp_path, out, "", procs)
    proc.send_signal(signal.SIGTERM)
    stdout, stderr = proc.communicate(timeout=WAIT_S)
    assert proc.returncode == 128 + signal.SIGTERM, stderr  # the command died of the SIGTERM
    assert not _alive(child)
    rows = pq.read_table(out).num_rows
    assert f"recorded {rows} rows" in stdout and rows >= 1
    assert sorted(p.name for p in tmp_path.iterdir()) == ["child.pid", "term.parquet"]


def test_sigint_is_forwarded_and_the_commands_code_returned(
    tmp_path: Path, procs: list[Started]
) -> None:
    out = tmp_path / "int.parquet"
    body = "signal.signal(signal.SIGINT, lambda *a: sys.exit(5))"
    proc, _ = _start(tmp_path, out, body, procs)
    proc.send_signal(signal.SIGINT)
    stdout, stderr = proc.communicate(timeout=WAIT_S)
    assert proc.returncode == 5, stderr
    assert "recorded" in stdout and pq.read_table(out).num_rows >= 1
    assert sorted(p.name for p in tmp_path.iterdir()) == ["child.pid", "int.parquet"]


def test_each_later_signal_is_forwarded_too(tmp_path: Path, procs: list[Started]) -> None:
    """A command that handles the first SIGTERM (say, to save a checkpoint) keeps being
    recorded; the second SIGTERM reaches it as well, and the recorder still ends cleanly."""
    out = tmp_path / "twice.parquet"
    got = tmp_path / "got"
    body = (
        "seen = []\n"
        "def on_term(*a):\n"
        "    seen.append(1)\n"
        f"    open({str(got)!r}, 'w').write(str(len(seen)))\n"
        "    if len(seen) == 2:\n"
        "        sys.exit(9)\n"
        "signal.signal(signal.SIGTERM, on_term)"
    )
    proc, _ = _start(tmp_path, out, body, procs)
    proc.send_signal(signal.SIGTERM)
    _wait_for(lambda: _text(got) == "1", "the command to see the first SIGTERM")
    assert proc.poll() is None  # still recording the command
    proc.send_signal(signal.SIGTERM)
    stdout, stderr = proc.communicate(timeout=WAIT_S)
    assert proc.returncode == 9, stderr
    assert "Traceback" not in stderr and "recorded" in stdout
    assert sorted(p.name for p in tmp_path.iterdir()) == ["child.pid", "got", "twice.parquet"]


def test_a_command_that_ignores_sigint_is_waited_for_and_the_recorder_says_so(
    tmp_path: Path, procs: list[Started]
) -> None:
    """Ctrl-C reaches a command that ignores it: the recorder keeps recording and says that it
    waits for the command and what a further signal does; SIGTERM then ends both cleanly."""
    out = tmp_path / "deaf.parquet"
    proc, child = _start(tmp_path, out, "signal.signal(signal.SIGINT, signal.SIG_IGN)", procs)
    proc.send_signal(signal.SIGINT)
    stderr = proc.stderr
    assert stderr is not None
    lines: list[str] = []
    reader = threading.Thread(target=lambda: lines.extend(iter(stderr.readline, "")))
    reader.start()
    _wait_for(lambda: any("still running" in line for line in lines), "the waiting notice")
    [notice] = [line for line in lines if "still running" in line]
    assert notice.startswith(
        f"stroboscope record: the command (pid {child}) is still running "
        "after SIGINT: recording until it exits"
    ), notice
    assert "each further Ctrl-C or SIGTERM is passed on to it" in notice
    assert _alive(child) and proc.poll() is None
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(timeout=WAIT_S) == 128 + signal.SIGTERM
    reader.join(timeout=WAIT_S)
    assert "Traceback" not in "".join(lines) and pq.read_table(out).num_rows >= 1


def test_sigterm_without_a_command_ends_with_output_and_summary(tmp_path: Path) -> None:
    out = tmp_path / "plain.parquet"
    proc = subprocess.Popen(
        [*CLI, "record", "--interval", "0.005", "-o", str(out)],
        env=ENV,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        # The handlers are set before the spool is made: once it exists, SIGTERM is ours.
        _wait_for(lambda: any(tmp_path.glob("*.spool")), "the spool")
        proc.send_signal(signal.SIGTERM)
        stdout, stderr = proc.communicate(timeout=WAIT_S)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == 128 + signal.SIGTERM, stderr
    rows = pq.read_table(out).num_rows
    assert f"recorded {rows} rows" in stdout
    assert sorted(p.name for p in tmp_path.iterdir()) == ["plain.parquet"]


def test_ctrl_c_on_a_terminal_reaches_the_command_once(
    tmp_path: Path, procs: list[Started]
) -> None:
    """Ctrl-C on the recorder's terminal sends SIGINT to its whole foreground group, the command
    included: the recorder must not send it a second one (that would break the command's own
    handling of the first, e.g. saving a checkpoint)."""
    import fcntl
    import pty
    import termios

    seen = tmp_path / "seen"
    body = (
        "count = []\n"
        "def on_int(*a):\n"
        "    count.append(1)\n"
        f"    open({str(seen)!r}, 'w').write(str(len(count)))\n"
        "signal.signal(signal.SIGINT, on_int)"
    )
    # Once it saw a SIGINT the command waits 1 s more (for a second one) and exits 5.
    body += (
        "\nimport threading\n"
        "def ender():\n"
        f"    while not os.path.exists({str(seen)!r}):\n"
        "        time.sleep(0.01)\n"
        "    time.sleep(1.0)\n"
        "    os._exit(5)\n"
        "threading.Thread(target=ender, daemon=True).start()"
    )
    primary, secondary = pty.openpty()

    def own_terminal() -> None:  # a new session with the pty as its controlling terminal
        os.setsid()
        fcntl.ioctl(0, termios.TIOCSCTTY, 0)

    out = tmp_path / "tty.parquet"
    cmd = [*CLI, "record", "--interval", "0.005", "-o", str(out), "--", *_child(tmp_path, body)]
    proc = subprocess.Popen(
        cmd, env=ENV, stdin=secondary, stdout=secondary, stderr=secondary, preexec_fn=own_terminal
    )
    procs.append(proc)
    os.close(secondary)
    output: list[bytes] = []

    def drain() -> None:  # the recorder never blocks on a full terminal
        with contextlib.suppress(OSError):
            while chunk := os.read(primary, 65536):
                output.append(chunk)

    reader = threading.Thread(target=drain, daemon=True)
    reader.start()
    try:
        pid_file = tmp_path / "child.pid"
        _wait_for(lambda: pid_file.exists() or proc.poll() is not None, "the command to start")
        procs.append(int(pid_file.read_text()))
        os.write(primary, b"\x03")  # Ctrl-C
        assert proc.wait(timeout=WAIT_S) == 5
        assert seen.read_text() == "1"
        reader.join(WAIT_S)  # EOF (or EIO) once the recorder and the command closed the pty
        assert out.exists() and b"recorded" in b"".join(output)
    finally:
        os.close(primary)


def test_an_ignored_sigint_stays_ignored_for_the_command(tmp_path: Path) -> None:
    """A recorder started with SIGINT ignored (a background job, nohup) must not hand the
    command a SIGINT that kills it: the command inherits the ignored disposition."""
    out = tmp_path / "ign.parquet"
    probe = "import signal as s, sys; sys.exit(3 if s.getsignal(s.SIGINT) is s.SIG_IGN else 4)"
    got = subprocess.run(
        [*CLI, "record", "--interval", "0.005", "-o", str(out), "--", sys.executable, "-c", probe],
        env=ENV,
        capture_output=True,
        text=True,
        timeout=WAIT_S,
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_IGN),
    )
    assert got.returncode == 3, got.stderr


def test_after_a_sigkill_the_spool_is_removed_once_the_output_is_written(
    tmp_path: Path, procs: list[Started]
) -> None:
    """The watchdog writes FILE, then removes FILE.spool as a clean run would: the next run on
    FILE is not blocked by a leftover spool."""
    out = tmp_path / "again.parquet"
    spool = tmp_path / "again.parquet.spool"
    proc, _ = _start(tmp_path, out, "", procs)
    proc.kill()
    proc.communicate(timeout=WAIT_S)
    _wait_for(lambda: out.exists() and not spool.exists(), "the watchdog to write and clean up")
    assert pq.read_table(out).num_rows >= 1
    assert not list(tmp_path.glob("again.parquet.spool*"))  # no segment either
    rerun = subprocess.run(
        # --force: FILE exists (the watchdog wrote it); the leftover spool must not block
        [*CLI, "record", "--interval", "0.005", "--duration", "0.1", "--force", "-o", str(out)],
        env=ENV,
        capture_output=True,
        text=True,
        timeout=WAIT_S,
    )
    assert rerun.returncode == 0, rerun.stderr
