"""A descriptor limit too low to record: the error says what could not be opened and how to
raise the limit (``ulimit -n``), naming the limit, not a bare ``[Errno 24] Too many open files``."""

from __future__ import annotations

import errno
import resource
import subprocess
import sys
from pathlib import Path

import pytest
from stroboscope.cli import main

LIMITS = range(12, 23)  # from the spool's first file to the watchdog's pipes and child


def _limited(limit: int) -> None:
    resource.setrlimit(resource.RLIMIT_NOFILE, (limit, limit))


def test_record_under_a_low_descriptor_limit_says_what_and_how(tmp_path: Path) -> None:
    failed = 0
    for limit in LIMITS:
        out = str(tmp_path / f"run-{limit}.parquet")
        proc = subprocess.run(
            [sys.executable, "-m", "stroboscope", "record", "-q", "-o", out, "--duration", "0.2"],
            preexec_fn=lambda limit=limit: _limited(limit),  # type: ignore[misc]
            capture_output=True,
            text=True,
            timeout=120,
        )
        if proc.returncode == 0:
            continue  # enough descriptors at this limit
        failed += 1
        err = proc.stderr
        assert proc.returncode == 2 and err.startswith("stroboscope record: error: "), err
        assert "[Errno 24]" in err and "cannot " in err, err  # what could not be done
        assert f"at most {limit} open files" in err and "ulimit -n" in err, err
    assert failed >= 3, "no limit in the range was low enough to fail"


def test_any_command_hitting_the_limit_names_it(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    from stroboscope.cli import info

    def out_of_descriptors(_args: object) -> int:
        raise OSError(errno.EMFILE, "Too many open files", "run.parquet")

    monkeypatch.setattr(info, "run", out_of_descriptors)
    soft = resource.getrlimit(resource.RLIMIT_NOFILE)[0]
    assert main(["info", "run.parquet"]) == 2
    err = capsys.readouterr().err
    assert "Too many open files: 'run.parquet'" in err, err
    assert f"at most {soft} open files" in err and "ulimit -n" in err, err
