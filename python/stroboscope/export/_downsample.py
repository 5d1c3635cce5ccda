"""Downsampling for plots that looks the same as drawing every point (min/max per pixel column).

A line plot ``width`` pixels wide cannot show more than one column of pixels per bucket of
``x``; within a bucket what is visible is the vertical extent (min to max) and where the line
enters and leaves it. So each bucket keeps at most four points — its first, its minimum, its
maximum and its last, in their original order — and the drawn picture is the same as with every
point, while a 1-hour 1 kHz run (3.6 million rows) becomes a few thousand points per line.
"""

from __future__ import annotations

from typing import Any

import numpy as np

Array = np.ndarray[Any, Any]


def bucket_of(x: Array, width: int, lo: int | None = None, hi: int | None = None) -> Array:
    """The pixel column (``0 .. width-1``) of each ``x`` (int64 ns) over ``[lo, hi]``."""
    if width < 1:
        raise ValueError(f"width must be a positive number of pixels, got {width!r}")
    x = np.asarray(x, dtype=np.int64)
    lo = int(x.min()) if lo is None else lo
    hi = int(x.max()) if hi is None else hi
    span = max(hi - lo, 1)
    # float64 is exact to 2**53 ns (104 days) for the offsets, ample for one run
    b = np.floor((x - lo).astype(np.float64) * (width / span)).astype(np.int64)
    return np.clip(b, 0, width - 1)


def minmax_indices(
    x: Array, y: Array, width: int, lo: int | None = None, hi: int | None = None
) -> Array:
    """Indices of the points to draw: per pixel bucket the first, min, max and last point.

    Parameters
    ----------
    x : array of int64
        Times (ns), in ascending order.
    y : array of float
        Values, without NaN (drop empty cells first).
    width : int
        Pixel columns of the plot.
    lo, hi : int, optional
        The x range the plot spans (default: the data's).

    Returns
    -------
    array of int64
        Sorted, unique indices into ``x``/``y``; every point when there are at most
        ``4 * width`` of them.
    """
    n = len(x)
    if n <= 4 * width:
        return np.arange(n, dtype=np.int64)
    y = np.asarray(y, dtype=np.float64)
    x = np.asarray(x, dtype=np.int64)
    lo = int(x[0]) if lo is None else lo
    hi = int(x[-1]) if hi is None else hi
    # x ascending: each bucket is a run of indices; its first index is where x reaches the
    # bucket's left edge (the same rule as bucket_of, evaluated at the W edges, not n points)
    b = bucket_of(x, width, lo, hi)
    starts = np.flatnonzero(np.r_[True, b[1:] != b[:-1]])
    lengths = np.diff(np.r_[starts, n])
    ends = starts + lengths - 1
    mins = np.minimum.reduceat(y, starts)
    maxs = np.maximum.reduceat(y, starts)
    # the first index in each run holding its min (max): the first hit at or after its start
    hits_min = np.flatnonzero(y == np.repeat(mins, lengths))
    hits_max = np.flatnonzero(y == np.repeat(maxs, lengths))
    first_min = hits_min[np.searchsorted(hits_min, starts)]
    first_max = hits_max[np.searchsorted(hits_max, starts)]
    keep = np.concatenate([starts, first_min, first_max, ends])
    return np.unique(keep)


def break_gaps(x: Array, y: Array, spacing: float, factor: float = 5.0) -> tuple[Array, Array]:
    """Insert a NaN point (a break in a matplotlib line) between consecutive points more than
    ``factor * spacing`` apart, so no line is drawn across a stretch without readings.

    Consecutive points that :func:`minmax_indices` keeps in two different buckets are
    consecutive in the data too (the last of one bucket, the first of the next), so a gap seen
    here is a gap in the data."""
    if len(x) < 2 or not spacing > 0:
        return np.asarray(x, np.float64), np.asarray(y, np.float64)
    cut = np.flatnonzero(np.diff(x) > factor * spacing) + 1
    xf = np.insert(np.asarray(x, np.float64), cut, np.nan)
    yf = np.insert(np.asarray(y, np.float64), cut, np.nan)
    return xf, yf


def downsample(
    x: Array, y: Array, width: int, lo: int | None = None, hi: int | None = None
) -> tuple[Array, Array]:
    """``x`` and ``y`` reduced to the points :func:`minmax_indices` keeps (NaN dropped first)."""
    x = np.asarray(x, dtype=np.int64)
    y = np.asarray(y, dtype=np.float64)
    ok = ~np.isnan(y)
    if not ok.all():
        x, y = x[ok], y[ok]
    idx = minmax_indices(x, y, width, lo, hi)
    return x[idx], y[idx]


GAP_FACTOR = 1.5
"""Readings further apart than this many times a column's usual spacing (the median time
between its readings) have missing data between them: a read that failed or never came. A
missed read is at least twice the spacing; a window's read one tick late is well within."""


