"""A recording Sampler cleans up after itself however it ends: a start() that fails half-way
stops what it had started, and a Sampler still open when the process exits stops its watchdog
(no dump: a normal end) and removes its private spool directory."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from stroboscope import Sampler
from stroboscope.recording import segments as segments_module

ENV = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}


def _run(code: str, tmp_path: Path) -> subprocess.CompletedProcess[str]:
    """``code`` in a fresh interpreter whose ``$TMPDIR`` is ``tmp_path/tmp`` (where a private
    spool directory is made) and whose working directory is ``tmp_path/cwd``."""
    (tmp_path / "tmp").mkdir()
    (tmp_path / "cwd").mkdir()
    return subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)],
        capture_output=True,
        text=True,
        env={**ENV, "TMPDIR": str(tmp_path / "tmp")},
        cwd=tmp_path / "cwd",
        timeout=120,
    )


def test_a_failed_start_leaves_no_private_spool_when_the_process_ends(tmp_path: Path) -> None:
    """The watchdog cannot be started (no process can be made): start() raises, and the
    Sampler, never closed, is gone with its spool directory when the process exits."""
    out = _run(
        """
        import errno, stroboscope
        from stroboscope.recording import watchdog

        def no_process(*args, **kwargs):
            raise OSError(errno.EAGAIN, "Resource temporarily unavailable")

        watchdog.subprocess.Popen = no_process
        s = stroboscope.Sampler(0.01, sources=["memory"], crash_safe=True)
        try:
            s.start()
        except OSError as exc:
            print("start failed:", exc, flush=True)
        print("running:", s.running, flush=True)
        """,
        tmp_path,
    )
    assert out.returncode == 0, out.stderr
    assert out.stdout.splitlines() == [
        "start failed: [Errno 11] Resource temporarily unavailable",
        "running: False",
    ]
    assert os.listdir(tmp_path / "tmp") == []
    assert os.listdir(tmp_path / "cwd") == []  # and no dump


def test_a_sampler_open_at_exit_stops_and_removes_its_private_spool(tmp_path: Path) -> None:
    """A normal end of the process: the sampler is stopped (no crash at exit), the watchdog
    told so (it writes no dump) and the private spool directory removed."""
    out = _run(
        """
        import time, stroboscope
        s = stroboscope.Sampler(0.001, sources=["memory"], crash_safe=True).start()
        while s.stats().rows_written < 20:
            time.sleep(0.01)
        print("spool:", s.spool, flush=True)
        """,
        tmp_path,
    )
    assert out.returncode == 0, out.stderr
    assert out.stdout.startswith("spool: " + str(tmp_path / "tmp")), out.stdout
    assert os.listdir(tmp_path / "tmp") == []
    assert os.listdir(tmp_path / "cwd") == []  # a normal end: no dump


def test_a_start_failing_after_the_watchdog_started_stops_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The segment writer cannot start (its thread): start() raises with nothing left running
    (no sampler thread, no watchdog); close() then removes the private spool."""

    def no_thread(self: object) -> None:
        raise RuntimeError("can't start new thread")

    monkeypatch.setattr(segments_module.SegmentWriter, "start", no_thread)
    s = Sampler(0.01, sources=["memory"], crash_safe=True, dump_path=tmp_path / "dump.csv")
    spool = s.spool
    assert spool is not None and os.path.exists(spool)
    with pytest.raises(RuntimeError, match="can't start new thread"):
        s.start()
    assert not s.running
    assert s.watchdog is not None and not s.watchdog.running
    s.close()
    assert not os.path.exists(os.path.dirname(spool))
    assert not (tmp_path / "dump.csv").exists()


KILLED = """
import os, sys, stroboscope
s = stroboscope.Sampler(
    0.002, spool="s.spool", crash_safe=True, capacity=512, segment_seconds=0.5
)
s.start()
with stroboscope.annotate("step"):
    pass
print(os.environ.get("STROBOSCOPE_EVENTS_DIR"), flush=True)
sys.stdin.readline()  # SIGKILLed here
"""


def test_a_sigkilled_sampler_leaves_no_events_directory_after_its_watchdogs_dump(
    tmp_path: Path,
) -> None:
    (tmp_path / "tmp").mkdir()
    (tmp_path / "cwd").mkdir()
    proc = subprocess.Popen(
        [sys.executable, "-c", textwrap.dedent(KILLED)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env={**ENV, "TMPDIR": str(tmp_path / "tmp")},
        cwd=tmp_path / "cwd",
    )
    assert proc.stdout is not None
    events_dir = proc.stdout.readline().strip()
    assert os.path.dirname(events_dir) == str(tmp_path / "tmp"), events_dir  # it made one
    os.kill(proc.pid, signal.SIGKILL)
    _, err = proc.communicate(timeout=120)  # to the end of the watchdog (it holds stderr)
    assert "wrote" in err and "rows" in err, err  # the watchdog dumped
    assert os.listdir(tmp_path / "tmp") == [], err  # and removed its dead parent's directory
