"""Values the terminal report handles must not stop the HTML/PNG report either: a column of
1e308 (beyond what matplotlib can lay out: not drawn, with a note naming the file), a uint64
column at 2**64-1 (drawn, rounded), a lone surrogate in the provenance (written as its escape);
and scope intervals with a null begin_ns or an end before the begin are refused, naming the
file (or the dataset's partition), instead of a traceback or a step of -9e15 µs."""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from stroboscope.export import _plots
from stroboscope.export.cluster_report import build_cluster_report
from stroboscope.export.report import build_report, write_html, write_pngs

pytest.importorskip("matplotlib")
N = 20
T0 = 1_700_000_000_000_000_000
MONO0 = 5_000_000_000


def _write(path: Path, column: pa.Array, prov: bytes = b'{"host": "h"}') -> Path:
    table = pa.table(
        {
            "time": pa.array([T0 + i * 10_000_000 for i in range(N)], pa.timestamp("ns", "UTC")),
            "mono_ns": pa.array([MONO0 + i * 10_000_000 for i in range(N)], pa.int64()),
            "cpu.util_pct": column,
        }
    ).replace_schema_metadata({b"stroboscope.provenance": prov})
    pq.write_table(table, path)
    return path


def _texts(monkeypatch: pytest.MonkeyPatch) -> tuple[list[str], list[Any]]:
    """Record every text and line of each figure the report draws."""
    texts: list[str] = []
    lines: list[Any] = []
    real = _plots.figure_png

    def spy(fig: Any, key: str, title: str) -> _plots.Plot:
        for ax in fig.axes:
            texts.extend(t.get_text() for t in ax.texts)
            lines.extend(ax.get_lines())
        return real(fig, key, title)

    monkeypatch.setattr(_plots, "figure_png", spy)
    return texts, lines


def _readings(line: Any) -> list[float]:
    """The values a step line holds: two vertices per reading (its start and end), NaN at
    each break."""
    y = [float(v) for v in line.get_ydata()]
    return [v for v in y if v == v][::2]


@pytest.mark.parametrize("value", [1e308, -1e308, 3e305])
def test_a_column_too_large_to_lay_out_is_noted_not_drawn(
    value: float, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = _write(tmp_path / "run.parquet", pa.array([value] * (N - 2) + [1.0, 2.0]))
    texts, lines = _texts(monkeypatch)
    report = build_report([str(path)])
    (col,) = [c for c in report.describe(report.series[0]) if c.name == "cpu.util_pct"]
    assert col.mean == pytest.approx(value / N * (N - 2) + 3 / N, rel=1e-12)  # not inf
    write_html(report, tmp_path / "r.html", static=True)
    assert f"{N - 2} readings of cpu.util_pct beyond ±1e+300 not drawn ({path})" in texts
    drawn = [_readings(ln) for ln in lines if ln.get_label() == "cpu.util_pct"]
    assert drawn == [[1.0, 2.0]]  # the readable rows are still drawn
    assert len(write_pngs(build_report([str(path)]), tmp_path / "png")) >= 2


def test_a_uint64_column_at_its_maximum_is_drawn(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = _write(tmp_path / "run.parquet", pa.array([2**64 - 1] * N, pa.uint64()))
    _, lines = _texts(monkeypatch)
    write_html(build_report([str(path)]), tmp_path / "r.html", static=True)
    (line,) = [ln for ln in lines if ln.get_label() == "cpu.util_pct"]
    assert _readings(line) == [float(2**64)] * N  # 2**64-1 rounds to 2**64 in float64


def test_a_lone_surrogate_in_the_provenance_is_written_as_its_escape(tmp_path: Path) -> None:
    path = _write(tmp_path / "run.parquet", pa.array([1.0] * N), b'{"host": "a\\ud800b"}')
    write_html(build_report([str(path)]), tmp_path / "r.html", static=True)
    page = (tmp_path / "r.html").read_text("utf-8")
    assert "a\\ud800b" in page


def _scopes(begin: Sequence[int | None], end: Sequence[int | None]) -> pa.Table:
    n = len(begin)
    return pa.table(
        {
            "name": ["step"] * n,
            "path": ["step"] * n,
            "thread_id": pa.array([1] * n, pa.int64()),
            "stack_id": pa.array([1] * n, pa.uint64()),
            "depth": pa.array([0] * n, pa.int32()),
            "begin_ns": pa.array(begin, pa.int64()),
            "end_ns": pa.array(end, pa.int64()),
        }
    )


B = [MONO0 + 10_000_000, MONO0 + 50_000_000, MONO0 + 90_000_000]
E = [b + 20_000_000 for b in B]
BAD_SCOPES = [
    pytest.param(
        [None, *B[1:]], E, "row 0 has no begin_ns (1 of 3 rows are null there)", id="null-begin"
    ),
    pytest.param(
        B,
        [E[0], -(2**63), E[2]],
        f"row 1 ends before it begins (begin_ns {B[1]}, end_ns {-(2**63)})",
        id="end-min-int64",
    ),
]


@pytest.mark.parametrize(("begin", "end", "why"), BAD_SCOPES)
def test_a_scopes_sidecar_with_unplaceable_calls_is_refused_naming_it(
    begin: list[int | None], end: list[int | None], why: str, tmp_path: Path
) -> None:
    path = _write(tmp_path / "run.parquet", pa.array([1.0] * N))
    pq.write_table(_scopes(begin, end), tmp_path / "run.scopes.parquet")
    with pytest.raises(ValueError) as info:
        build_report([str(path)])
    assert str(info.value) == (
        f"{tmp_path / 'run.scopes.parquet'} is not a readable scope-intervals table: {why}"
    )


def test_an_open_call_is_still_accepted(tmp_path: Path) -> None:
    path = _write(tmp_path / "run.parquet", pa.array([1.0] * N))
    pq.write_table(_scopes(B, [E[0], E[1], None]), tmp_path / "run.scopes.parquet")
    report = build_report([str(path)])
    assert report.series[0].scopes is not None and report.series[0].scopes.num_rows == 3


@pytest.mark.parametrize(("begin", "end", "why"), BAD_SCOPES)
def test_a_dataset_scope_part_with_unplaceable_calls_is_refused_naming_it(
    begin: list[int | None], end: list[int | None], why: str, tmp_path: Path
) -> None:
    root = tmp_path / "root"
    (root / "_stroboscope_dataset.json").parent.mkdir()
    (root / "_stroboscope_dataset.json").write_text(
        json.dumps({"format": "stroboscope-dataset", "layout": 1})
    )
    for rank in (0, 1):
        part = root / f"job=j/host=h/rank={rank}"
        part.mkdir(parents=True)
        _write(part / "part-0.parquet", pa.array([1.0] * N))
        scopes = root / f"_scopes/job=j/host=h/rank={rank}"
        scopes.mkdir(parents=True)
        good = rank == 1
        pq.write_table(_scopes(B if good else begin, E if good else end), scopes / "part-0.parquet")
    with pytest.raises(ValueError) as info:
        build_cluster_report(root, step="step")
    assert str(info.value) == (
        f"dataset {str(root)!r}: a scope part of job=j host=h rank=0 is not a readable "
        f"scope-intervals table: {why}"
    )
