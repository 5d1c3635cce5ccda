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
