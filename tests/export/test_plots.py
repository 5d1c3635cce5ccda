"""The report's plots read back as data: each value drawn as it was sampled (held to the next
reading, a rate over its window, a break where readings are missing, the last held to the end
of its period), one panel per unit and scale, a constant as one tick with its value, thread
ids never plotted, every time axis with the same margins, and the scope lane (every call
drawn, names only where they fit, one colour per name). Figures are caught as they are saved
and their artists read: Line2D vertices, tick labels, bars, texts; the PNG's pixels where the
picture itself is the claim."""

from __future__ import annotations

import io
from collections.abc import Iterator
from typing import Any

import numpy as np
import pytest

pytest.importorskip("matplotlib")
import PIL.Image as PIL_Image  # Pillow comes with matplotlib
from _report_series import STEP_NS, series
from matplotlib.collections import PolyCollection
from matplotlib.figure import Figure
from stroboscope.export import _figure, _plots
from stroboscope.export._groups import scope_colors
from stroboscope.export.report import Report

MONO0 = 1_000_000_000


@pytest.fixture
def figures(monkeypatch: pytest.MonkeyPatch) -> Iterator[dict[str, tuple[Figure, bytes]]]:
    """Every figure the report saves, with its PNG, by plot key."""
    seen: dict[str, tuple[Figure, bytes]] = {}
    original = _plots.figure_png

    def keep(fig: Figure, key: str, title: str) -> _plots.Plot:
        plot = original(fig, key, title)
        seen[key] = (fig, plot.png)
        return plot

    monkeypatch.setattr(_plots, "figure_png", keep)
    yield seen


def _line(figs: dict[str, tuple[Figure, bytes]], label: str) -> Any:
    [line] = [
        ln for fig, _ in figs.values() for ax in fig.axes for ln in ax.get_lines()
        if ln.get_label() == label
    ]  # fmt: skip
    return line


def _xy(line: Any) -> tuple[np.ndarray[Any, Any], np.ndarray[Any, Any]]:
    return np.asarray(line.get_xdata(), float), np.asarray(line.get_ydata(), float)


def _t(row: int) -> float:
    """Seconds of row ``row`` on the plots' axis (the first row is 0)."""
    return row * STEP_NS / 1e9


def every(n: int, rows: int, value: Any = None) -> list[float | None]:
    """A column read every ``n`` rows: the row number (or ``value``), None in between."""
    return [(float(i) if value is None else value) if i % n == 0 else None for i in range(rows)]


def test_a_level_holds_until_its_next_reading(figures: dict[str, Any]) -> None:
    rows = 100
    s = series("run", {"mem.used_bytes": ("bytes", "gauge", every(10, rows))}, rows)
    Report([s]).plots()
    x, y = _xy(_line(figures, "mem.used_bytes"))
    assert not np.isnan(y).any()  # read on time throughout: one unbroken line
    # two vertices per reading: (its time, v) and (the next reading's time, v)
    assert y[0::2].tolist() == y[1::2].tolist() == [float(r) for r in range(0, rows, 10)]
    assert x[0::2] == pytest.approx([_t(r) for r in range(0, rows, 10)])
    assert x[1::2][:-1] == pytest.approx([_t(r) for r in range(10, rows, 10)])
    # the last reading holds to the end of its period, cut at the run's last row
    assert x[-1] == pytest.approx(_t(rows - 1))


def test_a_source_read_every_second_holds_to_the_end_of_its_period(
    figures: dict[str, Any],
) -> None:
    # read at rows 0, 100, 200, 300 of 350: the last value stood until the run ended, not
    # only at its reading (before, the line stopped at row 300)
    rows = 350
    Report([series("run", {"disk.used_pct": ("%", "gauge", every(100, rows))}, rows)]).plots()
    x, y = _xy(_line(figures, "disk.used_pct"))
    assert x.max() == pytest.approx(_t(rows - 1)) and y[-1] == 300.0


def test_a_rate_stands_for_the_window_it_is_the_mean_of(figures: dict[str, Any]) -> None:
    rows = 101
    s = series("run", {"cpu.util_pct": ("%", "rate", every(10, rows))}, rows)
    Report([s]).plots()
    x, y = _xy(_line(figures, "cpu.util_pct"))
    # the value read at row r is the mean over rows r-10 .. r: drawn over that window
    readings = list(range(10, rows, 10))
    assert y[2::2].tolist() == [float(r) for r in readings]
    assert x[2::2] == pytest.approx([_t(r - 10) for r in readings])
    assert x[3::2] == pytest.approx([_t(r) for r in readings])
    # each reading marked where its window ends (few readings: every one is visible)
    marks = [
        ln for fig, _ in figures.values() for ax in fig.axes for ln in ax.get_lines()
        if ln.get_marker() == "|"
    ]  # fmt: skip
    assert len(marks) == 1 and _xy(marks[0])[0] == pytest.approx(
        [_t(r) for r in range(0, rows, 10)]
    )


