"""Edge counters in the shared events of a recorded command (``STROBOSCOPE_EDGE_COUNTERS``): the
writer follows each edge with its thread's own counters (records of kinds 3 and 4, layout
version 2), the reader pairs them with their edges, and a 200 µs scope in the command has its
exact CPU time. Off by default; a version-1 file is still read; another version is named."""

from __future__ import annotations

import json
import os
import struct
from pathlib import Path

import numpy as np
import pytest
from _shared_events import child_env
from stroboscope.analysis.scope_edges import shared_intervals
from stroboscope.formats.shared_events import (
    COUNTER_COLUMNS,
    EDGE_COUNTERS_ENV,
    read_events_dir,
    read_events_file,
)

SPIN = """
import json, time
import stroboscope
measured = []
for _ in range({n}):
    with stroboscope.annotate("spin"):
        t0 = time.thread_time_ns()
        while time.thread_time_ns() - t0 < 200_000:
            pass
        measured.append(time.thread_time_ns() - t0)
print(json.dumps(measured))
"""


def _run(tmp: Path, n: int, counters: str | None) -> list[int]:
    import subprocess
    import sys

    env = child_env(tmp)
    env.pop(EDGE_COUNTERS_ENV, None)
    if counters is not None:
        env[EDGE_COUNTERS_ENV] = counters
    out = subprocess.run(
        [sys.executable, "-c", SPIN.format(n=n)],
        env=env,
        text=True,
        capture_output=True,
        timeout=120,
    )
    assert out.returncode == 0, out.stderr
    measured: list[int] = json.loads(out.stdout)
    return measured


def _file(d: Path) -> Path:
    (only,) = [p for p in d.iterdir() if p.name.endswith(".sev")]
    return only


def test_a_200us_scope_in_the_command_has_its_exact_cpu_time(tmp_path: Path) -> None:
    measured = _run(tmp_path, 100, "cpu")
    iv = shared_intervals(tmp_path)
    cpu = np.asarray(iv.column("cpu_ns").to_numpy(), dtype=np.int64)
    assert iv.num_rows == 100 and iv.column("cpu_ns").null_count == 0
    excess = cpu - np.asarray(measured)
    assert (excess >= 0).all(), excess
    assert np.median(excess) < 50_000, excess
    assert excess.max() < 1_000_000, excess
    assert iv.column("minflt").null_count == 100  # mode "cpu"
    assert iv.schema.metadata[b"events_lost"] == b"0"
    # The file holds 4 records per scope; the reader hands out the 2 edges, each with its clock.
    events, counts = read_events_file(_file(tmp_path))
    assert counts.records == 200 and counts.lost == 0 and not counts.damaged
    assert events.column("cpu_ns").null_count == 0
    assert struct.unpack_from("<I", _file(tmp_path).read_bytes(), 8)[0] == 2


def test_rusage_mode_in_the_command(tmp_path: Path) -> None:
    _run(tmp_path, 5, "rusage")
    events = read_events_dir(tmp_path)
    for name in COUNTER_COLUMNS:
        assert events.column(name).null_count == 0, name


@pytest.mark.parametrize("value", [None, "", "0", "yes"])
def test_off_by_default_and_for_a_value_the_writer_does_not_know(
    tmp_path: Path, value: str | None
) -> None:
    _run(tmp_path, 3, value)
    events, counts = read_events_file(_file(tmp_path))
    assert counts.records == 6 and counts.lost == 0 and not counts.damaged
    assert all(events.column(name).null_count == 6 for name in COUNTER_COLUMNS)
    assert "cpu_ns" not in shared_intervals(tmp_path).column_names


def test_a_version_1_file_is_read_and_another_version_is_named(tmp_path: Path) -> None:
    _run(tmp_path, 3, None)
    data = bytearray(_file(tmp_path).read_bytes())
    v1, v3 = tmp_path / "v1", tmp_path / "v3"
    v1.mkdir()
    v3.mkdir()
    struct.pack_into("<I", data, 8, 1)
    (v1 / "10.py.sev").write_bytes(bytes(data))
    struct.pack_into("<I", data, 8, 3)
    (v3 / "10.py.sev").write_bytes(bytes(data))
    _, counts = read_events_file(v1 / "10.py.sev")
    assert counts.records == 6 and not counts.damaged
    _, counts = read_events_file(v3 / "10.py.sev")
    assert counts.damaged == "layout version 3 (this reader knows versions 1 and 2)"
    assert os.path.getsize(v3 / "10.py.sev") > 0
