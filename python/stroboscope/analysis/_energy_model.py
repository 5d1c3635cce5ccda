"""The one GPU energy model, vectorised over windows: the counter's knots, and the power integral
where the counter cannot serve (the model and its bounds: :mod:`.energy`, docs/energy.md).

:func:`stroboscope.analysis.energy.window_energy` (energy windows), the per-scope
:func:`~stroboscope.analysis.scope_summary.summary` and
:func:`~stroboscope.analysis.attribution.attribute_trace` all evaluate windows here, so a window
gets one figure whichever of them asks.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt
import pyarrow as pa

from stroboscope.analysis._series import F64, I64, Series, cells, int64_cells, read_times

RESOLUTION_J = 1e-3  # NVML's energy counter counts whole mJ
_NS = 1e9
_NONE = np.iinfo(np.int64).min  # sigma of the first knot: no reading before it
B = npt.NDArray[np.bool_]


def readings(samples: pa.Table, column: str) -> Series:
    """The column's valid readings, timed as in :mod:`._series` (its GPU's read time, else
    ``mono_ns``: :func:`~stroboscope.analysis._series.read_times`), sorted, one per distinct
    time; read without converting Python scalars (see :func:`._series.cells`)."""
    t = read_times(samples, column, int64_cells(samples.column("mono_ns"), -1))
    v = np.asarray(cells(samples.column(column), np.float64, math.nan), dtype=np.float64)
    ok = ~np.isnan(v)
    t, v = t[ok], v[ok]
    if len(t) > 1 and bool((np.diff(t) < 0).any()):
        order = np.argsort(t, kind="stable")
        t, v = t[order], v[order]
    if len(t) > 1:
        keep = np.concatenate(([True], np.diff(t) > 0))
        t, v = t[keep], v[keep]
    return Series(column, t, v)


def median_gap_s(t: I64) -> float:
    return float(np.median(np.diff(t))) / _NS if len(t) > 1 else math.nan


def max_power_seen(samples: pa.Table, gpu: int, metrics: tuple[str, ...]) -> float:
    """The highest reading of ``gpu``'s ``metrics`` (power_w, power_limit_w) in the frame (W;
    NaN if none)."""
    best = math.nan
    for metric in metrics:
        name = f"gpu.{gpu}.{metric}"
        if name in samples.column_names and len(s := readings(samples, name)):
            best = float(np.nanmax([best, float(s.v.max())]))
    return best


@dataclass(frozen=True)
class Edges:
    """Per window: the energy (J) and its bounds, and how the edges were served.

    ``extrapolated``: an edge lies past the last counter step (carried forward at the last
    step's mean power) or, for the power integral, outside the power readings (the nearest one
    held); ``hard``: the bounds follow from the readings alone.
    """

    joules: F64
    low_j: F64
    high_j: F64
    extrapolated: B
    hard: B


class Knots:
    """The counter's knots: ``tau`` (first reading of each new value), ``value`` (mJ), ``sigma``
    (the reading before it), each step's mean power ``step_w`` and least power ``least_w``."""

    def __init__(self, s: Series) -> None:
        change = np.concatenate(([True], np.diff(s.v) != 0)) if len(s) else np.zeros(0, bool)
        idx = np.flatnonzero(change)
        self.tau = s.t[idx]
        self.value = s.v[idx]
        self.sigma = np.where(idx > 0, s.t[np.maximum(idx - 1, 0)], _NONE)
        dt = np.diff(self.tau).astype(np.float64)
        # Mean power of each step (W = mJ/ms), between the first readings of its two values.
        self.step_w = np.diff(self.value) / (dt / 1e6) if len(dt) else np.zeros(0)
        # The least power a step implies: its energy over the longest time it can have taken,
        # from the reading before the previous value was first seen (readings are jittered, so
        # the mean above can exceed the true power when two knots come close together).
        known = self.sigma[:-1] > _NONE
        since = np.where(known, self.sigma[:-1], self.tau[:-1])
        longest = (self.tau[1:] - since).astype(np.float64)
        self.least_w = np.diff(self.value) / (longest / 1e6) if len(dt) else np.zeros(0)

    def span(self, a: I64, b: I64) -> tuple[I64, I64]:
        """Per window: the knot seen by its begin and the first knot surely after its end (the
        last knot when none is); the steps between them bear on the window."""
        first = np.searchsorted(self.tau, a, side="right").astype(np.int64) - 1
        last = np.searchsorted(self.sigma, b, side="left").astype(np.int64)
        return first, np.minimum(last, len(self.tau) - 1)

    def usable(self, a: I64, b: I64, bound_w: float) -> B:
        """Per window: a knot at or before its begin, and no step bearing on it that goes
        backwards or implies more than ``bound_w``."""
        first, last = self.span(a, b)
        bad = (np.diff(self.value) < 0) | (self.least_w > bound_w)
        bad_before = np.concatenate(([0], np.cumsum(bad)))
        lo, hi = np.maximum(first, 0), np.maximum(last, first)
        return np.asarray((first >= 0) & (bad_before[hi] - bad_before[lo] == 0), dtype=bool)

    def at(self, x: I64, top_w: F64) -> tuple[F64, F64, F64, B, B]:
        """At each ``x`` (at or after the first knot): the counter's estimate, lower and upper
        bound (mJ), whether past the last knot (extrapolated at the last step's mean power) and
        whether the upper bound is a reading's (else it assumes at most ``top_w`` per ``x``)."""
        n = len(self.tau)
        k = np.clip(np.searchsorted(self.tau, x, side="right") - 1, 0, n - 1)
        low = self.value[k]
        extrapolated = k == n - 1
        slope = float(self.step_w[-1]) if len(self.step_w) else 0.0  # W = mJ/ms
        inner = np.interp(x.astype(np.float64), self.tau.astype(np.float64), self.value)
        est = np.where(extrapolated, low + slope * (x - self.tau[k]) / 1e6, inner)
        est = np.maximum(est, low)
        later = np.searchsorted(self.sigma, x, side="left")
        hard = later < n
        high_knot = self.value[np.minimum(later, n - 1)]
        est = np.where(hard, np.minimum(est, high_knot), est)
        since = np.where(self.sigma[k] > _NONE, self.sigma[k], self.tau[k])
        top = np.where(np.isnan(top_w), 0.0, top_w)
        high = np.where(hard, high_knot, np.maximum(low + top * (x - since) / 1e6, est))
        r = RESOLUTION_J * 1e3
        return est, low - r, high + r, extrapolated, hard


