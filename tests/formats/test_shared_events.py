"""The shared-events reader: files written by real processes read back whole, and files cut
short, overwritten with garbage or not files at all read as far as they go and counted."""

from __future__ import annotations

import json
import os
import struct
import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pytest
from _shared_events import SCOPES, child_env, run, start
from stroboscope.formats.shared_events import (
    EVENTS_CAPACITY_ENV,
    EVENTS_SCHEMA,
    HEADER_BYTES,
    read_events_dir,
    read_events_file,
)


def _files(table: pa.Table) -> list[dict[str, Any]]:
    files: list[dict[str, Any]] = json.loads(table.schema.metadata[b"events_files"])
    return files


@pytest.fixture(scope="module")
def written(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A directory with the file of one process that wrote 50 outer + 50 inner scopes."""
    d = tmp_path_factory.mktemp("events")
    run(SCOPES.format(n=50), d)
    return d


def _one_file(d: Path) -> Path:
    (path,) = d.iterdir()
    return path


def test_a_process_file_reads_back_whole(written: Path) -> None:
    table = read_events_dir(written)
    assert table.schema.remove_metadata() == EVENTS_SCHEMA
    assert table.num_rows == 200
    ev = table.to_pydict()
    assert ev["scope"].count("outer") == ev["scope"].count("inner") == 100
    assert sorted(set(ev["labels"])) == ["", '{"step":"0"}', '{"step":"1"}', '{"step":"2"}']
    assert set(ev["producer"]) == {"py"}
    assert ev["mono_ns"] == sorted(ev["mono_ns"])
    assert set(ev["depth"]) == {0, 1}
    (counts,) = _files(table)
    assert counts["records"] == 200 and counts["lost"] == 0 and counts["damaged"] == ""
    assert table.schema.metadata[b"events_lost"] == b"0"
    assert _one_file(written).stat().st_mode & 0o777 == 0o600


def test_four_processes_at_once_lose_nothing_and_read_each_edge_once(tmp_path: Path) -> None:
    n = 20_000
    code = f"""
        import stroboscope
        s = stroboscope.annotate("edge")
        for _ in range({n}):
            with s:
                pass
    """
    procs = [start(code, tmp_path) for _ in range(4)]
    assert [p.wait(timeout=300) for p in procs] == [0, 0, 0, 0]
    table = read_events_dir(tmp_path)
    pids = np.asarray(table.column("pid").to_numpy())
    assert sorted(set(pids.tolist())) == sorted(p.pid for p in procs)
    kind = np.asarray(table.column("kind").to_numpy())
    for p in procs:
        mine = kind[pids == p.pid]
        assert (mine == 1).sum() == n and (mine == 2).sum() == n
    assert table.schema.metadata[b"events_lost"] == b"0"
    assert all(c["records"] == 2 * n and c["lost"] == 0 for c in _files(table))


def test_a_file_cut_short_is_read_up_to_the_cut(written: Path, tmp_path: Path) -> None:
    data = _one_file(written).read_bytes()
    whole, _ = read_events_file(_one_file(written))
    # Cut inside the states: the records whose states are left are read.
    capacity = struct.unpack_from("<Q", data, 32)[0]
    states = struct.unpack_from("<Q", data, 48)[0]
    cut = tmp_path / "1.py.sev"
    cut.write_bytes(data[: states + 8 * 150])
    table, counts = read_events_file(cut)
    assert table.num_rows == 150
    assert table.column("mono_ns").to_pylist() == whole.column("mono_ns").to_pylist()[:150]
    assert "cut short" in counts.damaged and str(capacity) in counts.damaged
    # The strings gone: the names are said to be unknown, the records are still read.
    table, counts = read_events_file(_write(tmp_path / "2.py.sev", data[: states + 8 * 200]))
    assert table.num_rows == 200 and set(table.column("scope").to_pylist()) <= {
        "<scope 1>",
        "<scope 3>",
    }
    # Cut inside the header, or before the states: nothing to read, said so.
    for n, size in enumerate((10, HEADER_BYTES - 1, HEADER_BYTES + 64)):
        table, counts = read_events_file(_write(tmp_path / f"{3 + n}.py.sev", data[:size]))
        assert table.num_rows == 0 and counts.damaged


def _write(path: Path, data: bytes) -> Path:
    path.write_bytes(data)
    return path


def test_damaged_files_are_counted_never_raised(written: Path, tmp_path: Path) -> None:
    data = bytearray(_one_file(written).read_bytes())
    # A record whose kind is garbage: left out and counted; the others read.
    slots = struct.unpack_from("<Q", data, 40)[0]
    bad = bytearray(data)
    bad[slots + 3 * 8 + 6] = 0x77
    _write(tmp_path / "10.py.sev", bytes(bad))
    # A header with a capacity that is not a power of two, a wrong version, random bytes.
    wrong_cap = bytearray(data)
    struct.pack_into("<Q", wrong_cap, 32, 1000)
    _write(tmp_path / "11.py.sev", bytes(wrong_cap))
    wrong_version = bytearray(data)
    struct.pack_into("<I", wrong_version, 8, 99)
    _write(tmp_path / "12.py.sev", bytes(wrong_version))
    _write(tmp_path / "13.py.sev", os.urandom(HEADER_BYTES * 2))
    # Not files: a directory, a FIFO, a symbolic link; and a name that is not an events file.
    (tmp_path / "14.py.sev").mkdir()
    os.mkfifo(tmp_path / "15.py.sev")
    (tmp_path / "16.py.sev").symlink_to(_one_file(written))
    _write(tmp_path / "notes.txt", b"not ours")
    table = read_events_dir(tmp_path)
    counts = {c["file"]: c for c in _files(table)}
    assert sorted(counts) == [f"{n}.py.sev" for n in range(10, 17)]
    assert (
        counts["10.py.sev"]["records"] == 199 and "unknown kind" in counts["10.py.sev"]["damaged"]
    )
    assert "capacity 1000" in counts["11.py.sev"]["damaged"]
    assert "version 99" in counts["12.py.sev"]["damaged"]
    assert "no events header" in counts["13.py.sev"]["damaged"]
    assert "directory" in counts["14.py.sev"]["damaged"]
    assert "FIFO" in counts["15.py.sev"]["damaged"]
    assert "cannot be read" in counts["16.py.sev"]["damaged"]
    assert table.num_rows == 199
    assert table.schema.metadata[b"events_damaged"] == b"7"


def test_a_path_that_is_no_directory_is_refused(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="path must be a directory"):
        read_events_dir(tmp_path / "missing")
    assert read_events_dir(tmp_path).num_rows == 0


def test_a_ring_that_laps_keeps_the_newest_and_counts_the_rest(tmp_path: Path) -> None:
    env = {**child_env(tmp_path), EVENTS_CAPACITY_ENV: "1024"}
    code = "import stroboscope\nfor i in range(1500):\n    with stroboscope.annotate('s'): pass"
    subprocess.run([sys.executable, "-c", code], env=env, check=True, timeout=120)
    table = read_events_dir(tmp_path)
    (counts,) = _files(table)
    assert table.num_rows == 1024  # the newest lap of the ring
    assert counts["overwritten"] == counts["lost"] == 3000 - 1024
    assert table.schema.metadata[b"events_lost"] == str(3000 - 1024).encode()
    kinds = table.column("kind").to_pylist()
    assert kinds[:2] == [1, 2] and kinds.count(1) == kinds.count(2) == 512
