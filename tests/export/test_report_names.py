"""Names from the data drawn by the report's figures as the characters they hold: scope, column,
series, host and step names with ``$`` pairs (matplotlib's mathtext), backslashes, newlines and
markup. Each figure is caught before it is saved and its Text artists are read back."""

from __future__ import annotations

import io
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pytest

pytest.importorskip("matplotlib")
import _cluster_dataset as ranks_fixture
import PIL.Image as PIL_Image  # Pillow comes with matplotlib
from matplotlib.figure import Figure
from matplotlib.text import Text
from stroboscope.cli import main
from stroboscope.export import _plots, _ranks_plot
from stroboscope.export._inputs import Recording
from stroboscope.export.cluster_report import build_cluster_report, write_cluster_report
from stroboscope.formats.writers import write_parquet

SCOPE = "load $\\x$ done"  # mathtext: an unknown symbol, the report stopped
MATH = "$a$"  # mathtext: drawn as an italic a
BACKSLASH_N = "a\\nb"
MARKUP = "<script>alert(1)</script>"
NEWLINE = "two\nlines"
T0 = 1_790_000_000_000_000_000
ROWS = 60


@pytest.fixture
def figures(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[Figure]]:
    """Every figure the report saves, kept after it is rendered."""
    seen: list[Figure] = []
    original = _plots.figure_png

    def keep(fig: Figure, key: str, title: str) -> _plots.Plot:
        plot = original(fig, key, title)
        seen.append(fig)
        return plot

    monkeypatch.setattr(_plots, "figure_png", keep)
    monkeypatch.setattr(_ranks_plot, "figure_png", keep)
    yield seen


def _texts(fig: Figure) -> list[Text]:
    return [t for t in fig.findobj(Text) if t.get_text()]


def _assert_drawn_as_text(figs: list[Figure], names: list[str]) -> None:
    texts = [t for fig in figs for t in _texts(fig)]
    for name in names:
        holding = [t for t in texts if name in t.get_text()]
        assert holding, f"{name!r} is drawn nowhere"
        for t in holding:  # drawn as the characters it holds, not parsed as mathtext
            assert t.get_parse_math() is False, (name, t.get_text())


def _series(label: str, columns: list[str], scopes: list[str]) -> Recording:
    mono = np.arange(ROWS, dtype=np.int64) * 10_000_000 + 5_000
    table = pa.table(
        {
            "time": pa.array(mono + T0, pa.timestamp("ns", tz="UTC")),
            "mono_ns": pa.array(mono),
            **{c: pa.array(np.arange(ROWS, dtype=np.float64) + i) for i, c in enumerate(columns)},
        }
    )
    spans = pa.table(
        {
            "name": pa.array(scopes, pa.string()),
            "path": pa.array(scopes, pa.string()),
            "thread_id": pa.array([1] * len(scopes), pa.int64()),
            "stack_id": pa.array([1] * len(scopes), pa.uint64()),
            "depth": pa.array([0] * len(scopes), pa.int32()),
            "begin_ns": pa.array([int(mono[5 + 10 * i]) for i in range(len(scopes))]),
            "end_ns": pa.array([int(mono[12 + 10 * i]) for i in range(len(scopes))]),
        }
    )
    return Recording(label, f"{label}.parquet", table, {}, spans)


def _decodes(png: bytes) -> tuple[int, int]:
    return PIL_Image.open(io.BytesIO(png)).size


def test_hostile_scope_column_and_series_names_are_drawn_as_text(figures: list[Figure]) -> None:
    columns = [f"mem.{MATH}", f"gpu.{MATH}.util_pct", f"net.{BACKSLASH_N}", f"disk.{MARKUP}"]
    scopes = [SCOPE, MATH, BACKSLASH_N, MARKUP, NEWLINE]
    series = [_series(MATH, columns, scopes), _series(SCOPE, columns[:1], [])]
    lateness = {MATH: ([10.0, 100.0], [3, 1])}
    plots = _plots.render_plots(series, lateness)
    assert [p.key for p in plots] == ["scopes", "memory", "gpu-$a$", "network", "disk", "timing"]
    for p in plots:
        assert _decodes(p.png) == (p.width, p.height)
    names = [SCOPE, MATH, BACKSLASH_N, MARKUP, f"{columns[0]} [{MATH}]", f"GPU {MATH}"]
    _assert_drawn_as_text(figures, names)
    texts = {t.get_text() for fig in figures for t in _texts(fig)}
    assert {SCOPE, NEWLINE, f"scope {SCOPE}", f"{columns[0]} [{SCOPE}]", f"GPU {MATH}"} <= texts


