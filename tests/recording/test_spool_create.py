"""Creating a spool: exclusively and locked (one recording per path), in a directory only you can
write, and nothing left behind when the creation fails."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest
import stroboscope.recording.sampler as recording_sampler
import stroboscope.sampling._sampler as base_sampler
from stroboscope import Sampler, recover

HOLDER = textwrap.dedent(
    """
    import sys
    import stroboscope
    s = stroboscope.Sampler(0.01, sources=["memory"], spool=sys.argv[1], capacity=256,
                            segment_seconds=1)
    s.tick_now(5)
    print("holding", flush=True)
    sys.stdin.readline()  # the test starts its second recording meanwhile
    s.tick_now(5)
    s.close()
    print("done", flush=True)
    """
)


def _skip_path_checks(monkeypatch: pytest.MonkeyPatch) -> None:
    """As if another process made the file between the Python checks and the creation."""
    monkeypatch.setattr(recording_sampler, "check_spool", os.path.abspath)
    monkeypatch.setattr(base_sampler, "check_new_file", lambda name, p: os.path.abspath(p))


def test_a_second_recording_on_a_live_spool_is_refused(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "run.spool"
    with subprocess.Popen(
        [sys.executable, "-c", HOLDER, str(path)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    ) as holder:
        assert holder.stdin is not None and holder.stdout is not None
        assert holder.stdout.readline().strip() == "holding"
        # The checks see the lock and name the recording that holds it.
        with pytest.raises(
            ValueError, match=rf"in use by a running recording \(pid {holder.pid}\)"
        ):
            Sampler(0.01, sources=["memory"], spool=path, capacity=256, segment_seconds=1)
        # Past the checks (a start racing the first): the exclusive create refuses the path.
        _skip_path_checks(monkeypatch)
        with pytest.raises((OSError, RuntimeError), match="spool already exists") as info:
            Sampler(0.01, sources=["memory"], spool=path, capacity=256, segment_seconds=1)
        assert str(path) in str(info.value)
        holder.stdin.write("go\n")
        holder.stdin.flush()
        assert holder.stdout.readline().strip() == "done"
        assert holder.wait(timeout=60) == 0
    frame = recover(path)  # the first recording is whole: its 10 rows, in order
    mono = frame.to_arrow().column("mono_ns").to_numpy()
    assert len(mono) == 10 and np.all(np.diff(mono) > 0)


def test_a_file_made_after_the_checks_is_never_truncated_or_removed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "run.spool"
    path.write_bytes(b"another run's file")
    _skip_path_checks(monkeypatch)
    with pytest.raises((OSError, RuntimeError), match="spool already exists"):
        Sampler(0.01, sources=["memory"], spool=path, capacity=256, segment_seconds=1)
    assert path.read_bytes() == b"another run's file"


def test_a_planted_symlink_is_not_followed(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    victim = tmp_path / "victim"
    victim.write_bytes(b"keep")
    path = tmp_path / "run.spool"
    path.symlink_to(victim)
    _skip_path_checks(monkeypatch)
    with pytest.raises((OSError, RuntimeError), match="spool"):
        Sampler(0.01, sources=["memory"], spool=path, capacity=256, segment_seconds=1)
    assert victim.read_bytes() == b"keep" and path.is_symlink()


FSIZE_CHILD = textwrap.dedent(
    """
    import resource, signal, sys
    import stroboscope
    signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # EFBIG instead of death past the limit
    resource.setrlimit(resource.RLIMIT_FSIZE, (4096, 4096))  # the spool cannot get its blocks
    try:
        stroboscope.Sampler(0.01, sources=["memory"], spool=sys.argv[1], capacity=4096,
                            segment_seconds=1)
    except (OSError, RuntimeError) as exc:
        print(exc)
    """
)


def test_a_spool_that_cannot_get_its_blocks_is_removed(tmp_path: Path) -> None:
    path = tmp_path / "run.spool"
    out = subprocess.run(
        [sys.executable, "-c", FSIZE_CHILD, str(path)], capture_output=True, text=True, timeout=60
    )
    assert out.returncode == 0, out.stderr
    assert not os.path.lexists(path)  # no full-size headerless file blocking the next run
    assert "cannot reserve" in out.stdout and str(path) in out.stdout
    s = Sampler(0.01, sources=["memory"], spool=path, capacity=256, segment_seconds=1)
    s.tick_now(2)
    s.close()
    assert len(recover(path)) == 2


@pytest.mark.parametrize("mode", [0o777, 0o770, 0o722], ids=oct)
def test_a_directory_others_can_write_is_refused_unless_sticky(tmp_path: Path, mode: int) -> None:
    shared = tmp_path / "shared"
    shared.mkdir()
    os.chmod(shared, mode)
    with pytest.raises(ValueError, match=f"writable by others \\(mode {mode:04o}\\)"):
        Sampler(0.01, sources=["memory"], spool=shared / "x.spool", segment_seconds=1)
    assert os.listdir(shared) == []
    os.chmod(shared, mode | 0o1000)  # sticky: nobody else can remove or rename our files
    s = Sampler(0.01, sources=["memory"], spool=shared / "x.spool", segment_seconds=1)
    s.tick_now(1)
    s.close()
    assert len(recover(shared / "x.spool")) == 1


def test_a_setup_that_fails_after_the_spool_is_made_removes_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    def no_watchdog(jobs: object) -> None:
        raise OSError(24, "Too many open files")

    monkeypatch.setattr(recording_sampler, "Watchdog", no_watchdog)
    path = tmp_path / "run.spool"
    with pytest.raises(OSError, match="Too many open files"):
        Sampler(0.01, sources=["memory"], spool=path, crash_safe=True, segment_seconds=1)
    assert os.listdir(tmp_path) == []  # the next run can start on the same path
    monkeypatch.undo()
    s = Sampler(0.01, sources=["memory"], spool=path, capacity=256, segment_seconds=1)
    s.close()


def test_a_failed_setup_never_removes_a_file_swapped_in_at_the_spool_name(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "run.spool"

    def swap_then_fail(jobs: object) -> None:
        os.rename(path, tmp_path / "ours.spool")  # another run's file now holds the name
        path.write_text("theirs")
        raise OSError(24, "Too many open files")

    monkeypatch.setattr(recording_sampler, "Watchdog", swap_then_fail)
    with pytest.raises(OSError, match="Too many open files"):
        Sampler(0.01, sources=["memory"], spool=path, crash_safe=True, segment_seconds=1)
    assert path.read_text() == "theirs"
