"""The report's figures, drawn with matplotlib (the ``report`` extra) as PNG images.

Each plot is one figure, panels sharing the time axis (seconds after the first row of all
inputs), lines downsampled per pixel column (:mod:`stroboscope.export._downsample`), scopes as
shaded spans with their names. matplotlib's object API is used (``Figure`` + the Agg canvas),
never ``pyplot``, so no global state or GUI backend is touched.
"""

from __future__ import annotations

import io
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from stroboscope.analysis.column_stats import fmt_value
from stroboscope.export._downsample import break_gaps, downsample
from stroboscope.export._groups import Group, plot_groups
from stroboscope.export._inputs import Recording

if TYPE_CHECKING:
    from matplotlib.axes import Axes
    from matplotlib.figure import Figure

WIDTH_PX = 1200
"""Width of every figure in pixels (at ``DPI``); the downsampling keeps 4 points per pixel."""
DPI = 100
PANEL_HEIGHT_IN = 2.4
MAX_SCOPE_LABELS = 40
"""Scope spans named on a plot at most (the longest); the rest are shaded only."""


class MissingExtraError(ImportError):
    """An optional dependency of the report is not installed: the message says which extra."""


def require_matplotlib() -> None:
    """Import matplotlib or raise :class:`MissingExtraError` naming the extra to install."""
    try:
        import matplotlib  # noqa: F401
    except ImportError as exc:
        raise MissingExtraError(
            f"plots need matplotlib, which is not installed ({exc}): "
            f"pip install 'stroboscope[report]'"
        ) from None


@dataclass(frozen=True)
class Plot:
    """One rendered figure: ``key`` (file-safe), ``title``, ``png`` bytes and their size."""

    key: str
    title: str
    png: bytes
    width: int
    height: int


DRAWABLE = 1e300
"""Largest magnitude drawn: matplotlib's axis margins and ticks overflow near 1.8e308."""


def _figure(panels: int, sharex: bool = True) -> tuple[Figure, list[Axes]]:
    from matplotlib.figure import Figure

    fig = Figure(figsize=(WIDTH_PX / DPI, 0.6 + PANEL_HEIGHT_IN * panels), dpi=DPI)
    axes = fig.subplots(panels, 1, sharex=sharex, squeeze=False)[:, 0].tolist()
    return fig, axes


def plain_text(fig: Figure) -> None:
    """Have every text on ``fig`` that holds names drawn as its characters, never as mathtext.

    Titles, labels, legends, scope names and tick labels a caller gives (``set_yticks(...,
    labels)``, any ``FuncFormatter``) carry names from the data (scopes, columns, hosts,
    files); matplotlib reads a pair of ``$`` in one as a formula (``$a$`` drawn as math,
    ``$\\x$`` an error that stops the report). Only texts matplotlib writes itself keep its
    setting: the axes' offset texts and the tick labels of its number formatters (a log axis
    labels ``10^0`` in mathtext). Called before the figure is first drawn and again before it
    is saved, so ticks the layout adds are covered too.
    """
    from matplotlib import ticker
    from matplotlib.text import Text

    numbers = (
        ticker.ScalarFormatter,
        ticker.LogFormatter,
        ticker.LogitFormatter,
        ticker.PercentFormatter,
        ticker.NullFormatter,
    )
    texts = fig.findobj(Text)  # first: listing an axis's children makes its ticks
    own: set[Text] = set()  # texts matplotlib writes itself, from numbers
    for ax in fig.axes:
        for axis in (ax.xaxis, ax.yaxis):
            own.add(axis.offsetText)
            for ticks, formatter in (
                (axis.majorTicks, axis.get_major_formatter()),
                (axis.minorTicks, axis.get_minor_formatter()),
            ):
                if isinstance(formatter, numbers):
                    own.update(label for tick in ticks for label in (tick.label1, tick.label2))
    for text in texts:
        text.set_parse_math(text in own and text.get_parse_math())


