"""``stroboscope stacks``: a recording's stacks as a flame graph on stdout or in -o FILE, what
the weight means on stderr, and the refusals (no stacks, a weight that is no column, a binary
format on a terminal, -o over an input or an existing file)."""

from __future__ import annotations

import json
import os
import stat
import sys
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from stroboscope.cli import main
from stroboscope.formats.stacks import write_stacks

MS = 1_000_000
T0 = 1_800_000_000_000_000_000  # realtime of the first row (2027-01-15T08:00:00Z)


def recording(tmp_path: Path, *, stacks: bool = True) -> Path:
    """Rows at 0..4 ms, power 10..50 W. Thread 1 sampled at 1..4 ms (stacks 0, 0, 1, 1;
    CPU -, 0.6, 1.0, 0 ms); thread 2 at 2..4 ms (stack 2; CPU -, 0.4, 0 ms)."""
    schema = pa.schema(
        [
            pa.field("time", pa.timestamp("ns", "UTC")),
            pa.field("mono_ns", pa.int64()),
            pa.field("gpu.0.power_w", pa.float64(), metadata={"unit": "W", "kind": "gauge"}),
        ]
    )
    rows = pa.table(
        [[T0 + i * MS for i in range(5)], [i * MS for i in range(5)], [10.0, 20, 30, 40, 50]],
        schema=schema,
    )
    run = tmp_path / "run.parquet"
    pq.write_table(rows, run)
    if stacks:
        samples = pa.table(
            {
                "mono_ns": [k * MS for k in (1, 2, 3, 4, 2, 3, 4)],
                "pid": [9] * 7,
                "tid": [1, 1, 1, 1, 2, 2, 2],
                "stack_id": [0, 0, 1, 1, 2, 2, 2],
                "cpu_ns": [None, 600_000, 1_000_000, 0, None, 400_000, 0],
                "thread": ["MainThread"] * 4 + ["w"] * 3,
            }
        )
        frames = pa.table(
            {
                "stack_id": [0, 0, 1, 1, 2],
                "depth": [0, 1, 0, 1, 0],
                "function": ["main", "a", "main", "b", "worker"],
                "file": ["m.py", "m.py", "m.py", "m.py", "w.py"],
                "line": [1, 10, 1, 20, 5],
            }
        )
        write_stacks(samples, frames, run)
    return run


A, B, W = "main (m.py:1);a (m.py:10)", "main (m.py:1);b (m.py:20)", "worker (w.py:5)"


def folded(text: str) -> dict[str, int]:
    out = {}
    for line in text.splitlines():
        stack, _, n = line.rpartition(" ")
        out[stack] = int(n)
    return out


