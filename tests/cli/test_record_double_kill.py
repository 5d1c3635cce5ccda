"""`record -- CMD` when the recorder and its watchdog are both SIGKILLed: the spool says where the
command's events are, so `recover` writes the command's scopes beside the rows and removes that
directory (only one of this user's, by that name); and a crash-safe Sampler killed the same way
leaves no events directory behind once the next one starts."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import tempfile
import textwrap
import time
from pathlib import Path

import pyarrow.parquet as pq
import pytest
from stroboscope.cli import main
from stroboscope.formats.events_file import events_dir_note, events_dir_of_spool
from stroboscope.formats.shared_events import drained_dir

COMMAND = """
import time, stroboscope
for i in range(10):
    with stroboscope.annotate("step"):
        pass
print("ready", flush=True)
time.sleep(120)
"""


def _children(pid: int) -> list[int]:
    """The processes whose parent is ``pid`` (from /proc)."""
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat", "rb") as f:
                ppid = int(f.read().rpartition(b")")[2].split()[1])
        except (OSError, IndexError, ValueError):
            continue
        if ppid == pid:
            found.append(int(entry))
    return found


def _kill_all(pid: int) -> None:
    """SIGKILL ``pid`` and its children (the watchdog, the command) at once."""
    for p in [pid, *_children(pid)]:
        with contextlib.suppress(ProcessLookupError):
            os.kill(p, signal.SIGKILL)


def _record_then_kill_both(spool: Path, out: Path, script: str) -> str | None:
    """Run ``record`` on ``script`` (which prints "ready" once its scopes are written), then
    SIGKILL the recorder and its command together; the events directory the spool noted."""
    proc = subprocess.Popen(
        [
            *(sys.executable, "-m", "stroboscope", "record", "-q", "--spool", str(spool)),
            *("-o", str(out), "--", sys.executable, "-c", script),
        ],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert proc.stdout is not None
        assert proc.stdout.readline().strip() == "ready"
        note = events_dir_note(str(spool))
        _kill_all(proc.pid)
        proc.wait(timeout=30)
    finally:
        if proc.poll() is None:
            _kill_all(proc.pid)
            proc.wait()
        if proc.stdout is not None:
            proc.stdout.close()
    return note


def _recover_ten_steps(tmp_path: Path, spool: Path, capsys: pytest.CaptureFixture[str]) -> None:
    recovered = tmp_path / "recovered.parquet"
    assert main(["recover", str(spool), "-o", str(recovered)]) == 0
    said = capsys.readouterr().out
    assert "recovered 10 scope calls" in said, said
    scopes = pq.read_table(tmp_path / "recovered.scopes.parquet")
    assert scopes.column("name").to_pylist() == ["step"] * 10


def test_recover_after_a_double_kill_restores_the_commands_scopes(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    spool, out = tmp_path / "run.spool", tmp_path / "run.parquet"
    note = _record_then_kill_both(spool, out, textwrap.dedent(COMMAND))
    assert note is not None and os.path.isdir(note)  # nobody removed it
    assert not out.exists()  # nobody wrote it: both died
    _recover_ten_steps(tmp_path, spool, capsys)
    assert not os.path.exists(note)  # the command's events directory, read and removed


def test_recover_leaves_a_directory_not_ours_alone(tmp_path: Path) -> None:
    # A note naming a directory that is no events directory of ours is not followed.
    spool = tmp_path / "run.spool"
    victim = tmp_path / "precious"
    victim.mkdir()
    os.chmod(victim, 0o700)  # ours and private: only its name says it is no events directory
    (victim / "1.py.sev").write_bytes(b"")
    spool.write_bytes(b"")
    note = str(spool) + ".events-dir"
    Path(note).write_text(str(victim))
    assert events_dir_of_spool(str(spool)) is None  # not named stroboscope-events-*
    assert main(["recover", str(spool), "-o", str(tmp_path / "out.parquet")]) != 0
    assert victim.exists() and (victim / "1.py.sev").exists()


KILLED_SAMPLER = """
import os, sys, time
from stroboscope.recording.sampler import Sampler
s = Sampler(0.01, sources=["memory"], crash_safe=True).start()
print(os.environ["STROBOSCOPE_EVENTS_DIR"], flush=True)
time.sleep(120)
"""


def test_a_killed_samplers_events_directory_goes_at_the_next_start(tmp_path: Path) -> None:
    env = {**os.environ, "TMPDIR": str(tmp_path)}
    env.pop("STROBOSCOPE_EVENTS_DIR", None)
    proc = subprocess.Popen(
        [sys.executable, "-c", textwrap.dedent(KILLED_SAMPLER)],
        stdout=subprocess.PIPE,
        text=True,
        env=env,
    )
    try:
        assert proc.stdout is not None
        left = proc.stdout.readline().strip()
        _kill_all(proc.pid)
        proc.wait(timeout=30)
    finally:
        if proc.stdout is not None:
            proc.stdout.close()
    assert os.path.isdir(left) and Path(left).parent == tmp_path
    time.sleep(0.1)
    code = """
        import os
        from stroboscope.recording.sampler import Sampler
        with Sampler(0.01, sources=["memory"]):
            print(os.environ["STROBOSCOPE_EVENTS_DIR"])
    """
    again = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
    )
    assert again.returncode == 0, again.stderr
    assert not os.path.exists(left)  # the dead one's, removed by the next start
    assert tempfile.gettempdir() != str(tmp_path)  # this process's own temp dir untouched


# Ten calls, a wait until the drain kept them, then the command removes its events directory.
REMOVES_ITS_EVENTS = """
import glob, os, shutil, time, stroboscope
for i in range(10):
    with stroboscope.annotate("step"):
        pass
d = os.environ["STROBOSCOPE_EVENTS_DIR"]
(path,) = glob.glob(os.path.join(d, "*.py.sev"))
kept = os.path.join(d + ".drained", os.path.basename(path))
deadline = time.monotonic() + 60
while not os.path.exists(kept + ".strings") and time.monotonic() < deadline:
    time.sleep(0.05)
shutil.rmtree(d)
print("ready", flush=True)
time.sleep(120)
"""


def test_recover_after_a_double_kill_reads_what_the_drain_kept_of_a_removed_directory(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    spool = tmp_path / "run.spool"
    note = _record_then_kill_both(spool, tmp_path / "run.parquet", REMOVES_ITS_EVENTS)
    assert note is not None and not os.path.exists(note)  # the command removed it
    _recover_ten_steps(tmp_path, spool, capsys)
    assert not os.path.exists(drained_dir(note))  # what the drain kept, read and removed