def counter_edges(begin: Knots, end: Knots, a: I64, b: I64, top_w: F64) -> Edges:
    """Energy (J) over each ``[a, b]`` from the counter (``begin``'s knots at the begins: the
    rows kept before a ring overwrote them, else the same as ``end``)."""
    ea, la, ha, xa, hard_a = begin.at(a, top_w)
    eb, lb, hb, xb, hard_b = end.at(b, top_w)
    return Edges((eb - ea) / 1e3, np.maximum(lb - ha, 0.0) / 1e3, (hb - la) / 1e3, xa | xb,
                 hard_a & hard_b)  # fmt: skip


def _held_integral(t: I64, v: F64, gap_value: F64 | None, x: I64) -> F64:
    """Integral (value·ns) from ``t[0]`` to each ``x`` (``len(t) >= 2``): ``v`` linear between
    readings, or ``gap_value[i]`` constant over gap ``i`` when given; the first and last
    readings held beyond the span."""
    dt = np.diff(t).astype(np.float64)
    per_gap = (v[1:] + v[:-1]) / 2.0 if gap_value is None else gap_value
    cum = np.concatenate(([0.0], np.cumsum(dt * per_gap)))
    k = np.clip(np.searchsorted(t, x, side="right") - 1, 0, len(t) - 1)
    dx = (x - t[k]).astype(np.float64)
    if gap_value is None:
        part = dx * (v[k] + np.interp(x.astype(np.float64), t.astype(np.float64), v)) / 2.0
    else:
        part = dx * np.where(k < len(t) - 1, gap_value[np.minimum(k, len(t) - 2)], v[-1])
    before = x < t[0]
    total = np.where(before, (x - t[0]).astype(np.float64) * v[0], cum[k] + part)
    return np.asarray(total, dtype=np.float64)


def power_edges(s: Series, a: I64, b: I64) -> Edges:
    """Energy (J) over each ``[a, b]``: the power taken linear between readings (trapezoids),
    the nearest reading held outside them; bounds from the lower and the higher of each gap's
    two readings."""
    if len(s) == 1:  # one reading: held everywhere
        j = (b - a).astype(np.float64) * s.v[0] / _NS
        return Edges(j, j.copy(), j.copy(), np.ones(len(a), bool), np.zeros(len(a), bool))
    lo_rate, hi_rate = np.minimum(s.v[:-1], s.v[1:]), np.maximum(s.v[:-1], s.v[1:])

    def over(rate: F64 | None) -> F64:
        return (_held_integral(s.t, s.v, rate, b) - _held_integral(s.t, s.v, rate, a)) / _NS

    outside = (a < s.t[0]) | (b > s.t[-1])
    return Edges(over(None), over(lo_rate), over(hi_rate), outside, np.zeros(len(a), bool))


def inside(t: I64, a: I64, b: I64) -> I64:
    """Per window: the readings at ``t`` (sorted) with ``a <= t < b``."""
    lo = np.searchsorted(t, a, side="left")
    hi = np.searchsorted(t, b, side="left")
    return np.asarray(np.maximum(hi - lo, 0), dtype=np.int64)
