"""The report's figures, drawn with matplotlib (the ``report`` extra) as PNG images.

Each plot is one figure (:mod:`stroboscope.export._figure`: its margins, texts and ticks),
panels sharing the time axis (seconds from each run's origin,
:func:`~stroboscope.export._select.time_origins`). Every value is drawn as it was sampled
(:func:`~stroboscope.export._downsample.step_path`): held until the next reading (a rate over
the window it is the mean of), a break where data is missing, reduced per pixel column so no
peak is hidden. Panels hold one unit and scale each (:mod:`stroboscope.export._groups`); a
constant is one tick with its value. Scopes are a lane of their own above the plots, one row
per thread and nesting level. Each line's column is read from the recording when it is drawn
and dropped after it (:meth:`~stroboscope.export._recording.Recording.column`).
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from stroboscope.analysis.column_stats import column_kind
from stroboscope.export._downsample import step_path
from stroboscope.export._figure import (
    DPI,
    DRAWABLE,
    LEFT_PX,
    LEGEND_COLUMNS,
    PANEL_HEIGHT_IN,
    RIGHT_PX,
    TOP_PX,
    WIDTH_PX,
    MissingExtraError,
    Plot,
    figure_png,
    legend_above,
    legend_rows,
    require_matplotlib,
    stacked_figure,
    time_figure,
    value_axis,
)
from stroboscope.export._groups import (
    WHOLE_COLOR,
    WHOLE_LEGEND_COLUMNS,
    Group,
    lane_rows,
    line_label,
    plot_groups,
    scope_calls,
    scope_colors,
    scope_names,
    whole_of,
)
from stroboscope.export._recording import Recording
from stroboscope.export._select import align_text, time_origins

__all__ = [
    "MissingExtraError",
    "Plot",
    "figure_png",
    "render_plots",
    "require_matplotlib",
    "time_origin",
    "time_span_s",
]


def union_schema(series: list[Recording]) -> pa.Schema:
    try:
        return pa.unify_schemas([s.schema for s in series])
    except (pa.ArrowException, ValueError):
        return series[0].schema


def time_origin(series: list[Recording]) -> tuple[int, int]:
    """Realtime ns of the first and last row of all ``series``."""
    mins, maxs = [], []
    for s in series:
        mm = pc.min_max(s.held.column("time").cast(pa.int64()))
        mins.append(int(mm["min"].as_py()))
        maxs.append(int(mm["max"].as_py()))
    return min(mins), max(maxs)


def time_span_s(series: list[Recording], origins: list[int]) -> tuple[float, float]:
    """The time axis of every plot (seconds from each series' origin): from the earliest row
    to the latest, over all series."""
    lo, hi = [], []
    for s, t0 in zip(series, origins):
        mm = pc.min_max(s.held.column("time").cast(pa.int64()))
        lo.append((int(mm["min"].as_py()) - t0) / 1e9)
        hi.append((int(mm["max"].as_py()) - t0) / 1e9)
    a, b = min(lo), max(hi)
    return a, max(b, a + 1e-9)


LANE_ROW_IN = 0.24
"""Height of one row of the scope lane (inches)."""
CHAR_PX = 6.0
"""Width of one character of a scope name in the lane (7 pt at 100 dpi, with room)."""
MAX_LEGEND = 20
"""Scope names in the lane's colour legend at most (the first called); the rest are counted."""


def _lane_bars(
    x0: np.ndarray[Any, Any], x1: np.ndarray[Any, Any], codes: np.ndarray[Any, Any], pixel: float
) -> list[tuple[int, list[tuple[float, float]]]]:
    """The bars of one lane row, by colour code: calls in time order, neighbours of one name
    less than a ``pixel`` apart drawn as one bar (the picture is the same; 100,000 calls are
    not 100,000 rectangles)."""
    if len(x0) == 0:
        return []
    o = np.argsort(x0, kind="stable")
    b, e, c = x0[o], x1[o], codes[o]
    reach = np.maximum.accumulate(e)
    new = np.r_[True, (c[1:] != c[:-1]) | (b[1:] - reach[:-1] >= pixel)]
    starts = np.flatnonzero(new)
    gb, ge, gc = b[starts], np.maximum.reduceat(e, starts), c[starts]
    out = []
    for code in dict.fromkeys(gc.tolist()):
        m = gc == code
        out.append((int(code), list(zip(gb[m].tolist(), (ge[m] - gb[m]).tolist()))))
    return out


def _draw_lane(
    series: list[Recording], origins: list[int], xlim: tuple[float, float], xlabel: str
) -> Plot | None:
    """The scope lane: every scope call as a bar in its thread's row at its nesting level,
    coloured by name (:func:`~stroboscope.export._groups.scope_colors`), named where the name
    fits in the bar; a colour legend of the names. None without scopes."""
    rows = lane_rows(series)
    if not rows:
        return None
    colors = scope_colors(scope_names(s.scopes for s in series))
    order = {name: k for k, name in enumerate(colors)}
    palette = list(colors.values())
    entries = min(len(colors), MAX_LEGEND) + (len(colors) > MAX_LEGEND)
    ncol = min(entries, 6)
    fig = time_figure([LANE_ROW_IN * len(rows) + 0.3], legend_rows=-(-entries // ncol))
    ax = fig.axes[0]
    axes_px = fig.get_figwidth() * DPI * (1 - (LEFT_PX + RIGHT_PX) / WIDTH_PX)
    px_per_s = axes_px / max(xlim[1] - xlim[0], 1e-12)
    for i, (s, t0) in enumerate(zip(series, origins)):
        if s.scopes is None or not s.scopes.num_rows:
            continue
        x0, x1, names, tids, depths = scope_calls(s, t0)
        codes = np.array([order[n] for n in names], np.int64)
        for y, (row_series, tid, depth, _label) in enumerate(rows):
            if row_series != i:
                continue
            idx = np.flatnonzero((tids == tid) & (depths == depth))
            for code, spans in _lane_bars(x0[idx], x1[idx], codes[idx], 1 / px_per_s):
                ax.broken_barh(spans, (y - 0.4, 0.8), facecolors=palette[code], edgecolors="none")
            a, b = np.maximum(x0[idx], xlim[0]), np.minimum(x1[idx], xlim[1])
            width = np.array([CHAR_PX * len(names[k]) + 4 for k in idx.tolist()])
            for k in idx[(b - a) * px_per_s >= width].tolist():
                mid = (max(x0[k], xlim[0]) + min(x1[k], xlim[1])) / 2
                ax.text(
                    mid, y, names[k], ha="center", va="center", fontsize=7, color="black",
                    clip_on=True,
                )  # fmt: skip
    ax.set_yticks(range(len(rows)), [r[3] for r in rows], fontsize=7)
    ax.set_ylim(len(rows) - 0.5, -0.5)
    ax.set_xlim(*xlim)
    ax.grid(True, axis="x", alpha=0.3)
    ax.tick_params(labelsize=8)
    ax.set_xlabel(xlabel, fontsize=8)
    from matplotlib.patches import Patch

    shown = list(colors.items())[:MAX_LEGEND]
    handles = [Patch(facecolor=c, label=f"scope {n}") for n, c in shown]
    more = len(colors) - len(shown)
    if more:
        handles.append(Patch(facecolor="white", label=f"and {more} more names"))
    fig.legend(
        handles=handles,
        loc="upper right",
        bbox_to_anchor=(1 - RIGHT_PX / WIDTH_PX, 1 - TOP_PX / fig.bbox.height),
        fontsize=7,
        ncol=ncol,
        frameon=False,
        borderpad=0,
        labelspacing=0.2,
    )
    fig.suptitle("Scopes", fontsize=11, x=0.01, ha="left")
    return figure_png(fig, "scopes", "Scopes")


def _draw_group(
    group: Group,
    series: list[Recording],
    origins: list[int],
    xlim: tuple[float, float],
    xlabel: str,
) -> Plot:
    columns_per_row = [
        LEGEND_COLUMNS if whole_of(cols) is None else WHOLE_LEGEND_COLUMNS
        for _, cols in group.panels
    ]
    entries = [sum(c in s.column_names for s in series for c in cols) for _, cols in group.panels]
    fig = time_figure(
        [PANEL_HEIGHT_IN] * len(group.panels),
        panel_legend_rows=[legend_rows(n, k) for n, k in zip(entries, columns_per_row)],
    )
    axes = fig.axes
    many = len(series) > 1
    for ax, (label, columns), per_row in zip(axes, group.panels, columns_per_row):
        lo, hi = np.inf, -np.inf
        whole = whole_of(columns)
        total = largest(series, whole)
        for s, t0 in zip(series, origins):
            x_all = s.held.column("time").cast(pa.int64())
            first = int(pc.min(x_all).as_py())
            last = int(pc.max(x_all).as_py())
            for col in columns:
                if col not in s.column_names:
                    continue
                c = s.column(col)  # read for this line and dropped after it
                if c.null_count:  # its readings only
                    valid = c.is_valid()
                    c, x_col = c.filter(valid), x_all.filter(valid)
                    rows = np.flatnonzero(valid.to_numpy(zero_copy_only=False))
                else:  # a reading on every row: no filtered copies
                    x_col, rows = x_all, np.arange(len(c))
                # unsafe: a uint64 beyond 2**53 is drawn rounded, not refused
                y = c.cast(pa.float64(), safe=False).to_numpy(zero_copy_only=False)
                x = x_col.to_numpy(zero_copy_only=False)
                del c, x_col
                far = np.abs(y) > DRAWABLE  # matplotlib cannot lay out axes out there
                if far.any():
                    ax.text(
                        0.5,
                        0.5,
                        f"{int(far.sum())} readings of {col} beyond ±{DRAWABLE:g} "
                        f"not drawn ({s.source})",
                        transform=ax.transAxes,
                        ha="center",
                        fontsize=7,
                        color="red",
                    )
                    x, y, rows = x[~far], y[~far], rows[~far]
                ok = ~np.isnan(y)
                if not ok.all():
                    x, y, rows = x[ok], y[ok], rows[ok]
                del ok
                if len(y) == 0:
                    continue
                rate = column_kind(s.schema.field(col)) == "rate"
                # ns from the origin before any float: realtime ns in float64 lose 256 ns
                x = x.astype(np.int64)  # a copy: the table's buffer is not changed
                x -= t0
                xs, ys, alone = step_path(x, y, rate, WIDTH_PX, first - t0, last - t0, rows)
                name = f"{col} [{s.label}]" if many else col
                if whole is not None:  # each part against the whole, the whole a reference
                    of = None if col == whole else total
                    name = line_label(name, float(y.min()), float(y.max()), of, label)
                (line,) = ax.plot(xs / 1e9, ys, linewidth=0.9, label=name)
                if col == whole:
                    line.set(color=WHOLE_COLOR, linestyle="--")
                lo, hi = min(lo, float(y.min())), max(hi, float(y.max()))
                if alone.any():  # a reading between two gaps: a dot, not an invisible line
                    ax.plot(
                        xs[alone] / 1e9, ys[alone], ".", markersize=3,
                        color=line.get_color(),
                    )  # fmt: skip
                if len(y) <= WIDTH_PX // 8:  # few readings: each one marked where it was read
                    ax.plot(
                        x / 1e9, y, "|" if rate else ".", markersize=4,
                        color=line.get_color(), alpha=0.8,
                    )  # fmt: skip
        ax.set_ylabel(label, fontsize=8)
        value_axis(ax, lo, hi, label)
        if whole is not None and lo >= 0:  # from 0: how much of the whole each takes is seen
            ax.set_ylim(bottom=0.0)
        ax.grid(True, alpha=0.3)
        ax.tick_params(labelsize=8)
        legend_above(ax, per_row)
    axes[-1].set_xlabel(xlabel, fontsize=8)
    axes[-1].set_xlim(*xlim)
    fig.suptitle(group.title, fontsize=11, x=0.01, ha="left")
    return figure_png(fig, group.key, group.title)


def largest(series: list[Recording], column: str | None) -> float | None:
    """The largest reading of ``column`` over ``series`` (None: no column, no reading)."""
    if column is None:
        return None
    peaks = [pc.max(s.column(column)).as_py() for s in series if column in s.column_names]
    peaks = [float(v) for v in peaks if v is not None]
    return max(peaks) if peaks else None


def row_spacing_ns(series: Recording) -> np.ndarray[Any, Any]:
    """Time between consecutive rows of a series (ns)."""
    mono = np.asarray(series.held.column("mono_ns").to_numpy(zero_copy_only=False), np.int64)
    return np.diff(mono)


def draw_timing(
    series: list[Recording], lateness: dict[str, tuple[list[float], list[int]]]
) -> Plot | None:
    panels = [s for s in series if s.num_rows > 1]
    if not panels and not lateness:
        return None
    fig, axes = stacked_figure(1 + bool(lateness), sharex=False)
    ax = axes[0]
    for s in panels:
        gaps_ms = row_spacing_ns(s) / 1e6
        edges = np.geomspace(max(gaps_ms.min(), 1e-3), max(gaps_ms.max(), 1e-3) * 1.01, 60)
        ax.hist(gaps_ms, bins=edges.tolist(), histtype="step", label=s.label)
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("time between consecutive rows (ms), from the data", fontsize=8)
    ax.set_ylabel("rows", fontsize=8)
    legend_above(ax)
    if lateness:
        ax2 = axes[1]
        for label, (upper_us, counts) in lateness.items():
            # bin i holds the ticks late by up to upper_us[i] (and more than the bin before)
            ax2.stairs(counts, [upper_us[0] / 10, *upper_us], label=label)
        ax2.set_xscale("log")
        ax2.set_xlabel("sampler's wake-up lateness (µs, upper bound of each bin)", fontsize=8)
        ax2.set_ylabel("ticks", fontsize=8)
        legend_above(ax2)
    fig.suptitle("Sampler timing", fontsize=11, x=0.01, ha="left")
    return figure_png(fig, "timing", "Sampler timing")


def render_plots(
    series: list[Recording],
    lateness: dict[str, tuple[list[float], list[int]]] | None = None,
    align: str | None = None,
) -> list[Plot]:
    """Every plot of the report for ``series``: the scope lane (when any has scopes), one per
    group of columns, all on one time axis (:func:`~stroboscope.export._select.time_origins`
    under ``align``), then the timing (row spacing from the data; the sampler's lateness
    histogram when ``lateness`` has one, by label: upper bounds in µs and counts)."""
    require_matplotlib()
    origins = time_origins(series, align)
    xlim = time_span_s(series, origins)
    xlabel = align_text(align)
    plots = []
    lane = _draw_lane(series, origins, xlim, xlabel)
    if lane is not None:
        plots.append(lane)
    plots += [
        _draw_group(g, series, origins, xlim, xlabel) for g in plot_groups(union_schema(series))
    ]
    timing = draw_timing(series, lateness or {})
    if timing is not None:
        plots.append(timing)
    return plots
