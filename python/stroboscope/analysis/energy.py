"""GPU energy between two instants on CLOCK_MONOTONIC, with the uncertainty stated.

The source is the continuously sampled counter ``gpu.{i}.energy_mj``: mJ since the sampler's
first reading, made wrap-safe in the core from NVML's total energy counter. Each reading is timed
by ``gpu.{i}.read_mono_ns`` (when that GPU's batched read returned; ``gpu.read_mono_ns``, the
poll's start, in frames without it). Where the counter is absent or fails its
sanity check, the integral of ``gpu.{i}.power_w`` serves instead, and the result says why.

The counter model (docs/energy.md has the derivation):

- The counter is non-decreasing and changes in steps: a *knot* is the first reading of each new
  value, at time ``tau_k`` with value ``K_k``; the reading before it (time ``sigma_k``) still
  showed the old value, so the step happened in ``(sigma_k, tau_k]``. When the counter updates on
  every reading, the knots are the readings.
- Estimate: the energy at ``x`` is linear between the knots around it (constant power between
  counter updates), so a window shorter than the counter's update period gets its share of the
  step rather than 0 or a whole step. After the last knot the last step's mean power is carried
  forward (``extrapolated``).
- Bounds, from monotonicity alone: the energy at ``x`` is at least the value of the last knot
  seen by ``x`` (``tau_k <= x``) and at most the value of the first knot that surely came after
  ``x`` (``sigma_k >= x``); when no such knot exists, at most the last value plus the highest
  power seen times the time since that step could have happened. Each edge also carries the
  counter's resolution (1 mJ). The window's bounds are ``[low(b) - high(a), high(b) - low(a)]``,
  about one counter step (power x update period) either side at each edge.

Sanity: the steps that bear on the window must not go backwards, and the least power each one
implies (its energy over the longest time it can have taken, ``tau_k - sigma_{k-1}``) must not
exceed ``max_power_w`` (default: 3x the highest enforced power limit or power reading seen, else
10 kW);
a raw reading below the previous one is read by the core as a 32-bit wrap (a jump of 4.3 MJ) or
a driver restart, and this check is what catches it.

The power fallback integrates the power taken linear between readings (trapezoids, interpolated
at the edges); its bounds take, for each gap between readings, the lower and the higher of its
two readings. NVML's power reading is itself a 1 s average on many GPUs (see docs/metrics.md).
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

import numpy as np
import pyarrow as pa

from stroboscope.analysis._series import (
    I64,
    Series,
    cells,
    check_samples,
    gpu_columns,
    int64_cells,
    read_times,
)

RESOLUTION_J = 1e-3  # NVML's energy counter counts whole mJ
ABSOLUTE_MAX_POWER_W = 10_000.0  # no single accelerator board draws this
PLAUSIBLE_FACTOR = 3.0  # a step above 3x the power limit is a misread counter, not a spike
_NS = 1e9


@dataclass(frozen=True)
class CounterCheck:
    """What the energy counter's readings around a window say about themselves.

    ``ok`` is False with ``reason`` when the counter cannot serve the window. ``readings`` and
    ``steps`` count readings and value changes in the frame; ``update_period_s`` is the median
    time between changes (the counter's update period as seen), ``reading_period_s`` the median
    time between readings, ``max_step_power_w`` the highest of the least powers the steps that
    bear on the window imply (each step's energy over the longest time it can have taken),
    ``bound_w`` the limit that is held to, ``resolution_j`` the counter's
    unit.
    """

    ok: bool
    reason: str | None
    readings: int
    steps: int
    update_period_s: float
    reading_period_s: float
    max_step_power_w: float
    bound_w: float
    resolution_j: float = RESOLUTION_J


@dataclass(frozen=True)
class WindowEnergy:
    """Energy one GPU used in ``[begin_ns, end_ns]`` (CLOCK_MONOTONIC ns).

    ``joules`` is the estimate and ``[low_j, high_j]`` the interval it is known to lie in (see
    the module docstring); ``method`` is ``"counter"``, ``"power integral"`` or ``"none"``,
    ``reason`` says why the counter did not serve (None when it did), ``readings`` counts the
    used column's readings inside the window, ``extrapolated`` is True when an edge lies after
    the last counter step (its value carried forward at the last step's mean power), and
    ``hard_bounds`` when the bounds follow from the counter's readings alone (False: an edge
    had no step surely after it yet, and its upper bound assumes the power stays at or below
    the highest seen; the power integral's bounds assume power linear between readings).
    """

    gpu: int
    begin_ns: int
    end_ns: int
    joules: float
    low_j: float
    high_j: float
    method: str
    reason: str | None
    readings: int
    extrapolated: bool
    hard_bounds: bool
    counter: CounterCheck | None

    @property
    def uncertainty_j(self) -> float:
        """The larger distance from the estimate to a bound (J): the ``±`` of the estimate."""
        return max(self.joules - self.low_j, self.high_j - self.joules)

    @property
    def duration_s(self) -> float:
        """The window's length in seconds."""
        return (self.end_ns - self.begin_ns) / _NS

    @property
    def mean_power_w(self) -> float:
        """``joules / duration_s`` (NaN for an empty window)."""
        return self.joules / self.duration_s if self.end_ns > self.begin_ns else math.nan


def _readings(samples: pa.Table, column: str) -> Series:
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


def _median_gap_s(t: I64) -> float:
    return float(np.median(np.diff(t))) / _NS if len(t) > 1 else math.nan


def _max_power_seen(samples: pa.Table, gpu: int, metrics: tuple[str, ...]) -> float:
    """The highest reading of ``gpu``'s ``metrics`` (power_w, power_limit_w) in the frame (W;
    NaN if none)."""
    best = math.nan
    for metric in metrics:
        name = f"gpu.{gpu}.{metric}"
        if name in samples.column_names and len(s := _readings(samples, name)):
            best = float(np.nanmax([best, float(s.v.max())]))
    return best


class _Knots:
    """The counter's knots (see the module docstring) and the edge model over them."""

    def __init__(self, s: Series) -> None:
        change = np.concatenate(([True], np.diff(s.v) != 0)) if len(s) else np.zeros(0, bool)
        idx = np.flatnonzero(change)
        self.tau = s.t[idx]
        self.value = s.v[idx]
        self.sigma = np.where(idx > 0, s.t[np.maximum(idx - 1, 0)], np.iinfo(np.int64).min)
        dt = np.diff(self.tau).astype(np.float64)
        # Mean power of each step (W = mJ/ms), between the first readings of its two values.
        self.step_w = np.diff(self.value) / (dt / 1e6) if len(dt) else np.zeros(0)
        # The least power a step implies: its energy over the longest time it can have taken,
        # from the reading before the previous value was first seen (readings are jittered, so
        # the mean above can exceed the true power when two knots come close together).
        known = self.sigma[:-1] > np.iinfo(np.int64).min
        since = np.where(known, self.sigma[:-1], self.tau[:-1])
        longest = (self.tau[1:] - since).astype(np.float64)
        self.least_w = np.diff(self.value) / (longest / 1e6) if len(dt) else np.zeros(0)

    def check(self, a: int, b: int, bound_w: float) -> tuple[str | None, float]:
        """Why the steps bearing on ``[a, b]`` are insane (None if they are not), and the
        highest power they imply."""
        if len(self.tau) == 0 or self.tau[0] > a:
            return "the counter has no reading at or before the window's begin", math.nan
        first = int(np.searchsorted(self.tau, a, side="right")) - 1
        after = np.flatnonzero(self.sigma >= b)
        last = int(after[0]) if len(after) else len(self.tau) - 1
        steps = np.diff(self.value[first : last + 1])
        power = self.least_w[first:last]
        top = float(power.max()) if len(power) else 0.0
        back = int(np.argmin(steps)) if len(steps) else 0
        if len(steps) and steps[back] < 0:
            return (
                f"the counter went backwards by {-steps[back]:.0f} mJ "
                f"(at mono {int(self.tau[first + back + 1])} ns)"
            ), top
        if top > bound_w:
            k = first + int(np.argmax(power)) + 1
            gap_ms = (self.value[k] - self.value[k - 1]) / top
            return (
                f"a counter step of {(self.value[k] - self.value[k - 1]) / 1e3:.6g} J within "
                f"{gap_ms:.6g} ms implies at least {top:.6g} W, above the plausible "
                f"{bound_w:.6g} W "
                "(a reading below the previous one, taken as a 32-bit wrap, or a driver restart)"
            ), top
        return None, top

    def edge(self, x: int, top_w: float) -> tuple[float, float, float, bool, bool]:
        """Estimate, lower and upper bound (mJ) of the counter at ``x``; whether the estimate
        was extrapolated past the last knot; whether the upper bound is a reading's (else it
        assumes the power stays at or below ``top_w``, the highest seen)."""
        k = int(np.searchsorted(self.tau, x, side="right")) - 1  # the last knot seen by x
        low = float(self.value[k])
        later = np.flatnonzero(self.sigma >= x)
        if k < len(self.tau) - 1:
            est = float(np.interp(float(x), self.tau.astype(np.float64), self.value))
            extrapolated = False
        else:
            slope = float(self.step_w[-1]) if len(self.step_w) else 0.0  # W = mJ/ms
            est = low + slope * (x - self.tau[k]) / 1e6
            extrapolated = True
        est = max(est, low)
        if len(later):
            high = float(self.value[later[0]])
            est = min(est, high)
        else:  # no step surely after x yet: a model's bound, never below the estimate
            since = self.sigma[k] if self.sigma[k] > np.iinfo(np.int64).min else self.tau[k]
            high = max(low + (0.0 if math.isnan(top_w) else top_w) * (x - since) / 1e6, est)
        r = RESOLUTION_J * 1e3
        return est, low - r, high + r, extrapolated, bool(len(later))


def _counter_window(
    samples: pa.Table, gpu: int, a: int, b: int, bound_w: float, before: pa.Table | None
) -> tuple[WindowEnergy | None, CounterCheck]:
    name = f"gpu.{gpu}.energy_mj"
    s = _readings(samples, name)
    head = None  # the begin's own readings, when ``samples`` no longer reaches back to it
    if before is not None and name in before.column_names and (len(s) == 0 or s.t[0] > a):
        head = _readings(before, name)
        cut = int(np.searchsorted(head.t, s.t[0], side="left")) if len(s) else len(head)
        head = Series(name, head.t[:cut], head.v[:cut])
        s = Series(name, np.concatenate((head.t, s.t)), np.concatenate((head.v, s.v)))
    knots = _Knots(s)
    reason, top = knots.check(a, b, bound_w)
    check = CounterCheck(
        ok=reason is None,
        reason=reason,
        readings=len(s),
        steps=max(len(knots.tau) - 1, 0),
        update_period_s=_median_gap_s(knots.tau),
        reading_period_s=_median_gap_s(s.t),
        max_step_power_w=top,
        bound_w=bound_w,
    )
    if reason is not None:
        return None, check
    # The highest power seen, for the upper bound past the last step: steps and power readings
    # (the limit only where neither is known).
    seen = float(np.nanmax([top, _max_power_seen(samples, gpu, ("power_w",))]))
    if not seen > 0:
        seen = _max_power_seen(samples, gpu, ("power_limit_w",))
    # Not interpolated across rows the ring lost: the begin's value is carried forward from
    # the counter's last step before it.
    ea, la, ha, xa, hard_a = (knots if head is None else _Knots(head)).edge(a, seen)
    eb, lb, hb, xb, hard_b = knots.edge(b, seen)
    inside = int(np.count_nonzero((s.t >= a) & (s.t < b)))
    result = WindowEnergy(
        gpu, a, b, (eb - ea) / 1e3, max(lb - ha, 0.0) / 1e3, (hb - la) / 1e3,
        "counter", None, inside, xa or xb, hard_a and hard_b, check,
    )  # fmt: skip
    return result, check


def _power_window(
    samples: pa.Table, gpu: int, a: int, b: int, reason: str | None, check: CounterCheck | None
) -> WindowEnergy:
    name = f"gpu.{gpu}.power_w"
    s = _readings(samples, name) if name in samples.column_names else None
    if s is None or len(s) == 0:
        why = f"no {name} readings" if s is not None else f"no {name} column"
        return WindowEnergy(
            gpu, a, b, math.nan, math.nan, math.nan, "none",
            f"{reason}; and {why}" if reason else why, 0, False, False, check,
        )  # fmt: skip
    held = s.t[0] > a or s.t[-1] < b
    # Readings held flat beyond the span, so every instant of [a, b] has a piece.
    t = np.concatenate(([min(a, int(s.t[0]))], s.t, [max(b, int(s.t[-1]))]))
    v = np.concatenate(([s.v[0]], s.v, [s.v[-1]]))
    lo_t, hi_t = np.maximum(t[:-1], a), np.minimum(t[1:], b)
    overlap = np.maximum(hi_t - lo_t, 0).astype(np.float64) / _NS
    gap = np.maximum(t[1:] - t[:-1], 1).astype(np.float64)
    at_lo = v[:-1] + (v[1:] - v[:-1]) * (lo_t - t[:-1]) / gap
    at_hi = v[:-1] + (v[1:] - v[:-1]) * (hi_t - t[:-1]) / gap
    est = float(np.sum(overlap * (at_lo + at_hi) / 2))
    low = float(np.sum(overlap * np.minimum(v[:-1], v[1:])))
    high = float(np.sum(overlap * np.maximum(v[:-1], v[1:])))
    note = " (power readings do not span the window: the nearest reading held)" if held else ""
    inside = int(np.count_nonzero((s.t >= a) & (s.t < b)))
    return WindowEnergy(
        gpu, a, b, est, low, high, "power integral", (reason or "no energy counter") + note,
        inside, held, False, check,
    )  # fmt: skip


def _check_instant(name: str, value: object) -> int:
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)):
        raise TypeError(f"{name} must be an int of monotonic ns, got {type(value).__name__}")
    return int(value)


def energy_gpus(samples: Any) -> list[int]:
    """The GPU labels whose energy counter or power the frame holds."""
    names = check_samples(samples).column_names
    return sorted(set(gpu_columns(names, "energy_mj")) | set(gpu_columns(names, "power_w")))


def window_energy(
    samples: Any,
    begin_ns: int,
    end_ns: int,
    *,
    gpus: Iterable[int] | None = None,
    max_power_w: float | None = None,
    before: Any = None,
) -> dict[int, WindowEnergy]:
    """Energy each GPU used between two instants, from the frame's energy counter.

    Parameters
    ----------
    samples : pyarrow.Table or Frame
        A sample frame with ``mono_ns``, ``gpu.{i}.energy_mj`` and/or ``gpu.{i}.power_w`` (and
        ``gpu.read_mono_ns`` to time GPU readings).
    begin_ns, end_ns : int
        The window's edges on CLOCK_MONOTONIC (``time.monotonic_ns()``), ``begin_ns <= end_ns``.
    gpus : iterable of int, optional
        GPU labels (the ``i`` of ``gpu.{i}.*``); default every GPU with either column.
    max_power_w : float, optional
        The highest plausible power (W) of a counter step; default 3x the highest power limit
        or power reading in the frame, else 10 kW.

    Returns
    -------
    dict of int to WindowEnergy
        Per GPU: the estimate in J, its bounds, the method and why (see the module docstring).
    """
    table = check_samples(samples)
    head = None if before is None else check_samples(before)
    a, b = _check_instant("begin_ns", begin_ns), _check_instant("end_ns", end_ns)
    if b < a:
        raise ValueError(f"end_ns must be >= begin_ns, got begin_ns={a} and end_ns={b}")
    if max_power_w is not None and (
        isinstance(max_power_w, bool)
        or not isinstance(max_power_w, (int, float))
        or not max_power_w > 0
    ):
        raise ValueError(f"max_power_w must be a power in W > 0, got {max_power_w!r}")
    have = energy_gpus(table)
    if gpus is None:
        chosen = have
    else:
        chosen = list(gpus)
        bad = [g for g in chosen if isinstance(g, bool) or not isinstance(g, int) or g not in have]
        if bad:
            raise ValueError(
                f"gpus {bad} have no gpu.{{i}}.energy_mj or gpu.{{i}}.power_w column in samples; "
                f"the frame has GPUs {have}"
            )
    out: dict[int, WindowEnergy] = {}
    for gpu in chosen:
        if max_power_w is not None:
            bound = float(max_power_w)
        else:
            seen = _max_power_seen(table, gpu, ("power_limit_w", "power_w"))
            bound = ABSOLUTE_MAX_POWER_W if math.isnan(seen) else PLAUSIBLE_FACTOR * seen
        reason: str | None = None
        check: CounterCheck | None = None
        if f"gpu.{gpu}.energy_mj" in table.column_names:
            result, check = _counter_window(table, gpu, a, b, bound, head)
            if result is not None:
                out[gpu] = result
                continue
            reason = f"energy counter not used: {check.reason}"
        out[gpu] = _power_window(table, gpu, a, b, reason, check)
    return out


__all__ = ["CounterCheck", "WindowEnergy", "energy_gpus", "window_energy"]
