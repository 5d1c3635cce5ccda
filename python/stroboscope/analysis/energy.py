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
import numpy.typing as npt
import pyarrow as pa

from stroboscope.analysis._energy_model import (
    RESOLUTION_J,
    Edges,
    Knots,
    counter_edges,
    inside,
    max_power_seen,
    median_gap_s,
    power_edges,
    readings,
)
from stroboscope.analysis._series import (
    F64,
    I64,
    Series,
    check_samples,
    gpu_columns,
    range_max,
)

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


@dataclass(frozen=True)
class Windows:
    """Per window, one GPU: the energy and its bounds (:class:`._energy_model.Edges`), whether
    the counter served it (else the power integral, or NaN when neither could), and the used
    column's readings inside it (``begin <= t < end``)."""

    edges: Edges
    counter: npt.NDArray[np.bool_]
    readings: I64


class GpuEnergy:
    """One GPU's energy counter and power readings in a frame, and the model over them."""

    def __init__(
        self, samples: pa.Table, gpu: int, max_power_w: float | None, before: pa.Table | None
    ) -> None:
        names = samples.column_names
        self.gpu = gpu
        if max_power_w is not None:
            self.bound_w = float(max_power_w)
        else:
            seen = max_power_seen(samples, gpu, ("power_limit_w", "power_w"))
            self.bound_w = ABSOLUTE_MAX_POWER_W if math.isnan(seen) else PLAUSIBLE_FACTOR * seen
        self.max_power_w = max_power_seen(samples, gpu, ("power_w",))
        self.max_limit_w = max_power_seen(samples, gpu, ("power_limit_w",))
        name = f"gpu.{gpu}.energy_mj"
        self.has_counter = name in names
        s = readings(samples, name) if self.has_counter else Series(name, _EMPTY_T, _EMPTY_V)
        self.head: Series | None = None  # the begin's readings, kept before the ring lost them
        if before is not None and name in before.column_names:
            head = readings(before, name)
            cut = int(np.searchsorted(head.t, s.t[0], side="left")) if len(s) else len(head)
            self.head = Series(name, head.t[:cut], head.v[:cut])
            s = Series(
                name, np.concatenate((self.head.t, s.t)), np.concatenate((head.v[:cut], s.v))
            )
        self.counter = s
        self.knots = Knots(s)
        power = f"gpu.{gpu}.power_w"
        self.has_power = power in names
        self.power = readings(samples, power) if self.has_power else None

    def top_w(self, a: I64, b: I64) -> F64:
        """Per window: the highest least power of the steps bearing on it (0 without steps)."""
        first, last = self.knots.span(a, b)
        lo = np.maximum(first, 0)
        top = range_max(self.knots.least_w, lo, np.maximum(last, lo))
        return np.asarray(np.where(np.isnan(top), 0.0, top), dtype=np.float64)

    def windows(self, a: I64, b: I64, *, extend: bool) -> Windows:
        """Energy over each ``[a, b]``: the counter where it serves, else the power integral;
        with ``extend`` False, NaN for a window whose edges leave the used column's readings
        (else such an edge is carried forward and flagged ``extrapolated``)."""
        n = len(a)
        nan = np.full(n, np.nan)
        out = Edges(nan, nan.copy(), nan.copy(), np.zeros(n, bool), np.zeros(n, bool))
        used = np.zeros(n, dtype=bool)
        count = np.zeros(n, dtype=np.int64)
        s = self.counter
        if len(s):
            ok = self.knots.usable(a, b, self.bound_w)
            if not extend:
                ok &= b <= s.t[-1]
            if ok.any():
                top = self.top_w(a, b)
                seen = np.fmax(top, self.max_power_w)
                seen = np.where(seen > 0, seen, self.max_limit_w)
                begin = self.knots if self.head is None else Knots(self.head)
                got = counter_edges(begin, self.knots, a, b, seen)
                out = _merge(out, got, ok)
                used = ok
                count = np.where(ok, inside(s.t, a, b), count)
        p = self.power
        if p is not None and len(p):
            rest = ~used & (extend | ((a >= p.t[0]) & (b <= p.t[-1])))
            if rest.any():
                out = _merge(out, power_edges(p, a, b), rest)
                count = np.where(rest, inside(p.t, a, b), count)
        return Windows(out, used, count)

    def why_not_counter(self, a: int, b: int) -> str | None:
        """Why the counter cannot serve ``[a, b]`` (None when it can)."""
        k = self.knots
        if len(k.tau) == 0 or k.tau[0] > a:
            return "the counter has no reading at or before the window's begin"
        first, last = (int(x[0]) for x in k.span(np.array([a]), np.array([b])))
        steps = np.diff(k.value[first : last + 1])
        if len(steps) and float(steps.min()) < 0:
            back = int(np.argmin(steps))
            return (
                f"the counter went backwards by {-steps[back]:.0f} mJ "
                f"(at mono {int(k.tau[first + back + 1])} ns)"
            )
        power = k.least_w[first:last]
        if len(power) and float(power.max()) > self.bound_w:
            top = float(power.max())
            j = first + int(np.argmax(power)) + 1
            step = k.value[j] - k.value[j - 1]
            return (
                f"a counter step of {step / 1e3:.6g} J within {step / top:.6g} ms implies at "
                f"least {top:.6g} W, above the plausible {self.bound_w:.6g} W "
                "(a reading below the previous one, taken as a 32-bit wrap, or a driver restart)"
            )
        return None

    def check(self, a: int, b: int) -> CounterCheck:
        """What the counter's readings say about themselves around ``[a, b]``."""
        reason = self.why_not_counter(a, b)
        return CounterCheck(
            ok=reason is None,
            reason=reason,
            readings=len(self.counter),
            steps=max(len(self.knots.tau) - 1, 0),
            update_period_s=median_gap_s(self.knots.tau),
            reading_period_s=median_gap_s(self.counter.t),
            max_step_power_w=float(self.top_w(np.array([a]), np.array([b]))[0])
            if len(self.knots.tau) and self.knots.tau[0] <= a
            else math.nan,
            bound_w=self.bound_w,
        )