def test_cpu_flame_graph_on_stdout_and_the_rule_on_stderr(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    run = recording(tmp_path)
    assert main(["stacks", str(run)]) == 0
    out, err = capsys.readouterr()
    assert folded(out) == {A: 600_000, B: 1_000_000, W: 400_000}
    assert "7 samples in 3 stacks, weight 2e+06 ns" in err
    assert "CPU time since the thread's previous sample" in err


def test_power_weight_in_joules_shared_by_cpu_time(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Power linear between rows: 0.025 J to a (row 2), 0.035 J split 1.0 : 0.4 between b and
    worker (row 3), 0.045 J split 1.6 : 0.4 (row 4, no CPU: by their recent CPU): in nJ."""
    run = recording(tmp_path)
    assert main(["stacks", str(run), "--weight", "gpu.0.power_w"]) == 0
    out, err = capsys.readouterr()
    assert folded(out) == {
        A: 25_000_000,
        B: round((0.035 / 1.4 + 0.036) * 1e9),
        W: round((0.035 * 0.4 / 1.4 + 0.009) * 1e9),
    }
    assert "weight 0.105 J" in err and "in proportion to their CPU time" in err


def test_a_time_range_and_a_scope(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    run = recording(tmp_path)
    # --from an ISO time 2.5 ms after the first row (realtime T0); --to 3 ms after it, the time
    # of two samples: both ends are kept, as report keeps them
    start, end = "2027-01-15T08:00:00.0025Z", "0.003"
    assert main(["stacks", str(run), "--from", start, "--to", end]) == 0
    assert folded(capsys.readouterr().out) == {B: 1_000_000, W: 400_000}
    assert main(["stacks", str(run), "--from", "4.5ms"]) == 0  # after every sample
    out, err = capsys.readouterr()
    assert out == "" and "no sample lies in the selection: the graph is empty" in err
    scopes = pa.table(
        {
            "name": ["step"],
            "path": ["step"],
            "thread_id": pa.array([2], pa.int64()),
            "stack_id": pa.array([2], pa.uint64()),
            "depth": pa.array([0], pa.int32()),
            "begin_ns": pa.array([2_500_000], pa.int64()),
            "end_ns": pa.array([5 * MS], pa.int64()),
        }
    )
    pq.write_table(scopes, tmp_path / "run.scopes.parquet")
    assert main(["stacks", str(run), "--scope", "step", "--weight", "wall"]) == 0
    assert folded(capsys.readouterr().out) == {W: 2 * MS}  # thread 2 at 3 and 4 ms


def test_speedscope_and_pprof_files_and_the_output_checks(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    run = recording(tmp_path)
    out = tmp_path / "flame.json"
    assert main(["stacks", str(run), "--format", "speedscope", "-o", str(out)]) == 0
    assert f"wrote {out}" in capsys.readouterr().out
    assert stat.S_IMODE(os.stat(out).st_mode) == 0o600
    doc = json.loads(out.read_text())
    assert doc["profiles"][0]["weights"] == [600_000, 1_000_000, 400_000]
    assert main(["stacks", str(run), "--format", "speedscope", "-o", str(out)]) == 2
    assert "already exists; give --force" in capsys.readouterr().err
    assert main(["stacks", str(run), "--format", "pprof", "-o", str(out), "--force"]) == 0
    assert out.read_bytes()[:2] == b"\x1f\x8b"
    for target, what in (
        (run, "is the input"),
        (tmp_path / "run.stacks.parquet", "is the stack samples of the input"),
        (tmp_path / "run.stack_frames.parquet", "is the interned stacks of the input"),
    ):
        before = target.read_bytes()
        assert main(["stacks", str(run), "-o", str(target), "--force"]) == 2
        assert what in capsys.readouterr().err
        assert target.read_bytes() == before


def test_a_binary_format_is_not_printed_on_a_terminal(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    run = recording(tmp_path)
    monkeypatch.setattr(sys.stdout, "isatty", lambda: True)
    assert main(["stacks", str(run), "--format", "pprof"]) == 2
    assert "--format pprof is binary: give -o FILE" in capsys.readouterr().err
    assert main(["stacks", str(run)]) == 0  # folded text is fine on a terminal
    assert folded(capsys.readouterr().out)[A] == 600_000


def test_refusals_name_what_is_wrong(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    run = recording(tmp_path, stacks=False)
    assert main(["stacks", str(run)]) == 2
    assert "recorded without --stacks" in capsys.readouterr().err
    run = recording(tmp_path)
    assert main(["stacks", str(run), "--weight", "gpu.0.pwr_w"]) == 2
    assert "close names: gpu.0.power_w" in capsys.readouterr().err
    assert main(["stacks", str(tmp_path / "nothing.parquet")]) == 2
    assert "nothing.parquet: no such file" in capsys.readouterr().err
    assert main(["stacks", str(run), "--scope", "step"]) == 2
    assert "has no scope intervals beside it" in capsys.readouterr().err
    assert main(["stacks", str(run), "--from", "soon"]) == 2
    assert "--from must be seconds after the run's start" in capsys.readouterr().err