def _png(fig: Figure, key: str, title: str) -> Plot:
    from matplotlib.backends.backend_agg import FigureCanvasAgg

    FigureCanvasAgg(fig)  # the figure draws on Agg: no GUI backend, no pyplot
    plain_text(fig)  # before anything is drawn: names from the data are text
    fig.tight_layout()
    plain_text(fig)  # the ticks the layout added
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=DPI)
    w_in, h_in = fig.get_size_inches()
    return Plot(key, title, buf.getvalue(), round(w_in * DPI), round(h_in * DPI))


def _unit_formatter(unit: str) -> Any:
    from matplotlib.ticker import FuncFormatter

    base = unit.split(" ")[0]
    if base not in ("bytes", "bytes/s"):
        return None
    return FuncFormatter(lambda v, _pos: fmt_value(float(v), base))


def _schema(series: list[Recording]) -> pa.Schema:
    try:
        return pa.unify_schemas([s.table.schema for s in series])
    except (pa.ArrowException, ValueError):
        return series[0].table.schema


def time_origin(series: list[Recording]) -> tuple[int, int]:
    """Realtime ns of the first and last row of all ``series``."""
    mins, maxs = [], []
    for s in series:
        mm = pc.min_max(s.table.column("time").cast(pa.int64()))
        mins.append(int(mm["min"].as_py()))
        maxs.append(int(mm["max"].as_py()))
    return min(mins), max(maxs)


def _draw_scopes(axes: list[Axes], series: list[Recording], t0: int) -> None:
    import matplotlib as mpl

    cmap = mpl.colormaps["tab10"]
    names: dict[str, Any] = {}
    labelled: list[tuple[float, float, str]] = []
    for s in series:
        if s.scopes is None or not s.scopes.num_rows:
            continue
        anchor = s.anchor_ns
        last = int(pc.max(s.table.column("mono_ns")).as_py())
        begin = s.scopes.column("begin_ns").to_numpy(zero_copy_only=False).astype(np.int64)
        end = pc.fill_null(s.scopes.column("end_ns"), last).to_numpy(zero_copy_only=False)
        x0 = (begin + anchor - t0) / 1e9
        x1 = (end.astype(np.int64) + anchor - t0) / 1e9
        for name in dict.fromkeys(s.scopes.column("name").to_pylist()):
            color = names.setdefault(str(name), cmap(len(names) % 10))
            mask = pc.equal(s.scopes.column("name"), name).to_numpy(zero_copy_only=False)
            spans = list(zip(x0[mask].tolist(), (x1[mask] - x0[mask]).tolist()))
            for ax in axes:
                ax.broken_barh(
                    spans,
                    (0, 1),
                    transform=ax.get_xaxis_transform(),
                    facecolors=color,
                    alpha=0.15,
                    edgecolors="none",
                )
            labelled += [(a, w, str(name)) for a, w in spans]
    for a, w, name in sorted(labelled, key=lambda t: -t[1])[:MAX_SCOPE_LABELS]:
        axes[0].text(
            a + w / 2,
            0.98,
            name,
            transform=axes[0].get_xaxis_transform(),
            ha="center",
            va="top",
            fontsize=7,
            color="0.25",
            clip_on=True,
        )
    if names:
        from matplotlib.patches import Patch

        handles = [
            Patch(facecolor=c, alpha=0.3, label=f"scope {n}") for n, c in list(names.items())[:10]
        ]
        # a figure legend: the panels keep their own legends of lines
        axes[0].figure.legend(
            handles=handles, loc="upper right", fontsize=7, ncol=len(handles), frameon=False
        )


def _isolated(y: np.ndarray[Any, Any]) -> np.ndarray[Any, Any]:
    """Points with no drawn neighbour (NaN or nothing on both sides)."""
    ok = ~np.isnan(y)
    before = np.r_[False, ok[:-1]]
    after = np.r_[ok[1:], False]
    return np.asarray(ok & ~before & ~after)


