"""`record --edge-counters MODE -- CMD`: the command's edges carry their threads' own CPU
clocks, so the recording's scope table has each call's exact CPU time (``cpu_ns``), also for
scopes of 200 µs; off by default; a bad mode is named."""

from __future__ import annotations

import json
import sys
import textwrap
from pathlib import Path

import numpy as np
import pyarrow.parquet as pq
import pytest
from stroboscope.cli import main

SPIN = textwrap.dedent(
    """
    import json, sys, time
    import stroboscope
    measured = []
    for _ in range(50):
        with stroboscope.annotate("spin"):
            t0 = time.thread_time_ns()
            while time.thread_time_ns() - t0 < 200_000:
                pass
            measured.append(time.thread_time_ns() - t0)
    open(sys.argv[1], "w").write(json.dumps(measured))
    """
)


def _record(tmp_path: Path, *options: str) -> tuple[Path, list[int]]:
    out, seen = tmp_path / "run.parquet", tmp_path / "measured.json"
    argv = ["record", "-q", "--interval", "0.05", *options, "-o", str(out), "--"]
    assert main([*argv, sys.executable, "-c", SPIN, str(seen)]) == 0
    return tmp_path / "run.scopes.parquet", json.loads(seen.read_text())


def test_the_recording_has_each_calls_exact_cpu_time(tmp_path: Path) -> None:
    scopes, measured = _record(tmp_path, "--edge-counters", "cpu", "--no-nvtx")
    table = pq.read_table(scopes)
    spin = table.filter(np.asarray(table.column("name").to_pylist()) == "spin")
    cpu = np.asarray(spin.column("cpu_ns").to_numpy(), dtype=np.int64)
    excess = cpu - np.asarray(measured)
    assert len(cpu) == 50 and (excess >= 0).all() and np.median(excess) < 50_000, excess


def test_the_report_shows_the_cpu_time_per_call_from_the_edges(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    _record(tmp_path, "--edge-counters", "cpu", "--no-nvtx")
    capsys.readouterr()
    assert main(["report", str(tmp_path / "run.parquet")]) == 0
    lines = capsys.readouterr().out.splitlines()
    header = next(line for line in lines if line.startswith("scope "))
    assert "cpu/call (edges)" in header
    spin = next(line for line in lines[lines.index(header) :] if line.startswith("spin "))
    assert "µs [50]" in spin or "ms [50]" in spin


def test_off_by_default(tmp_path: Path) -> None:
    scopes, _ = _record(tmp_path, "--no-nvtx")
    assert "cpu_ns" not in pq.read_table(scopes).column_names


def test_a_bad_mode_is_named(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["record", "--edge-counters", "yes", "-o", "x.parquet", "--", "true"]) == 2
    err = capsys.readouterr().err
    assert "--edge-counters" in err and "'cpu'" in err and "'yes'" in err