def test_no_line_is_drawn_across_missing_readings(figures: dict[str, Any]) -> None:
    rows = 200
    values: list[float | None] = [50.0 + (i % 7) for i in range(rows)]
    values[80:120] = [None] * 40  # the source failed for 40 rows
    Report([series("run", {"proc.rss_bytes": ("bytes", "gauge", values)}, rows)]).plots()
    line = _line(figures, "proc.rss_bytes")
    x, y = _xy(line)
    assert np.isnan(y).sum() == 1  # one break
    ok = ~np.isnan(y)
    segments = np.flatnonzero(ok[:-1] & ok[1:])
    assert (x[segments + 1] - x[segments]).max() <= _t(1) + 1e-12  # no segment over the gap
    # ...and no line pixel in the gap: the plot's column at row 100 holds no line colour
    _, png = figures["memory"]
    with PIL_Image.open(io.BytesIO(png)) as img:
        pixels = np.asarray(img.convert("RGB"), dtype=int)
    ax = line.axes
    (px_gap, _), (px_on, _) = ax.transData.transform([(_t(100), 0.0), (_t(40), 0.0)])
    y0, y1 = sorted(pixels.shape[0] - ax.transAxes.transform([(0, 0), (0, 1)])[:, 1])
    color = np.array([31, 119, 180])  # the line's colour (tab10 blue)

    def blue(px: float) -> int:
        column = pixels[int(y0) + 2 : int(y1) - 2, round(px)]
        return int((np.abs(column - color).sum(axis=1) < 60).sum())

    assert blue(px_on) > 0 and blue(px_gap) == 0


def test_a_constant_is_one_tick_with_its_value(figures: dict[str, Any]) -> None:
    rows = 50
    columns = {
        "load.running": ("count", "gauge", [0.0] * rows),
        "disk.used_pct": ("%", "gauge", [26.52012 + i * 1e-8 for i in range(rows)]),
        "gpu.0.power_w": ("W", "gauge", [250.0] * rows),
    }
    Report([series("run", columns, rows)]).plots()
    for key, want in (("load", ["0"]), ("gpu-0", ["250"])):
        fig, _ = figures[key]
        ax = fig.axes[0]
        labels = [t.get_text() for t in ax.get_yticklabels() if t.get_text()]
        assert labels == want, (key, labels)  # not 0, 0, 0, -0, -0
        assert ax.yaxis.get_offset_text().get_text() == ""
        assert ax.get_ylim()[0] < float(want[0]) < ax.get_ylim()[1]
    # a share that moves by 5e-7 %: a flat line at its value, no offset notation
    fig, _ = figures["disk"]
    ax = fig.axes[0]
    labels = [t.get_text() for t in ax.get_yticklabels() if t.get_text()]
    assert ax.yaxis.get_offset_text().get_text() == ""
    assert labels and all(t.startswith("26.5") and "e" not in t for t in labels), labels
    assert ax.get_ylim()[1] - ax.get_ylim()[0] >= 26.52 * _figure.MIN_SPAN


def test_tick_labels_say_their_value() -> None:
    assert _figure.tick_texts([-0.0, 0.0], "count") == ["0", "0"]
    assert _figure.tick_texts([26.5195, 26.52, 26.5205], "%") == ["26.5195", "26.5200", "26.5205"]
    assert _figure.tick_texts([0, 2**30, 2 * 2**30], "bytes · host") == ["0", "1 Gi", "2 Gi"]
    assert _figure.tick_texts([3e9, 4e9], "count") == ["3e+09", "4e+09"]
    assert _figure.tick_texts([42.0], "%") == ["42"]


