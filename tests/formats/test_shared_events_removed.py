"""What a drain kept of a command's events, when the command removes them: a file unlinked, the
whole directory removed or replaced by a link (the drain writes nothing there, nor where the
link points), and garbage planted at a drained copy's name (refused in words, never read as
scopes)."""

from __future__ import annotations

import json
import logging
import os
import shutil
import struct
import subprocess
import zlib
from pathlib import Path

import numpy as np
import pytest
from _shared_events import SCOPES, run, start
from stroboscope.formats.shared_events import (
    REMOVED,
    drained_dir,
    read_events_dir,
    read_events_file,
)
from stroboscope.formats.shared_events_drain import EventsDrain
from stroboscope.formats.shared_events_records import DRAINED_MAGIC, DRAINED_SUFFIX

# 30 calls ("a", 60 edges), a line, then 20 more ("b", 40 edges) after a line is read.
TWO_PARTS = """
import sys, stroboscope
for i in range(30):
    with stroboscope.annotate("a"):
        pass
print("a", flush=True)
sys.stdin.readline()
for i in range(20):
    with stroboscope.annotate("b"):
        pass
"""


def _run_removing(d: Path, remove: object) -> EventsDrain:
    """The writer of :data:`TWO_PARTS` in ``d``, drained; ``remove()`` between its parts."""
    drain = EventsDrain(str(d))
    proc = start(TWO_PARTS, d, stdin=subprocess.PIPE, stdout=subprocess.PIPE)
    assert proc.stdin is not None and proc.stdout is not None
    with proc, proc.stdin, proc.stdout:
        assert proc.stdout.readline().strip() == "a"
        assert drain.poll() == 60
        remove()  # type: ignore[operator]
        proc.stdin.write("\n")
        proc.stdin.flush()
        assert proc.wait(timeout=60) == 0
    assert drain.stop() == 100  # the rest, through the descriptor kept while it wrote
    return drain


def _files(table: object) -> list[dict[str, object]]:
    return list(json.loads(table.schema.metadata[b"events_files"]))  # type: ignore[attr-defined]


def test_a_file_the_command_removed_is_read_from_what_the_drain_kept(tmp_path: Path) -> None:
    d = tmp_path / "events"
    d.mkdir(mode=0o700)

    def unlink() -> None:
        (sev,) = d.glob("*.sev")
        sev.unlink()

    _run_removing(d, unlink)
    table = read_events_dir(d)
    names = table.column("scope").to_pylist()
    assert names.count("a") == 60 and names.count("b") == 40 and len(names) == 100
    (counts,) = _files(table)
    assert counts["damaged"] == REMOVED and counts["lost"] == 0


def test_a_directory_replaced_by_a_link_is_never_written_through(tmp_path: Path) -> None:
    d, victim = tmp_path / "events", tmp_path / "victim"
    d.mkdir(mode=0o700)
    victim.mkdir()

    def replace() -> None:
        shutil.rmtree(d)
        os.symlink(victim, d)

    _run_removing(d, replace)
    assert list(victim.iterdir()) == []  # nothing written where the link points
    table = read_events_dir(d)
    assert sorted(set(table.column("scope").to_pylist())) == ["a", "b"]
    assert table.num_rows == 100
    damaged = [str(c["damaged"]) for c in _files(table)]
    assert any("symbolic link" in why for why in damaged), damaged


def test_a_directory_the_command_removed_is_read_from_what_the_drain_kept(tmp_path: Path) -> None:
    d = tmp_path / "events"
    d.mkdir(mode=0o700)
    _run_removing(d, lambda: shutil.rmtree(d))
    table = read_events_dir(d)
    assert table.num_rows == 100 and table.schema.metadata[b"events_lost"] == b"0"


def test_garbage_at_a_drained_copys_name_is_refused_in_words(tmp_path: Path) -> None:
    d = tmp_path / "events"
    d.mkdir(mode=0o700)
    _run_removing(d, lambda: None)
    (sev,) = d.glob("*.sev")
    kept = Path(drained_dir(d)) / (sev.name + DRAINED_SUFFIX)
    # 1 MB of noise in place of the drained copy: no scope of it is read, and it is said.
    kept.write_bytes(np.random.default_rng(5).bytes(1 << 20))
    table, counts = read_events_file(sev)
    assert set(table.column("scope").to_pylist()) <= {"a", "b"}
    assert "not one a drain wrote" in counts.damaged
    # A batch whose records do not match its checksum: refused, the batches before it read.
    good = kept.with_suffix(".good")
    records = np.arange(10, dtype="<u8").reshape(2, 5).tobytes()
    batch = struct.pack("<II", 2, zlib.crc32(records) ^ 1) + records
    kept.write_bytes(DRAINED_MAGIC + batch)
    table, counts = read_events_file(sev)
    assert "checksum" in counts.damaged
    assert set(table.column("scope").to_pylist()) <= {"a", "b"}
    assert not good.exists()


def test_an_events_directory_open_to_others_is_not_drained(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    # The recorder makes its events directory 0700: one open to others (or another user's)
    # is not the one it made, and the drain writes nothing beside it.
    d = tmp_path / "events"
    d.mkdir(mode=0o700)
    run(SCOPES.format(n=5), d)
    d.chmod(0o755)
    with caplog.at_level(logging.WARNING, "stroboscope"):
        assert EventsDrain(str(d)).stop() == 0
    assert "not this user's private directory" in caplog.text
    assert not os.path.exists(drained_dir(d))
    d.chmod(0o700)
    assert EventsDrain(str(d)).stop() == 20  # 5 x 2 calls, 2 edges each