def test_the_report_command_draws_a_scope_named_with_dollars(tmp_path: Path) -> None:
    run = _series("run", ["mem.used_bytes"], [SCOPE, MATH])
    write_parquet(run.table, tmp_path / "run.parquet")
    assert run.scopes is not None
    write_parquet(run.scopes, tmp_path / "run.scopes.parquet")
    out = tmp_path / "r.html"
    assert main(["report", str(tmp_path / "run.parquet"), "-o", str(out), "--static"]) == 0
    # Before, the figure with the scope spans raised mathtext's ValueError and this exited 2.
    # the scope lane, the memory plot and timing
    assert out.read_text().count("data:image/png;base64,") == 3


def _renamed(scopes: pa.Table, step: str) -> pa.Table:
    names = scopes.column("name")
    renamed = pc.if_else(pc.equal(names, "train_step"), step, names)
    return scopes.set_column(scopes.schema.get_field_index("name"), "name", renamed)


def test_hostile_host_and_step_names_in_the_cluster_timeline(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, figures: list[Figure]
) -> None:
    host = f"{MARKUP} {MATH}"
    for table in (ranks_fixture.MONO0, ranks_fixture.ANCHOR, ranks_fixture.SYNC):
        monkeypatch.setitem(table, host, table["alpha"])
    monkeypatch.setitem(ranks_fixture.DELAY, host, 0)
    for rank in (0, 1):
        monkeypatch.setitem(ranks_fixture.HOST, rank, host)
    scopes = ranks_fixture._scopes
    monkeypatch.setattr(ranks_fixture, "_scopes", lambda rank: _renamed(scopes(rank), SCOPE))
    root = ranks_fixture.make_dataset(tmp_path / "ds")
    report = build_cluster_report(root, step=SCOPE)
    out = tmp_path / "c.html"
    assert write_cluster_report(report, out) == "html"
    assert '<figure id="plot-steps"' in out.read_text()
    [fig] = figures
    _assert_drawn_as_text(figures, [SCOPE, f"rank 0 ({host})", f"rank 1 ({host})"])
    texts: set[Any] = {t.get_text() for t in _texts(fig)}
    assert f"{SCOPE} call number" in texts and f"rank 0 ({host})" in texts


def _drawn_tick_labels(fig: Figure) -> list[Text]:
    axes = [axis for ax in fig.axes for axis in (ax.xaxis, ax.yaxis)]
    return [
        t
        for axis in axes
        for t in axis.get_ticklabels(minor=False) + axis.get_ticklabels(minor=True)
        if t.get_visible() and t.get_text()
    ]


def test_tick_labels_matplotlib_formats_keep_their_math(figures: list[Figure]) -> None:
    # The timing figure has log axes: matplotlib's LogFormatter writes its labels as mathtext
    # ("$\mathdefault{10^{0}}$"); they were drawn as those raw characters.
    series = [_series(MATH, ["mem.used_bytes"], [SCOPE])]
    _plots.render_plots(series, {MATH: ([10.0, 100.0, 1000.0], [3, 1, 2])})
    [timing] = [fig for fig in figures if fig.get_suptitle() == "Sampler timing"]
    renderer = timing.canvas.get_renderer()  # type: ignore[attr-defined]
    formatted = [t for t in _drawn_tick_labels(timing) if t.get_text().startswith("$")]
    assert len(formatted) >= 4, [t.get_text() for t in _drawn_tick_labels(timing)]
    for t in formatted:
        assert t.get_parse_math() is True, t.get_text()
        # drawn as math, "10" with a superscript is narrower than its 22 raw characters
        as_drawn = t.get_window_extent(renderer).width
        raw = Text(text=t.get_text(), fontproperties=t.get_fontproperties(), parse_math=False)
        raw.set_figure(timing)
        assert as_drawn < raw.get_window_extent(renderer).width / 2, t.get_text()
    # the names from the data in the same figure stay text
    _assert_drawn_as_text([timing], [MATH])