_EMPTY_T = np.zeros(0, dtype=np.int64)
_EMPTY_V = np.zeros(0, dtype=np.float64)


def _merge(into: Edges, got: Edges, where: npt.NDArray[np.bool_]) -> Edges:
    return Edges(
        *(np.where(where, g, i) for i, g in zip(
            (into.joules, into.low_j, into.high_j, into.extrapolated, into.hard),
            (got.joules, got.low_j, got.high_j, got.extrapolated, got.hard),
        ))
    )  # fmt: skip


def gpu_windows(samples: pa.Table, gpu: int, begin: I64, end: I64) -> Windows:
    """Energy one GPU used over each ``[begin, end]`` of a recorded frame (the model of
    :func:`window_energy`; NaN for a window whose edges leave the readings)."""
    return GpuEnergy(samples, gpu, None, None).windows(begin, end, extend=False)


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
        model = GpuEnergy(table, gpu, max_power_w, head)
        w = model.windows(np.array([a]), np.array([b]), extend=True)
        e = w.edges
        check = model.check(a, b) if model.has_counter else None
        if w.counter[0]:
            method, reason = "counter", None
        else:
            name = f"gpu.{gpu}.power_w"
            reason = None if check is None else f"energy counter not used: {check.reason}"
            if model.power is None or len(model.power) == 0:
                why = f"no {name} readings" if model.power is not None else f"no {name} column"
                method, reason = "none", f"{reason}; and {why}" if reason else why
            else:
                method = "power integral"
                reason = reason or "no energy counter"
                if e.extrapolated[0]:
                    reason += " (power readings do not span the window: the nearest reading held)"
        out[gpu] = WindowEnergy(
            gpu, a, b, float(e.joules[0]), float(e.low_j[0]), float(e.high_j[0]), method,
            reason, int(w.readings[0]), bool(e.extrapolated[0]), bool(e.hard[0]), check,
        )  # fmt: skip
    return out


__all__ = [
    "CounterCheck",
    "GpuEnergy",
    "WindowEnergy",
    "Windows",
    "energy_gpus",
    "gpu_windows",
    "window_energy",
]
