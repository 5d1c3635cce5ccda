"""The report's matplotlib figures (the ``report`` extra), before any data is drawn on them:
every time plot with the same margins so their time axes line up, names from the data drawn as
text (never mathtext), tick labels by one rule (:func:`tick_texts`: no offset, no ``-0``,
bytes in Ki/Mi/Gi), a constant as one tick with its value, and the PNG each figure becomes.
matplotlib's object API is used (``Figure`` + the Agg canvas), never ``pyplot``, so no global
state or GUI backend is touched.
"""

from __future__ import annotations

import io
import math
import weakref
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

if TYPE_CHECKING:
    from matplotlib.axes import Axes
    from matplotlib.figure import Figure

WIDTH_PX = 1200
"""Width of every figure in pixels (at ``DPI``); the downsampling keeps 4 points per pixel."""
DPI = 100
PANEL_HEIGHT_IN = 2.4
LEFT_PX, RIGHT_PX = 100, 24
"""Margins of every time plot (pixels): the same in every figure, so their time axes line up
whatever the width of their tick labels."""
TOP_PX, BOTTOM_PX, LEGEND_PX, GAP_PX = 34, 40, 15, 16
"""Title band, x-axis labels, one row of a figure legend and the space between panels
(pixels)."""


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


def stacked_figure(panels: int, sharex: bool = True) -> tuple[Figure, list[Axes]]:
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


_FIXED: weakref.WeakSet[Figure] = weakref.WeakSet()
"""Figures laid out with the fixed margins of the time plots (not by ``tight_layout``)."""


def time_figure(
    heights_in: list[float], legend_rows: int = 0, panel_legend_rows: list[int] | None = None
) -> Figure:
    """A figure of panels (``heights_in`` inches each) on one time axis, with the margins of
    every time plot (:data:`LEFT_PX`...): their axes line up from figure to figure; room for
    ``legend_rows`` rows of a figure legend above them, and for ``panel_legend_rows[i]`` rows
    of panel ``i``'s own legend above that panel (outside its axes: a legend never covers
    data, see :func:`legend_above`)."""
    from matplotlib.figure import Figure

    rows = panel_legend_rows or [0] * len(heights_in)
    legend_px = LEGEND_PX * legend_rows
    panels_px = [DPI * h for h in heights_in]
    gaps_px = GAP_PX * (len(heights_in) - 1)
    height_px = TOP_PX + legend_px + BOTTOM_PX + gaps_px + sum(panels_px) + LEGEND_PX * sum(rows)
    fig = Figure(figsize=(WIDTH_PX / DPI, height_px / DPI), dpi=DPI)
    left, width = LEFT_PX / WIDTH_PX, 1 - (LEFT_PX + RIGHT_PX) / WIDTH_PX
    top = height_px - TOP_PX - legend_px
    axes: list[Axes] = []
    for panel_px, panel_rows in zip(panels_px, rows):
        top -= LEGEND_PX * panel_rows
        bottom = top - panel_px
        rect = (left, bottom / height_px, width, panel_px / height_px)
        axes.append(fig.add_axes(rect, sharex=axes[0] if axes else None))
        top = bottom - GAP_PX
    for ax in axes[:-1]:  # one time axis: its labels under the last panel only
        ax.tick_params(axis="x", labelbottom=False)
    _FIXED.add(fig)
    return fig


LEGEND_COLUMNS = 4
"""Entries per row of a panel's legend (the longest column names fit 4 to a row)."""


def legend_rows(entries: int, columns: int = LEGEND_COLUMNS) -> int:
    """Rows a panel's legend of ``entries`` takes (``columns`` to a row)."""
    return -(-entries // columns)


def legend_above(ax: Axes, columns: int = LEGEND_COLUMNS) -> None:
    """The legend of ``ax`` above its axes, outside them (in the rows
    :func:`time_figure` left for it, ``columns`` entries to a row): it covers no data
    whatever the data."""
    handles, labels = ax.get_legend_handles_labels()
    if not handles:
        return
    ax.legend(
        handles,
        labels,
        loc="lower left",
        bbox_to_anchor=(0.0, 1.0),
        ncol=min(len(handles), columns),
        fontsize=7,
        frameon=False,
        borderaxespad=0.1,
        borderpad=0.0,
        handlelength=1.6,
        columnspacing=1.2,
        labelspacing=0.15,
    )


def figure_png(fig: Figure, key: str, title: str) -> Plot:
    from matplotlib.backends.backend_agg import FigureCanvasAgg

    FigureCanvasAgg(fig)  # the figure draws on Agg: no GUI backend, no pyplot
    plain_text(fig)  # before anything is drawn: names from the data are text
    if fig not in _FIXED:
        fig.tight_layout()
    plain_text(fig)  # the ticks the layout added
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=DPI)
    w_in, h_in = fig.get_size_inches()
    return Plot(key, title, buf.getvalue(), round(w_in * DPI), round(h_in * DPI))