def _draw_group(group: Group, series: list[Recording], t0: int, t1: int) -> Plot:
    fig, axes = _figure(len(group.panels))
    many = len(series) > 1
    for ax, (label, columns) in zip(axes, group.panels):
        for s in series:
            x_all = s.table.column("time").cast(pa.int64())
            for col in columns:
                if col not in s.table.column_names:
                    continue
                c = s.table.column(col)
                valid = c.is_valid()
                # unsafe: a uint64 beyond 2**53 is drawn rounded, not refused
                y = c.filter(valid).cast(pa.float64(), safe=False).to_numpy(zero_copy_only=False)
                x = x_all.filter(valid).to_numpy(zero_copy_only=False)
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
                    x, y = x[~far], y[~far]
                if len(y) == 0:
                    continue
                xs, ys = downsample(x, y, WIDTH_PX, t0, t1)
                spacing = float(np.median(np.diff(x))) if len(x) > 1 else 0.0
                xs, ys = break_gaps(xs - t0, ys, spacing)  # no line across missing readings
                name = f"{col} [{s.label}]" if many else col
                (line,) = ax.plot(xs / 1e9, ys, linewidth=0.9, label=name)
                alone = _isolated(ys)  # a reading between two gaps: a dot, not an invisible line
                if alone.any():
                    ax.plot(xs[alone] / 1e9, ys[alone], ".", markersize=2, color=line.get_color())
        ax.set_ylabel(label, fontsize=8)
        formatter = _unit_formatter(label)
        if formatter is not None:
            ax.yaxis.set_major_formatter(formatter)
        ax.grid(True, alpha=0.3)
        ax.tick_params(labelsize=8)
        if ax.get_legend_handles_labels()[0]:
            lines = len(ax.get_legend_handles_labels()[0])
            ax.legend(fontsize=7, loc="upper left", ncol=min(4, 1 + lines // 6), framealpha=0.6)
    _draw_scopes(axes, series, t0)
    axes[-1].set_xlabel("seconds after the first row", fontsize=8)
    axes[-1].set_xlim(0, max((t1 - t0) / 1e9, 1e-9))
    fig.suptitle(group.title, fontsize=11, x=0.01, ha="left")
    return _png(fig, group.key, group.title)


def row_spacing_ns(series: Recording) -> np.ndarray[Any, Any]:
    """Time between consecutive rows of a series (ns)."""
    mono = series.table.column("mono_ns").to_numpy(zero_copy_only=False).astype(np.int64)
    return np.diff(mono)


def _draw_timing(
    series: list[Recording], lateness: dict[str, tuple[list[float], list[int]]]
) -> Plot | None:
    panels = [s for s in series if s.table.num_rows > 1]
    if not panels and not lateness:
        return None
    fig, axes = _figure(1 + bool(lateness), sharex=False)
    ax = axes[0]
    for s in panels:
        gaps_ms = row_spacing_ns(s) / 1e6
        edges = np.geomspace(max(gaps_ms.min(), 1e-3), max(gaps_ms.max(), 1e-3) * 1.01, 60)
        ax.hist(gaps_ms, bins=edges.tolist(), histtype="step", label=s.label)
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("time between consecutive rows (ms), from the data", fontsize=8)
    ax.set_ylabel("rows", fontsize=8)
    ax.legend(fontsize=7)
    if lateness:
        ax2 = axes[1]
        for label, (upper_us, counts) in lateness.items():
            # bin i holds the ticks late by up to upper_us[i] (and more than the bin before)
            ax2.stairs(counts, [upper_us[0] / 10, *upper_us], label=label)
        ax2.set_xscale("log")
        ax2.set_xlabel("sampler's wake-up lateness (µs, upper bound of each bin)", fontsize=8)
        ax2.set_ylabel("ticks", fontsize=8)
        ax2.legend(fontsize=7)
    fig.suptitle("Sampler timing", fontsize=11, x=0.01, ha="left")
    return _png(fig, "timing", "Sampler timing")


def render_plots(
    series: list[Recording], lateness: dict[str, tuple[list[float], list[int]]] | None = None
) -> list[Plot]:
    """Every plot of the report for ``series``: one per group of columns, then the timing
    (row spacing from the data; the sampler's lateness histogram when ``lateness`` has one,
    by label: upper bounds in µs and counts)."""
    require_matplotlib()
    t0, t1 = time_origin(series)
    plots = [_draw_group(g, series, t0, t1) for g in plot_groups(_schema(series))]
    timing = _draw_timing(series, lateness or {})
    if timing is not None:
        plots.append(timing)
    return plots
