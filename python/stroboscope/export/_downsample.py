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
"""Readings further apart than this many times a column's usual spacing (the median between
its readings, in rows of the table, or in time when the rows are not known) have missing data
between them: a read that failed or a source that stopped. A missed read is at least twice
the spacing; a window's read one tick late is well within."""
STALL_FACTOR = 5.0
"""Readings that follow in their usual number of rows but further apart in time than this many
times their usual spacing have missing data between them too: the sampler itself stopped (a
few ticks it missed on a loaded machine are not a gap of the column)."""


def reading_spans(
    t: Array,
    rate: bool,
    lo: int | None = None,
    hi: int | None = None,
    at: Array | None = None,
    rows: Array | None = None,
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
    at : array of int64, optional
        The readings (indices into ``t``) to give the spans of (default: all).
    rows : array of int64, optional
        The row of the table each reading is in: with them, readings in their usual number of
        rows are joined unless :data:`STALL_FACTOR` times their usual time apart.

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
    idx = np.arange(n, dtype=np.int64) if at is None else np.asarray(at, dtype=np.int64)
    if n == 0 or len(idx) == 0:
        empty = np.zeros(0, np.int64)
        return empty, empty, np.zeros(0, bool)
    period = int(np.median(np.diff(t))) if n > 1 else 0
    here = t[idx]
    prev, nxt = np.maximum(idx - 1, 0), np.minimum(idx + 1, n - 1)
    before, after = t[prev], t[nxt]
    if rows is None:
        follows = after - here <= GAP_FACTOR * period
        came = here - before <= GAP_FACTOR * period
    else:
        r = np.asarray(rows, dtype=np.int64)
        every = float(np.median(np.diff(r))) if n > 1 else 1.0

        def close(dt: Array, drow: Array) -> Array:
            in_time = dt <= GAP_FACTOR * period
            return in_time | ((drow <= GAP_FACTOR * every) & (dt <= STALL_FACTOR * period))

        follows = close(after - here, r[nxt] - r[idx])
        came = close(here - before, r[idx] - r[prev])
    joined = (idx < n - 1) & follows
    if rate:
        near = (idx > 0) & came
        start = np.where(near, before, here - period)
        end = here.copy()
    else:
        start = here.copy()
        end = np.where(joined, after, here + period)
    if lo is not None:
        start = np.maximum(start, lo)
    if hi is not None:
        end = np.minimum(end, np.maximum(hi, here))
    return start, end, joined


def step_path(
    t: Array,
    y: Array,
    rate: bool,
    width: int,
    lo: int | None = None,
    hi: int | None = None,
    rows: Array | None = None,
) -> tuple[Array, Array, Array]:
    """A column's readings as the vertices of a line that holds each value over the time it
    stands for (:func:`reading_spans`): two vertices per reading drawn, ``(start, v)`` and
    ``(end, v)``, with a NaN vertex (a break in the line) wherever data is missing.

    Readings are first reduced per pixel column (:func:`minmax_indices` over ``[lo, hi]``,
    ``width`` columns): the ones kept in one column hold until the next kept one, so the
    column shows its extent; a break narrower than a pixel is not drawn.

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
    rows : array of int64, optional
        The table row of each reading (see :func:`reading_spans`).

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
        rows = None if rows is None else np.asarray(rows)[ok]
    if len(t) == 0:
        return np.zeros(0), np.zeros(0), np.zeros(0, bool)
    keep = minmax_indices(t, y, width, lo, hi)
    s, e, j = reading_spans(t, rate, lo, hi, at=keep, rows=rows)
    v = y[keep]
    # kept readings that are not neighbours lie in one pixel column: hold to the next kept
    inside = np.diff(keep) > 1
    e[:-1] = np.where(inside, np.maximum(e[:-1], s[1:]), e[:-1])
    j[:-1] |= inside
    n = len(keep)
    span = max((hi if hi is not None else int(t[-1])) - (lo if lo is not None else int(t[0])), 1)
    pixel = span / max(width, 1)
    # missing data after reading i: a break, where it is at least a pixel wide (a narrower one
    # cannot be seen; between pixel columns it would only drop their joining stroke)
    cut = ~j[:-1] & (s[1:] - e[:-1] >= pixel)
    thin = (e - s) < pixel
    gap_before = np.r_[True, cut]
    gap_after = np.r_[cut, True]
    alone = thin & gap_before & gap_after
    x = np.empty(2 * n, np.float64)
    x[0::2], x[1::2] = s, e
    val = np.repeat(v, 2)
    lone = np.repeat(alone, 2)
    at = 2 * np.flatnonzero(cut) + 2  # after the end vertex of each reading before a gap
    return np.insert(x, at, np.nan), np.insert(val, at, np.nan), np.insert(lone, at, False)