def tick_texts(values: list[float], unit: str) -> list[str]:
    """The labels of ticks at ``values`` on an axis of ``unit``: each the value itself with as
    many decimals as tell neighbouring ticks apart (one tick: its value in 7 significant
    digits), bytes scaled to the largest tick's Ki/Mi/Gi/Ti, never an offset or ``-0``."""
    vals = [float(v) for v in values]
    if not vals:
        return []
    steps = [abs(b - a) for a, b in zip(vals, vals[1:]) if b != a]
    step = min(steps) if steps else 0.0
    big = max(abs(v) for v in vals)
    scale, suffix = 1.0, ""
    binary = is_bytes(unit)
    if binary:
        for size, name in ((1 << 40, "Ti"), (1 << 30, "Gi"), (1 << 20, "Mi"), (1 << 10, "Ki")):
            if big >= size:
                scale, suffix = float(size), f" {name}"
                break
    exact = 0  # decimals that write every tick of a binary step exactly (256 Ki in Mi: 0.25)
    if binary and step > 0:
        while exact < 12 and any(abs(round(v / scale, exact) - v / scale) > 1e-9 * step / scale
                                 for v in vals):  # fmt: skip
            exact += 1
    out = []
    for v in vals:
        x = v / scale
        if step == 0.0:
            text = f"{x:.7g}"
        elif big / scale >= 1e7 or 0 < big / scale < 1e-3:
            digits = int(np.clip(np.ceil(np.log10(big / step)) + 1, 1, 15))
            text = f"{x:.{digits}g}"
        else:
            decimals = int(np.clip(np.ceil(-np.log10(step / scale) - 1e-9), 0, 12))
            text = f"{x:.{max(decimals, exact)}f}"
        if float(text) == 0:  # no "-0", and no unit on nothing
            out.append("0" if binary else text.lstrip("-"))
            continue
        out.append(text + suffix)
    return out


def is_bytes(unit: str) -> bool:
    """Whether a panel of ``unit`` (its label, ``bytes · host``) holds bytes or bytes/s."""
    return unit.split(" ")[0] in ("bytes", "bytes/s")


BYTE_INTERVALS = 8
"""A byte axis has at most this many intervals between its ticks (and more than half of it)."""


def byte_ticks(lo: float, hi: float, most: int = BYTE_INTERVALS) -> list[float]:
    """Ticks of a byte axis from ``lo`` to ``hi``: the multiples of the smallest power of two
    (``2**k`` bytes, 4 Gi, 256 Ki...) that cuts the span into at most ``most`` intervals, so
    every tick is a round binary value. ``byteTicks`` in ``page_data.js`` is the same rule for
    the zooming page."""
    span = hi - lo
    if not (np.isfinite(span) and span > 0):
        return [lo] if np.isfinite(lo) else []
    step = 2.0 ** math.ceil(math.log2(span / most))
    first, last = math.ceil(lo / step), math.floor(hi / step)
    return [k * step for k in range(first, last + 1)]


def byte_locator() -> Any:
    """A matplotlib tick locator placing :func:`byte_ticks`."""
    from matplotlib.ticker import Locator

    class ByteLocator(Locator):
        def __call__(self) -> Any:
            assert self.axis is not None  # set by the axis the locator is given to
            lo, hi = self.axis.get_view_interval()
            return self.tick_values(lo, hi)

        def tick_values(self, vmin: float, vmax: float) -> Any:
            lo, hi = min(vmin, vmax), max(vmin, vmax)
            return byte_ticks(lo, hi)

    return ByteLocator()


def value_formatter(unit: str) -> Any:
    """A matplotlib tick formatter writing :func:`tick_texts` (the one rule of every panel)."""
    from matplotlib.ticker import Formatter

    class ValueFormatter(Formatter):
        def __call__(self, x: float, pos: int | None = None) -> str:
            return tick_texts([x], unit)[0]

        def format_ticks(self, values: Any) -> list[str]:
            return tick_texts(list(values), unit)

    return ValueFormatter()


MIN_SPAN = 1e-3
"""The least height of a panel's value axis, relative to its largest magnitude: a series that
moves by less (``disk.used_pct`` by 1e-6 %) is drawn as the flat line it is to a reader."""


def value_axis(ax: Axes, lo: float, hi: float, unit: str) -> None:
    """The y-axis of a panel whose drawn values span ``[lo, hi]``: one tick with the value
    and a flat line for a constant, a span at least :data:`MIN_SPAN` of the magnitude for
    a series that barely moves, labels by :func:`value_formatter`."""
    ax.yaxis.set_major_formatter(value_formatter(unit))
    if is_bytes(unit):
        ax.yaxis.set_major_locator(byte_locator())
    if not (np.isfinite(lo) and np.isfinite(hi)):
        return
    big = max(abs(lo), abs(hi))
    if hi == lo:
        pad = abs(lo) * 0.05 or 1.0
        ax.set_ylim(lo - pad, hi + pad)
        ax.set_yticks([lo])
        return
    if hi - lo < MIN_SPAN * big:
        mid, half = (hi + lo) / 2, MIN_SPAN * big / 2
        ax.set_ylim(mid - half * 1.1, mid + half * 1.1)