def test_process_and_host_memory_and_cpu_shares_get_their_own_axes(
    figures: dict[str, Any],
) -> None:
    rows = 30
    columns = {
        "mem.used_bytes": ("bytes", "gauge", [23.0 * 2**30] * rows),
        "proc.rss_bytes": ("bytes", "gauge", [110.0 * 2**20 + i for i in range(rows)]),
        "cpu.util_pct": ("%", "rate", [50.0] * rows),
        "proc.cpu_pct": ("%", "rate", [180.0] * rows),
    }
    Report([series("run", columns, rows)]).plots()
    host, proc = _line(figures, "mem.used_bytes"), _line(figures, "proc.rss_bytes")
    assert host.axes is not proc.axes and proc.axes.get_ylim()[1] < 2**30  # MiB, not 0 of GiB
    assert proc.axes.get_ylabel() == "bytes · process"
    machine, process = _line(figures, "cpu.util_pct"), _line(figures, "proc.cpu_pct")
    assert machine.axes is not process.axes
    assert (machine.axes.get_ylabel(), process.axes.get_ylabel()) == (
        "% of all cores",
        "% of one core",
    )


def test_thread_ids_are_never_plotted(figures: dict[str, Any]) -> None:
    rows = 30
    columns = {
        "threads.top0.tid": ("id", "gauge", [4242.0 + i // 10 for i in range(rows)]),
        "threads.top0.cpu_pct": ("%", "rate", [90.0] * rows),
    }
    report = Report([series("run", columns, rows)])
    report.plots()
    lines = [ln for fig, _ in figures.values() for ax in fig.axes for ln in ax.get_lines()]
    assert lines and not any("tid" in str(ln.get_label()) for ln in lines)
    assert not any(4242.0 in set(np.asarray(ln.get_ydata(), float).tolist()) for ln in lines)
    page = report.html()
    identifiers = page.split("<h3>Identifiers</h3>")[1].split("</table>")[0]
    assert "<td>threads.top0.tid</td>" in identifiers  # in a table: distinct, most frequent


def test_every_time_axis_has_the_same_margins(figures: dict[str, Any]) -> None:
    rows = 40
    columns = {  # tick labels of very different widths
        "mem.used_bytes": ("bytes", "gauge", [23.5 * 2**30 + i * 2**20 for i in range(rows)]),
        "load.running": ("count", "gauge", [float(i % 3) for i in range(rows)]),
        "disk.used_pct": ("%", "gauge", [26.52012345 + i * 1e-3 for i in range(rows)]),
    }
    calls = [("step", 1, 0, MONO0, MONO0 + 10 * STEP_NS)]
    Report([series("run", columns, rows, calls)]).plots()
    edges = set()
    for key, (fig, _) in figures.items():
        if key == "timing":
            continue
        for ax in fig.axes:
            box = ax.get_window_extent()
            edges.add((round(box.x0, 3), round(box.x1, 3), ax.get_xlim()))
    assert len(edges) == 1, edges  # the same left and right edge and time span everywhere


def _bars(ax: Any) -> list[tuple[float, float, tuple[float, ...]]]:
    """(start, width, colour) of every bar of the lane's axes."""
    out = []
    for coll in ax.collections:
        if not isinstance(coll, PolyCollection):
            continue
        colors = np.asarray(coll.get_facecolor(), float)
        for i, path in enumerate(coll.get_paths()):
            xs = np.asarray(path.vertices, float)[:, 0]
            color = tuple(np.round(colors[i % len(colors)][:3], 3))
            out.append((float(xs.min()), float(xs.max() - xs.min()), color))
    return sorted(out)


def test_the_lane_draws_every_scope_and_names_only_those_that_fit(
    figures: dict[str, Any],
) -> None:
    from matplotlib.colors import to_rgb

    rows = 400  # 4 s; the axes are about 1076 px wide: ~269 px per second
    calls = [
        ("train", 1, 0, MONO0, MONO0 + 300 * STEP_NS),  # 3 s: named
        *[
            ("step", 1, 1, MONO0 + k * 30 * STEP_NS, MONO0 + (k * 30 + 25) * STEP_NS)
            for k in range(10)
        ],
        ("x", 1, 1, MONO0 + 350 * STEP_NS, MONO0 + 351 * STEP_NS),  # 10 ms, ~3 px: not named
        ("loader", 2, 0, MONO0 + 10 * STEP_NS, MONO0 + 12 * STEP_NS),  # another thread, 20 ms
    ]
    columns = {"load.running": ("count", "gauge", [1.0] * rows)}
    Report([series("run", columns, rows, calls)]).plots()
    fig, _ = figures["scopes"]
    [ax] = fig.axes
    assert [t.get_text() for t in ax.get_yticklabels()] == ["tid 1 d0", "tid 1 d1", "tid 2 d0"]
    bars = _bars(ax)
    assert len(bars) == len(calls)  # every call drawn, however short
    colors = scope_colors(["train", "step", "loader", "x"])  # by first call
    for name, _, _, begin, end in calls:
        start = (begin - MONO0) / 1e9
        assert any(
            b == pytest.approx(start) and w == pytest.approx((end - begin) / 1e9)
            and c == tuple(np.round(to_rgb(colors[name]), 3))
            for b, w, c in bars
        ), name  # fmt: skip
    named = sorted(t.get_text() for t in ax.texts)
    assert named == ["step"] * 10 + ["train"]  # a 250 ms step fits its 4 letters; x does not
    legend = [t.get_text() for lg in fig.legends for t in lg.get_texts()]
    assert legend == [f"scope {n}" for n in ("train", "step", "loader", "x")]
    # no shading over the plots: the data plot holds no bar
    data_fig, _ = figures["load"]
    assert not any(isinstance(c, PolyCollection) for a in data_fig.axes for c in a.collections)


def test_align_start_puts_each_runs_first_row_at_0(figures: dict[str, Any]) -> None:
    rows = 50
    col = {"load.running": ("count", "gauge", [float(i) for i in range(rows)])}
    a = series("a", col, rows)
    b = series("b", col, rows, start_ns=8 * 60 * 10**9, mono0=7_000_000_000)  # 8 min later
    Report([a, b], "start").plots()
    for label in ("load.running [a]", "load.running [b]"):
        x, _ = _xy(_line(figures, label))
        assert np.nanmin(x) == 0.0 and np.nanmax(x) == pytest.approx(_t(rows - 1)), label
    ax = _line(figures, "load.running [a]").axes
    assert ax.get_xlim() == pytest.approx((0.0, _t(rows - 1)))
    assert ax.get_xlabel() == "seconds after each run's first row"
    figures.clear()
    Report([a, b]).plots()  # one absolute axis: b is 8 minutes (and 6 s of mono) to the right
    x, _ = _xy(_line(figures, "load.running [b]"))
    assert np.nanmin(x) == pytest.approx(486.0)


def test_align_scope_puts_each_runs_first_call_at_0(figures: dict[str, Any]) -> None:
    rows = 60
    col = {"load.running": ("count", "gauge", [float(i) for i in range(rows)])}
    a = series("a", col, rows, [("step", 1, 0, MONO0 + 10 * STEP_NS, MONO0 + 20 * STEP_NS)])
    b_calls = [
        ("step", 1, 0, MONO0 + 25 * STEP_NS, MONO0 + 30 * STEP_NS),
        ("step", 1, 0, MONO0 + 32 * STEP_NS, MONO0 + 40 * STEP_NS),
    ]
    b = series("b", col, rows, b_calls, start_ns=3600 * 10**9)
    Report([a, b], "scope:step").plots()
    xa, ya = _xy(_line(figures, "load.running [a]"))
    xb, yb = _xy(_line(figures, "load.running [b]"))
    # the row read at each run's first step start is at 0
    assert xa[list(ya).index(10.0)] == pytest.approx(0.0)
    assert xb[list(yb).index(25.0)] == pytest.approx(0.0)
    fig, _ = figures["scopes"]
    starts = sorted({round(b, 9) for b, _, _ in _bars(fig.axes[0])})
    assert starts == [0.0, pytest.approx(_t(7))]  # both first steps at 0, b's second at 70 ms
    with pytest.raises(ValueError, match=r"--align 'scope:nope': a \(a.parquet\) has no call"):
        Report([a, b], "scope:nope").plots()


def test_calls_closer_than_a_pixel_are_drawn_as_one_bar(figures: dict[str, Any]) -> None:
    # 2,000 steps of 9 ms, 1 ms apart, over 20 s (~0.05 px apart): one bar, not 2,000; a
    # call of another name between them splits it
    rows = 2000
    calls: list[Any] = [
        ("step", 1, 0, MONO0 + k * STEP_NS, MONO0 + k * STEP_NS + 9_000_000) for k in range(rows)
    ]
    calls[1000] = ("save", 1, 0, MONO0 + 1000 * STEP_NS, MONO0 + 1000 * STEP_NS + 9_000_000)
    Report([series("run", {"load.running": ("count", "gauge", [1.0] * rows)}, rows, calls)]).plots()
    bars = _bars(figures["scopes"][0].axes[0])
    assert len(bars) == 3
    assert bars[0][0] == 0.0 and bars[-1][0] + bars[-1][1] == pytest.approx(_t(rows - 1) + 0.009)