def reading_spans(
    t: Array, rate: bool, lo: int | None = None, hi: int | None = None
) -> tuple[Array, Array, Array]:
    """The time each reading's value stands for on a plot, so that a value is drawn as it was
    sampled, never interpolated.

    A level (gauge, counter) holds from its reading until the next one. A rate or share is
    the mean over a window ending at its reading: it stands for the time since the reading
    before. Where two readings are further apart than :data:`GAP_FACTOR` times the column's
    usual spacing ``p`` (its median), data is missing between them: the level holds for ``p``
    only, the rate after the gap stands for ``p`` only, and nothing is drawn in between. The
    last level holds ``p`` too (a source read every second holds to the end of its second,
    not to its last reading), and the first rate stands for the ``p`` before it.

    Parameters
    ----------
    t : array of int64
        Times of the readings (ns), ascending: the rows where the column has a value.
    rate : bool
        Whether the values are means over windows (kind ``rate``) rather than levels.
    lo, hi : int, optional
        The span the run covers (its first and last row): no span reaches outside it.

    Returns
    -------
    start, end : array of int64
        Per reading, the time its value stands for: ``[start, end]``.
    joined : array of bool
        Per reading, whether the next one follows without missing data (``end`` is the next
        ``start``); False for the last.
    """
    t = np.asarray(t, dtype=np.int64)
    n = len(t)
    if n == 0:
        empty = np.zeros(0, np.int64)
        return empty, empty, np.zeros(0, bool)
    d = np.diff(t)
    period = int(np.median(d)) if n > 1 else 0
    near = d <= GAP_FACTOR * period
    if rate:
        start = np.empty(n, np.int64)
        start[0] = t[0] - period
        start[1:] = np.where(near, t[:-1], t[1:] - period)
        end = t.copy()
    else:
        start = t.copy()
        end = np.empty(n, np.int64)
        end[:-1] = np.where(near, t[1:], t[:-1] + period)
        end[-1] = t[-1] + period
    if lo is not None:
        start = np.maximum(start, lo)
    if hi is not None:
        end = np.minimum(end, np.maximum(hi, t))
    joined = np.r_[near, False]
    return start, end, joined


def step_path(
    t: Array,
    y: Array,
    rate: bool,
    width: int,
    lo: int | None = None,
    hi: int | None = None,
) -> tuple[Array, Array, Array]:
    """A column's readings as the vertices of a line that holds each value over the time it
    stands for (:func:`reading_spans`): two vertices per reading drawn, ``(start, v)`` and
    ``(end, v)``, with a NaN vertex (a break in the line) wherever data is missing.

    Readings are first reduced per pixel column (:func:`minmax_indices` over ``[lo, hi]``,
    ``width`` columns): the ones kept in one column hold until the next kept one, so the
    column shows its extent and no gap narrower than a pixel is drawn.

    Parameters
    ----------
    t, y : arrays
        Reading times (int64 ns, ascending) and values (float; NaN dropped first).
    rate : bool
        Means over windows (see :func:`reading_spans`).
    width : int
        Pixel columns of the plot.
    lo, hi : int, optional
        The span of the plot (default: the readings').

    Returns
    -------
    x, v : arrays of float64
        The vertices (times in ns as float; NaN at each break).
    alone : array of bool
        Per vertex, whether its reading is drawn shorter than a pixel with missing data on
        both sides: a line there is invisible, a caller marks it with a dot.
    """
    t = np.asarray(t, dtype=np.int64)
    y = np.asarray(y, dtype=np.float64)
    ok = ~np.isnan(y)
    if not ok.all():
        t, y = t[ok], y[ok]
    if len(t) == 0:
        return np.zeros(0), np.zeros(0), np.zeros(0, bool)
    start, end, joined = reading_spans(t, rate, lo, hi)
    keep = minmax_indices(t, y, width, lo, hi)
    s, e, v, j = start[keep], end[keep].copy(), y[keep], joined[keep].copy()
    # kept readings that are not neighbours lie in one pixel column: hold to the next kept
    inside = np.diff(keep) > 1
    e[:-1] = np.where(inside, np.maximum(e[:-1], s[1:]), e[:-1])
    j[:-1] |= inside
    n = len(keep)
    cut = ~j[:-1] & (e[:-1] < s[1:])  # missing data after reading i: a break
    span = max((hi if hi is not None else int(t[-1])) - (lo if lo is not None else int(t[0])), 1)
    thin = (e - s) < span / max(width, 1)
    gap_before = np.r_[True, cut]
    gap_after = np.r_[cut, True]
    alone = thin & gap_before & gap_after
    x = np.empty(2 * n, np.float64)
    x[0::2], x[1::2] = s, e
    val = np.repeat(v, 2)
    lone = np.repeat(alone, 2)
    at = 2 * np.flatnonzero(cut) + 2  # after the end vertex of each reading before a gap
    return np.insert(x, at, np.nan), np.insert(val, at, np.nan), np.insert(lone, at, False)
