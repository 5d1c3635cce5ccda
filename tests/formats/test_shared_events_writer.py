"""The events files' writer (``cpp/src/shared_events.cpp``) where its directory or its disk is not
what it should be: a directory another user owns, or one anyone may write into, is never
written (said once on stderr); a process that cannot make its file leaves a ``.failed`` name
that the reader counts; a ring size beyond the largest a reader takes is not made."""

from __future__ import annotations

import json
import os
import struct
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from _shared_events import SCOPES, child_env
from stroboscope.formats.shared_events import (
    EVENTS_CAPACITY_ENV,
    UNMADE,
    read_events_dir,
)

LIMITED = """
import resource, signal
signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
resource.setrlimit(resource.RLIMIT_FSIZE, (1 << 20, 1 << 20))
"""
"""A file-size limit of 1 MiB (below an events file's size): its making fails as on a full
disk."""


def _run(code: str, events_dir: Path, **env: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)],
        env={**child_env(events_dir), **env},
        capture_output=True,
        text=True,
        timeout=120,
    )


@pytest.mark.parametrize("whose", ["open-to-all", "another-user"])
def test_a_directory_not_ours_alone_is_never_written(tmp_path: Path, whose: str) -> None:
    d = tmp_path / "events"
    d.mkdir()
    if whose == "another-user":
        if os.geteuid() != 0:
            pytest.skip("giving a directory to another user needs root")
        os.chown(d, 65534, 65534)
    os.chmod(d, 0o777)
    out = _run(SCOPES.format(n=5) + "print('done')", d)
    assert out.returncode == 0 and out.stdout.strip() == "done", out.stderr  # never raised
    assert os.listdir(d) == []
    said = "another user's" if whose == "another-user" else "may be written by other users"
    assert f"scope events are not written into {d}" in out.stderr and said in out.stderr
    assert out.stderr.count("scope events are not written") == 1  # once, not per edge


def test_a_process_that_cannot_make_its_file_is_counted(tmp_path: Path) -> None:
    code = LIMITED + SCOPES.format(n=5)
    out = _run(code, tmp_path)
    assert out.returncode == 0, out.stderr
    (name,) = os.listdir(tmp_path)
    assert name.endswith(".py.sev.failed") and os.path.getsize(tmp_path / name) == 0
    table = read_events_dir(tmp_path)
    meta = table.schema.metadata
    assert table.num_rows == 0 and meta[b"events_unmade"] == b"1"
    (counts,) = json.loads(meta[b"events_files"])
    assert counts["damaged"] == UNMADE and counts["producer"] == "py"


def test_a_ring_beyond_the_largest_is_not_made(tmp_path: Path) -> None:
    out = _run(SCOPES.format(n=1), tmp_path, **{EVENTS_CAPACITY_ENV: str(1 << 25)})
    assert out.returncode == 0, out.stderr
    (path,) = tmp_path.iterdir()
    capacity = struct.unpack_from("<Q", path.read_bytes(), 32)[0]
    assert capacity == 1 << 20  # the default, not 2**25
    assert read_events_dir(tmp_path).num_rows == 4
