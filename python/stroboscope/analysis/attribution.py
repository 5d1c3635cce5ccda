"""GPU power, utilisation and energy attributed to the kernels and ops of a torch.profiler trace.

Every complete event (``"ph": "X"``) of the chosen categories (``kernel`` and ``cpu_op`` by
default) is placed on our monotonic clock: ``baseTimeNanoseconds + ts·1000`` is its realtime
start (torch >= 2.4), minus the sampler's anchor. Then, per launch ``[a, b]``:

- energy = the GPU energy over ``[a, b]`` of :func:`stroboscope.analysis.energy.window_energy`
  (the one model: the energy counter linear between its knots, else the integral of the
  power taken as linear between its readings);
- utilisation·time = the same integral of the GPU utilisation.

The estimator: a launch inside one gap between readings (a kernel shorter than the sampling
interval) gets its duration times the interpolated value at its midpoint, which is what the
integral of a linear piece gives; summed over the many launches of one kernel name, whose start
times fall anywhere between readings, this estimates the power drawn while that kernel ran. The
evidence behind a figure is the number of distinct readings the estimate used (those inside
its launches and the two around each launch): few readings for many launches mean the figure
rests on few observations (the counter's readings where it serves, else the power's).
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, Union

import numpy as np
import pyarrow as pa

from stroboscope.analysis._series import (
    F64,
    I64,
    Series,
    anchor_of,
    check_samples,
    gpu_columns,
    integral,
    sorted_unique,
    total_series,
)
from stroboscope.analysis.energy import energy_gpus, gpu_windows
from stroboscope.formats.chrome_trace import base_time_ns, complete_events, read_trace

if TYPE_CHECKING:
    import pandas

PathLike = Union[str, "os.PathLike[str]"]
_NS = 1e9


def _load_events(
    path: PathLike, categories: Sequence[str]
) -> tuple[int, list[str], list[str], I64, I64]:
    """The trace's base time, and for each complete event of ``categories``: its category,
    name, and realtime start and end in ns."""
    trace = read_trace(path)
    base = base_time_ns(trace, path)
    cats, names, begin, end = complete_events(trace, base, categories)
    return base, cats, names, begin.to_numpy(), end.to_numpy()


def _readings_used(s: Series, begin: I64, end: I64, group: I64, groups: int) -> I64:
    """Per group: distinct readings of ``s`` inside its launches or just around them."""
    if len(s) == 0:
        return np.zeros(groups, dtype=np.int64)
    lo = np.clip(np.searchsorted(s.t, begin, side="right") - 1, 0, len(s) - 1)
    hi = np.clip(np.searchsorted(s.t, end, side="left"), 0, len(s) - 1)
    hi = np.maximum(hi, lo)
    n = hi - lo + 1
    starts = np.concatenate(([0], np.cumsum(n)[:-1])).astype(np.int64)
    flat = np.arange(int(n.sum()), dtype=np.int64) - np.repeat(starts - lo, n)
    key = sorted_unique(np.repeat(group, n) * (len(s) + 1) + flat)
    return np.bincount(key // (len(s) + 1), minlength=groups).astype(np.int64)


def attribute_trace(
    trace_path: PathLike,
    samples: pa.Table,
    *,
    categories: Sequence[str] = ("kernel", "cpu_op"),
    gpus: Sequence[int] | None = None,
    anchor_realtime_ns: int | None = None,
) -> pandas.DataFrame:
    """GPU power, utilisation and energy per kernel / op name of a torch.profiler trace.

    Parameters
    ----------
    trace_path : str or PathLike
        A torch.profiler Chrome trace (``.json`` or ``.json.gz``) with ``baseTimeNanoseconds``.
    samples : pyarrow.Table
        A sample frame recorded while the trace was (``Frame.to_arrow()``), with
        ``gpu.{i}.power_w`` (or ``gpu.{i}.energy_mj``) and optionally ``gpu.{i}.util_pct``.
    categories : sequence of str
        Event categories to attribute (torch: ``kernel``, ``cpu_op``, ``gpu_memcpy``...).
    gpus : sequence of int, optional
        The frame's GPU indices whose power and utilisation count (default: all of them,
        power summed, utilisation averaged).
    anchor_realtime_ns : int, optional
        Realtime ns minus monotonic ns (default: from the frame's ``time - mono_ns``).

    Returns
    -------
    pandas.DataFrame
        Indexed by ``category`` and ``name``, sorted by total time (longest first): ``launches``,
        ``total_s``, ``mean_s``, ``energy_j`` (launches outside the readings' span left out),
        ``energy_share`` (of the energy over the whole span of the trace's chosen events; nested
        ops and concurrent kernels overlap, so shares need not add up to 1), ``power_w_mean``
        (energy / time of the launches it covers), ``power_n``, ``util_pct_mean``,
        ``util_pct_n`` (distinct readings behind each figure, see the module docstring).
        ``attrs``: ``run_energy_j``, ``energy_method`` (``"counter"`` where every chosen GPU has
        its energy counter, else ``"power integral"``).
    """
    import pandas as pd

    samples = check_samples(samples)
    anchor = anchor_of(samples, None, anchor_realtime_ns)
    _, cats, names, rt_begin, rt_end = _load_events(trace_path, categories)
    begin, end = rt_begin - anchor, rt_end - anchor
    energy = _energy_model(samples, gpus)
    found_util = gpu_columns(samples.column_names, "util_pct")
    util_cols = _pick(found_util, gpus) if _has_all(found_util, gpus) else []
    keys = pd.MultiIndex.from_arrays([cats, names], names=["category", "name"])
    frame = pd.DataFrame({"k": np.arange(len(names))}, index=keys)
    group = np.asarray(frame.groupby(level=[0, 1], sort=True).ngroup().to_numpy(), np.int64)
    index = frame.groupby(level=[0, 1], sort=True).size().index
    count = len(index)
    dur = (end - begin).astype(np.float64) / _NS
    cols: dict[str, Any] = {
        "launches": np.bincount(group, minlength=count),
        "total_s": np.bincount(group, dur, minlength=count),
    }
    cols["mean_s"] = cols["total_s"] / np.maximum(cols["launches"], 1)
    attrs: dict[str, Any] = {}
    if energy is not None:
        chosen, method, power = energy
        joules = _joules(samples, chosen, begin, end)
        known = ~np.isnan(joules)
        total = np.bincount(group[known], joules[known], minlength=count)
        covered = np.bincount(group[known], dur[known], minlength=count)
        has = np.bincount(group[known], minlength=count) > 0
        cols["energy_j"] = np.where(has, total, np.nan)
        span_lo = np.array([begin.min()]) if len(begin) else np.array([0])
        span_hi = np.array([end.max()]) if len(end) else np.array([0])
        span_lo = np.maximum(span_lo, power.t[0]) if len(power) else span_lo
        span_hi = np.minimum(span_hi, power.t[-1]) if len(power) else span_hi
        run = float(_joules(samples, chosen, span_lo, np.maximum(span_hi, span_lo))[0])
        with np.errstate(invalid="ignore", divide="ignore"):
            cols["energy_share"] = cols["energy_j"] / run
            cols["power_w_mean"] = np.where(covered > 0, total / covered, np.nan)
        cols["power_n"] = _readings_used(power, begin[known], end[known], group[known], count)
        attrs["run_energy_j"] = run
        attrs["energy_method"] = method
    if util_cols:
        util = total_series(samples, util_cols, "gpu.util_pct")
        util = Series(util.name, util.t, util.v / len(util_cols))
        area = (integral(util, end) - integral(util, begin)) / _NS
        known = ~np.isnan(area)
        time = np.bincount(group[known], dur[known], minlength=count)
        with np.errstate(invalid="ignore", divide="ignore"):
            cols["util_pct_mean"] = np.where(
                time > 0, np.bincount(group[known], area[known], minlength=count) / time, np.nan
            )
        cols["util_pct_n"] = _readings_used(util, begin[known], end[known], group[known], count)
    df: pandas.DataFrame = pd.DataFrame(cols, index=index)
    df = df.sort_values("total_s", ascending=False, kind="stable")
    df.attrs.update(attrs)
    return df


def _has_all(found: dict[int, str], gpus: Sequence[int] | None) -> bool:
    return bool(found) and (gpus is None or all(i in found for i in gpus))


def _pick(found: dict[int, str], gpus: Sequence[int] | None) -> list[str]:
    if gpus is None:
        return list(found.values())
    missing = [i for i in gpus if i not in found]
    if missing:
        raise ValueError(f"gpus {missing} have no such column in samples (found {sorted(found)})")
    return [found[i] for i in gpus]


def _energy_model(
    samples: pa.Table, gpus: Sequence[int] | None
) -> tuple[list[int], str, Series] | None:
    """The chosen GPUs with an energy counter or power, the method (``"counter"`` where each
    has its counter, else ``"power integral"``), and the summed series behind the figures
    (their counters', else their power's); None when no GPU has either."""
    names = samples.column_names
    have = energy_gpus(samples)
    chosen = have if gpus is None else list(gpus)
    missing = [i for i in chosen if i not in have]
    if missing:
        raise ValueError(
            f"gpus {missing}: samples has no power or energy column for them (found {have})"
        )
    if not chosen:
        return None
    for metric, method in (("energy_mj", "counter"), ("power_w", "power integral")):
        columns = [f"gpu.{i}.{metric}" for i in chosen]
        if all(c in names for c in columns):
            return chosen, method, total_series(samples, columns, f"gpu.{metric}")
    columns = [f"gpu.{i}.power_w" for i in chosen if f"gpu.{i}.power_w" in names]
    return chosen, "counter and power integral", total_series(samples, columns, "gpu.power_w")


def _joules(samples: pa.Table, gpus: list[int], begin: I64, end: I64) -> F64:
    """Joules over each ``[begin, end]`` summed over ``gpus``: the one energy model
    (:func:`stroboscope.analysis.energy.gpu_windows`; NaN where a GPU's readings do not cover
    the launch)."""
    total = np.zeros(len(begin), dtype=np.float64)
    for gpu in gpus:
        total += gpu_windows(samples, gpu, begin, end).edges.joules
    return total
