"""The live view's series: every row of a column kept for the window (10 min at most), reduced
per screen column to its minimum and maximum, and drawn as a band of block characters.

A column's rows are kept twice: every row of the last :data:`RAW_S` seconds, and per
:data:`BUCKET_NS` bucket the minimum and maximum of all rows of the last :data:`KEEP_NS`. The
buckets keep the min of minima and max of maxima (the same extremes), so a 1 ms peak shows at
any window, while memory stays bounded (60,000 buckets for 10 min). A window the rows cover
(up to 12 s) is drawn from them; a longer one from the buckets, each placed at its start (a
column at such a window spans 150 ms or more: a bucket straddling two columns is drawn in the
first).
"""

from __future__ import annotations

from typing import Any

import numpy as np
from rich.text import Span, Text

Array = np.ndarray[Any, Any]

RAW_S = 12
"""Seconds of rows kept whole (the windows up to 10 s draw from them)."""
BUCKET_NS = 10_000_000
"""The buckets' width (10 ms): the windows of 10 s and more draw from them."""
KEEP_NS = 600 * 10**9
"""The longest window (10 min), in ns."""
_EIGHTHS = " ▁▂▃▄▅▆▇█"
_CHARS = np.array(list(_EIGHTHS))


class GrowingColumns:
    """Columns of numbers appended at the end and trimmed at the front, in amortised O(1)."""

    def __init__(self, dtypes: tuple[Any, ...]) -> None:
        self.arrays = [np.empty(1024, d) for d in dtypes]
        self.start = 0
        self.stop = 0

    def view(self, i: int) -> Array:
        return self.arrays[i][self.start : self.stop]

    def append(self, *values: Array) -> None:
        n = len(values[0])
        if self.stop + n > len(self.arrays[0]):
            keep = self.stop - self.start
            size = max(len(self.arrays[0]), 2 * (keep + n))
            for i, a in enumerate(self.arrays):
                b = np.empty(size, a.dtype)
                b[:keep] = a[self.start : self.stop]
                self.arrays[i] = b
            self.start, self.stop = 0, keep
        for a, v in zip(self.arrays, values, strict=True):
            a[self.stop : self.stop + n] = v
        self.stop += n

    def drop_before(self, first: int) -> None:
        """Drop entries before position ``first`` of the view."""
        self.start += max(0, min(first, self.stop - self.start))


class Series:
    """One column's rows for the window (see the module): :meth:`add`, then :meth:`extremes`
    per screen column and :attr:`last`."""

    def __init__(self, unit: str) -> None:
        self.unit = unit
        self._raw = GrowingColumns((np.int64, np.float64))
        self._buckets = GrowingColumns((np.int64, np.float64, np.float64))
        self.last: tuple[int, float] | None = None  # (mono_ns, value) of the newest cell

    def add(self, mono_ns: Array, values: Array) -> None:
        """Append rows (ascending times; NaN cells, rows without a value, are skipped)."""
        keep = ~np.isnan(values)
        t, v = mono_ns[keep], values[keep]
        if not len(t):
            return
        self.last = (int(t[-1]), float(v[-1]))
        self._raw.append(t, v)
        raw_t = self._raw.view(0)
        self._raw.drop_before(int(np.searchsorted(raw_t, t[-1] - RAW_S * 10**9)))
        b = t // BUCKET_NS
        starts = np.flatnonzero(np.r_[True, b[1:] != b[:-1]])
        ids, lo, hi = b[starts], np.minimum.reduceat(v, starts), np.maximum.reduceat(v, starts)
        have = self._buckets.view(0)
        if len(have) and have[-1] == ids[0]:  # the newest bucket goes on
            end = self._buckets.stop - 1
            self._buckets.arrays[1][end] = min(self._buckets.arrays[1][end], lo[0])
            self._buckets.arrays[2][end] = max(self._buckets.arrays[2][end], hi[0])
            ids, lo, hi = ids[1:], lo[1:], hi[1:]
        self._buckets.append(ids, lo, hi)
        have = self._buckets.view(0)
        self._buckets.drop_before(int(np.searchsorted(have, (t[-1] - KEEP_NS) // BUCKET_NS)))

    def extremes(self, lo_ns: int, hi_ns: int, width: int) -> tuple[Array, Array]:
        """Per screen column ``i`` of ``width`` over ``[lo_ns, hi_ns)``, the minimum and the
        maximum of every row in ``[lo + i * step, lo + (i + 1) * step)`` (NaN without a row)."""
        step = (hi_ns - lo_ns) / max(width, 1)
        raw_t = self._raw.view(0)
        oldest = self._buckets.view(0)[:1] * BUCKET_NS
        # the rows when they reach back to the window's start, or to the first bucket
        covers = len(raw_t) and (raw_t[0] <= lo_ns or raw_t[0] < oldest[0] + BUCKET_NS)
        from_raw = bool(covers)
        if from_raw:
            t, mins, maxs = raw_t, self._raw.view(1), self._raw.view(1)
        else:  # a bucket's extremes, placed at its start
            t = self._buckets.view(0) * BUCKET_NS
            mins, maxs = self._buckets.view(1), self._buckets.view(2)
        edges = lo_ns + step * np.arange(width + 1)
        at = np.searchsorted(t, edges.astype(np.int64))
        lo_out = np.full(width, np.nan)
        hi_out = np.full(width, np.nan)
        full = np.flatnonzero(at[1:] > at[:-1])
        if len(full):
            starts = at[full]
            end = int(at[-1])
            lo_out[full] = np.minimum.reduceat(mins[:end], starts)
            hi_out[full] = np.maximum.reduceat(maxs[:end], starts)
        return lo_out, hi_out


def scale_top(unit: str, highest: float) -> float:
    """The value at the top of a chart: 100 for a percentage that stays within it, else the
    highest value in view (1 when there is none)."""
    if unit == "%" and highest <= 100:
        return 100.0
    return highest if highest > 0 else 1.0


def band(
    mins: Array, maxs: Array, height: int, top: float, style: str, low_style: str
) -> list[Text]:
    """A chart ``height`` lines high: per column a bar from 0 up to the maximum (its top to an
    eighth of a line), the part below the minimum in ``low_style`` and the part from the
    minimum to the maximum in ``style`` (what varied within the column). Columns without a row
    are blank; a column whose maximum is above 0 shows at least an eighth."""
    scale = height * 8 / top if top > 0 else 0.0
    no_hi = np.isnan(maxs)
    # NaN cells read as 0 before the arithmetic (no invalid-value warnings to silence)
    hi = np.ceil(np.minimum(np.maximum(np.where(no_hi, 0, maxs), 0), top) * scale)
    lo = np.floor(np.minimum(np.maximum(np.where(np.isnan(mins), 0, mins), 0), top) * scale)
    hi = hi.astype(np.int64)  # a maximum above 0 rounds up to an eighth at least
    hi[no_hi] = -1  # blank columns
    lo = lo.astype(np.int64)
    base = np.arange(height - 1, -1, -1)[:, None] * 8  # the top line first
    fill = np.clip(hi[None, :] - base, 0, 8)
    chars = _CHARS[fill]
    chars[:, no_hi] = " "
    low = lo[None, :] >= base + np.maximum(fill, 1)
    lines = []
    for row in range(height):
        runs = low[row]
        cuts = (np.flatnonzero(runs[1:] != runs[:-1]) + 1).tolist()  # runs of one style
        spans = [
            Span(a, b, low_style if runs[a] else style)
            for a, b in zip([0, *cuts], [*cuts, len(runs)], strict=True)
        ]
        lines.append(Text("".join(chars[row].tolist()), spans=spans))
    return lines
