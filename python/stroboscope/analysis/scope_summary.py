"""Per-scope summary: durations from the scope edges, and what the machine did inside them.

One row per scope path and label combination, or per the keys ``by`` names. Durations are
exact (``end_ns - begin_ns`` of each closed call); every metric figure comes with the number of
readings behind it (``*_n``), so a scope shorter than the sampling interval shows how thin its
evidence is. A call owns its readings
with ``begin_ns <= t < end_ns``; GPU readings are timed by ``gpu.read_mono_ns`` (when NVML was
read), the rest by ``mono_ns``.

With edge counters (``edge_counters=`` of a Sampler or of ``stroboscope.enable``) each edge
also carries its thread's own CPU clock, read by that thread at the edge: ``cpu_ms_edges`` is
then a call's exact CPU time, however short the call, with no sampled row needed. The frame's
``attrs`` say which columns come from the edges and which from the rows.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

import numpy as np
import pyarrow as pa

from stroboscope._base.extras import require
from stroboscope.analysis._intervals import COUNTER_FIELDS, Intervals, check_intervals
from stroboscope.analysis._series import (
    AMD_READ,
    F64,
    GPU_READ,
    I64,
    Series,
    check_samples,
    cpu_column,
    gpu_columns,
    range_max,
    range_sum,
    ranges,
    series,
    total_series,
)
from stroboscope.analysis.energy import gpu_windows
from stroboscope.analysis.scope_durations import durations, name_durations
from stroboscope.analysis.scope_functions import FUNCTION_KEY, by_function

if TYPE_CHECKING:
    import pandas

__all__ = ["durations", "name_durations", "summary", "summary_columns"]

_NS = 1e9


class _Groups:
    """Closed calls and the summary row (group) each belongs to."""

    def __init__(self, iv: Intervals, code: I64, count: int) -> None:
        rows = np.flatnonzero(iv.closed)
        self.code = code[rows]
        self.begin = iv.begin[rows]
        self.end = iv.end[rows]
        self.count = count

    def total(self, per_call: F64) -> F64:
        """Per group: the sum over its calls (NaN calls skipped; NaN if none is known)."""
        known = ~np.isnan(per_call)
        total = np.bincount(self.code[known], per_call[known], minlength=self.count)
        hits = np.bincount(self.code[known], minlength=self.count)
        return np.where(hits > 0, total, np.nan)

    def count_of(self, per_call: I64) -> I64:
        return np.bincount(self.code, per_call, minlength=self.count).astype(np.int64)

    def maximum(self, per_call: F64) -> F64:
        out = np.full(self.count, np.nan)
        np.fmax.at(out, self.code, per_call)
        return out


def _levels(s: Series, g: _Groups, prefix: str, stats: tuple[str, ...]) -> dict[str, object]:
    """Mean/max/growth of a series over each group's calls, with the count of readings."""
    lo, hi = ranges(s.t, g.begin, g.end)
    n = g.count_of(hi - lo)
    out: dict[str, object] = {}
    if "mean" in stats:
        with np.errstate(invalid="ignore", divide="ignore"):
            out[f"{prefix}_mean"] = np.where(n > 0, g.total(range_sum(s.v, lo, hi)) / n, np.nan)
    if "max" in stats:
        out[f"{prefix}_max"] = g.maximum(range_max(s.v, lo, hi))
    if "growth" in stats:
        nonempty = hi > lo
        growth = np.full(len(lo), np.nan)
        growth[nonempty] = s.v[hi[nonempty] - 1] - s.v[lo[nonempty]]
        out[f"{prefix}_growth"] = g.total(growth)
    out[f"{prefix}_n"] = n
    return out


def _energy(samples: pa.Table, g: _Groups, gpu: int) -> tuple[F64, I64, str] | None:
    """Per call: joules used by one GPU (:func:`stroboscope.analysis.energy.gpu_windows`, the
    one energy model), the readings behind it, and the method; None if the frame has neither
    its energy counter nor its power."""
    names = samples.column_names
    if f"gpu.{gpu}.energy_mj" not in names and f"gpu.{gpu}.power_w" not in names:
        return None
    w = gpu_windows(samples, gpu, g.begin, g.end)
    known = ~np.isnan(w.edges.joules)
    counter, power = bool((w.counter & known).any()), bool((~w.counter & known).any())
    method = "counter and power integral" if counter and power else _METHODS[counter]
    return w.edges.joules, w.readings, method


_METHODS = {True: "counter", False: "power integral"}


_GPU_METRICS = ("util_pct", "mem_used_bytes", "power_w", "energy_mj", "read_mono_ns")
"""The per-GPU columns :func:`summary` reads (``gpu.{i}.<metric>``)."""


def summary_columns(names: Sequence[str]) -> list[str]:
    """The columns of a sample frame with ``names`` that :func:`summary` reads, in their
    order: a caller holding a long recording a column at a time gives it only these."""
    used = {"mono_ns", "proc.cpu_pct", "cpu.util_pct", "proc.rss_bytes", GPU_READ, AMD_READ}
    for metric in _GPU_METRICS:
        used.update(gpu_columns(list(names), metric).values())
    return [n for n in names if n in used]


def summary(
    samples: pa.Table,
    intervals: pa.Table,
    *,
    by: str | Sequence[str] | None = None,
    stacks: Sequence[pa.Table] | None = None,
    weight: str | None = None,
) -> pandas.DataFrame:
    """One row per scope path and labels (or per ``by``): durations, and CPU, memory, GPU,
    power and energy; or, with ``"function"`` in ``by``, each such row broken down by the
    functions the sampled Python stacks ran in it.

    Parameters
    ----------
    samples : pyarrow.Table
        A sample frame (``Frame.to_arrow()``).
    intervals : pyarrow.Table
        Scope calls in the scope-intervals schema.
    by : str or sequence of str, optional
        What a row groups: ``"path"`` (the scope path, as nested), ``"name"`` (every call of a
        name, wherever it was opened) and/or label keys. ``by="name"`` gives one row per scope
        name regardless of labels; ``by=["path", "phase"]`` groups by the path and one label.
        Default: the path and every label key (a label set per call, such as ``step=step``,
        then gives a row per value). ``"function"`` among them (``by="function"``,
        ``by=["name", "function"]``) breaks each row of the other keys (the default ones when
        it is alone) down by function: see *Returns* below.
    stacks : (pyarrow.Table, pyarrow.Table), optional
        With ``"function"`` in ``by``: the stack samples and the interned stacks
        (:mod:`stroboscope.formats.stacks`; a ``Sampler(stacks=True)``'s ``stacks()``, or
        ``read_stacks("run.parquet")`` for a recording).
    weight : str, optional
        With ``"function"`` in ``by``: what a stack sample weighs,
        ``"cpu"`` (default: its thread's CPU time), ``"wall"`` or a metric column of
        ``samples`` (:func:`stroboscope.analysis.stacks.sample_weights` states the rules).

    Returns
    -------
    pandas.DataFrame
        Indexed by ``scope`` (the path) and the label keys (null labels kept as NaN), or by the
        ``by`` keys in their order (``scope`` for the path); a label key that is also a column
        below (a label ``calls=3``) is the level ``label.calls``, so that ``reset_index()``
        keeps both. Rows sort by their keys; a label
        value that is a number sorts as a number (``2`` before ``10``, numbers before text).
        Columns:

        - ``calls`` (closed calls), ``open`` (calls not ended yet: left out of every figure);
        - ``total_s`` (the inclusive time: the sum of the calls' durations), ``mean_s``,
          ``min_s``, ``max_s``, ``p50_s``, ``p99_s`` (linear interpolation between order
          statistics, as numpy's default), ``exclusive_s`` (inclusive minus the time of the
          direct child calls on the same stack);
        - with edge counters (the intervals' ``cpu_ns`` column): ``cpu_ms_edges`` (the mean CPU
          time of the opening thread per call, in ms, from its own clock read at both edges:
          exact for a call of any length), ``cpu_ms_edges_n`` (the calls that carry it), and
          in mode ``rusage`` ``minflt_edges``, ``majflt_edges``, ``nvcsw_edges``,
          ``nivcsw_edges`` (the thread's faults and context switches, mean per call);
        - ``cpu_pct_mean/_max/_n`` from ``proc.cpu_pct``, or ``cpu.util_pct`` without it;
        - ``rss_bytes_max/_growth/_n`` from ``proc.rss_bytes`` (growth: per call the last
          reading minus the first inside it, summed over calls);
        - ``gpu_util_pct_mean/_max/_n`` (the mean over GPUs of ``gpu.{i}.util_pct``, on rows
          where every GPU has a value), ``gpu_mem_bytes_max/_n`` (``mem_used_bytes`` summed
          over GPUs), ``power_w_mean/_max/_n`` (summed over GPUs);
        - ``energy_j``, ``energy_j_n``: per call, the GPU energy of
          :func:`stroboscope.analysis.energy.window_energy` over ``[begin, end]`` (the one
          model: the counter linear between its knots, else the power integral; docs/energy.md).
          Summed over GPUs and calls; calls whose edges are outside the readings' span are
          left out (NaN when none is left). ``_n`` counts the readings inside the calls;
        - with several GPUs, the same per GPU: ``gpu{i}_util_pct_*``, ``gpu{i}_mem_bytes_*``,
          ``gpu{i}_power_w_*``, ``gpu{i}_energy_j``, ``gpu{i}_energy_j_n``.

        A figure whose column is absent from the frame is absent (not zero).
        ``attrs["cpu_column"]`` names the CPU column used, ``attrs["energy_method"]`` maps each
        GPU to ``"counter"``, ``"power integral"`` (no counter, or it failed its check), or
        ``"counter and power integral"`` (some calls each). ``attrs["from_edges"]`` lists the
        columns computed from the scope edges alone (calls, durations, edge counters),
        ``attrs["from_rows"]`` those computed from the sampled rows inside the calls.

        With ``"function"`` in ``by``, one row per group of calls and function that a stack
        sample inside the group's closed calls ran (the samples of the thread that ran a call,
        taken while it was open: :func:`stroboscope.analysis.select_samples`), indexed by the
        group's keys then ``function``, ``file`` and ``line`` (its first line), each group's
        functions by total weight, largest first: ``self`` (the weight of the samples whose
        leaf frame is the function), ``total`` (of those it is on, once however deep it
        recurses), ``self_share`` and ``total_share`` (of the group's weight, 0 to 1), and
        ``samples`` (the samples it is on). ``attrs["weight"]``, ``attrs["unit"]`` (``ns`` for
        ``cpu`` and ``wall``) and ``attrs["rule"]`` say what the weights are. A group no stack
        sample fell in has no row.

    Raises
    ------
    ImportError
        When pandas is not installed: the message names the extra that installs it.
    ValueError
        A key of ``by`` the intervals do not have; ``"function"`` without ``stacks``; ``stacks``
        or ``weight`` without ``"function"`` in ``by``; a weight that is neither ``cpu``,
        ``wall`` nor a metric column of ``samples``.
    """
    require("pandas", "the scope summary (summary())", "pandas")
    import pandas as pd

    samples = check_samples(samples)
    iv = check_intervals(intervals)
    keys = _group_keys(by, iv.labels)
    functions = FUNCTION_KEY in keys
    if not functions and (stacks is not None or weight is not None):
        given = "stacks" if stacks is not None else f"weight={weight!r}"
        raise ValueError(
            f"{given} breaks a scope down by function: add 'function' to by (by='function', "
            f"or by={[*(keys if by is not None else ['path']), FUNCTION_KEY]!r}); got by={by!r}"
        )
    if functions:
        keys = [k for k in keys if k != FUNCTION_KEY] or _group_keys(None, iv.labels)
    code, index = _group(iv.table.select(keys).to_pandas(), keys)
    if functions:
        return by_function(samples, iv, code, index, stacks, weight or "cpu")
    g = _Groups(iv, code, len(index))
    cols: dict[str, object] = dict(durations(iv.begin, iv.end, iv.closed, code, g.count))
    cols["exclusive_s"] = _exclusive(iv, g)
    cols.update(_edge_counters(iv, g))
    from_edges = list(cols)
    names = samples.column_names
    attrs: dict[str, object] = {}
    cpu = cpu_column(samples)
    if cpu is not None:
        attrs["cpu_column"] = cpu
        cols.update(_levels(series(samples, cpu), g, "cpu_pct", ("mean", "max")))
    if "proc.rss_bytes" in names:
        s = series(samples, "proc.rss_bytes")
        cols.update(_levels(s, g, "rss_bytes", ("max", "growth")))
    cols.update(_gpu_levels(samples, g, attrs))
    attrs["from_edges"] = from_edges
    attrs["from_rows"] = [c for c in cols if c not in from_edges]
    if any(name in cols for name in index.names):  # a label named like a column
        index = index.set_names([f"label.{n}" if n in cols else n for n in index.names])
    df: pandas.DataFrame = pd.DataFrame(cols, index=index)
    df.attrs.update(attrs)
    return df


def _edge_counters(iv: Intervals, g: _Groups) -> dict[str, object]:
    """Per group, the mean of each call's own counters (edge counters), where the intervals
    carry them: ``cpu_ms_edges`` and ``cpu_ms_edges_n``, and the rusage counts."""
    names = iv.table.column_names
    if COUNTER_FIELDS[0].name not in names:
        return {}
    rows = np.flatnonzero(iv.closed)
    out: dict[str, object] = {}
    for field in COUNTER_FIELDS:
        col = iv.table.column(field.name)
        if col.null_count == len(col):
            continue
        v = np.asarray(col.to_numpy(zero_copy_only=False), dtype=np.float64)[rows]
        n = g.count_of((~np.isnan(v)).astype(np.int64))
        with np.errstate(invalid="ignore", divide="ignore"):
            mean = np.where(n > 0, g.total(v) / n, np.nan)
        if field.name == "cpu_ns":
            out["cpu_ms_edges"] = mean / 1e6
            out["cpu_ms_edges_n"] = n
        else:
            out[f"{field.name}_edges"] = mean
    return out


def _group_keys(by: object, labels: list[str]) -> list[str]:
    """The intervals' columns a summary row groups by (ValueError naming ``by``)."""
    if by is None:
        return ["path", *labels]
    chosen = [by] if isinstance(by, str) else by
    accepted = ["path", "name", *labels, FUNCTION_KEY]
    if (
        not isinstance(chosen, (list, tuple))
        or not chosen
        or any(not isinstance(k, str) or k not in accepted for k in chosen)
        or len(set(chosen)) != len(chosen)
    ):
        raise ValueError(
            f"by must be one of {accepted} or a list of distinct ones, got {by!r} (the label "
            f"keys of these intervals: {labels})"
        )
    return list(chosen)


def _sort_columns(values: pandas.Index, level: int) -> dict[str, object]:
    """A level's sort columns: missing values last, numbers before other values and sorted as
    numbers (``2`` before ``10``), other values as text."""
    import pandas as pd

    missing = np.asarray(pd.isna(values), dtype=bool)
    numbers = np.asarray(pd.to_numeric(pd.Series(values), errors="coerce"), dtype=np.float64)
    text = ~missing & np.isnan(numbers)
    return {
        f"{level}m": missing,
        f"{level}t": text,
        f"{level}n": np.where(text | missing, 0.0, numbers),
        f"{level}s": np.where(text, np.asarray(values, dtype=object).astype(str), ""),
    }


def _group(frame: pandas.DataFrame, keys: list[str]) -> tuple[I64, pandas.Index]:
    """Per call, its row; and the rows' index (``path`` named ``scope``), sorted level by
    level (:func:`_sort_columns`)."""
    import pandas as pd

    grouped = frame.groupby(keys, dropna=False, sort=False)
    code = np.asarray(grouped.ngroup().to_numpy(), dtype=np.int64)
    index = grouped.size().index
    levels = [index] if len(keys) == 1 else [index.get_level_values(k) for k in keys]
    columns: dict[str, object] = {}
    for i, values in enumerate(levels):
        columns.update(_sort_columns(values, i))
    order = pd.DataFrame(columns).sort_values(list(columns), kind="stable").index.to_numpy()
    rank = np.empty(len(order), dtype=np.int64)
    rank[order] = np.arange(len(order))
    index = index[order]
    names = ["scope" if k == "path" else k for k in keys]
    return rank[code], index.set_names(names) if len(keys) > 1 else index.rename(names[0])


def _exclusive(iv: Intervals, g: _Groups) -> F64:
    """Per group: the closed calls' time minus that of their direct children on the same
    stack (``exclusive_s``)."""
    closed = iv.closed
    child = closed & (iv.parent >= 0)
    child_time = np.bincount(
        iv.parent[child], (iv.end[child] - iv.begin[child]) / _NS, minlength=len(closed)
    )
    dur = (g.end - g.begin).astype(np.float64) / _NS
    exclusive = np.bincount(g.code, dur - child_time[closed], minlength=g.count)
    return np.asarray(exclusive, dtype=np.float64)


def _gpu_levels(samples: pa.Table, g: _Groups, attrs: dict[str, object]) -> dict[str, object]:
    names = samples.column_names
    util = gpu_columns(names, "util_pct")
    mem = gpu_columns(names, "mem_used_bytes")
    power = gpu_columns(names, "power_w")
    gpus = sorted(set(util) | set(mem) | set(power) | set(gpu_columns(names, "energy_mj")))
    cols: dict[str, object] = {}
    if util:
        s = total_series(samples, list(util.values()), "gpu.util_pct")
        s = Series(s.name, s.t, s.v / len(util))
        cols.update(_levels(s, g, "gpu_util_pct", ("mean", "max")))
    if mem:
        s = total_series(samples, list(mem.values()), "gpu.mem_used_bytes")
        cols.update(_levels(s, g, "gpu_mem_bytes", ("max",)))
    if power:
        s = total_series(samples, list(power.values()), "gpu.power_w")
        cols.update(_levels(s, g, "power_w", ("mean", "max")))
    per_gpu: dict[str, object] = {}
    total: F64 | None = None
    total_n = np.zeros(g.count, dtype=np.int64)
    methods: dict[str, str] = {}
    for i in gpus:
        if len(gpus) > 1:
            for metric, found, stats in (
                ("util_pct", util, ("mean", "max")),
                ("mem_bytes", mem, ("max",)),
                ("power_w", power, ("mean", "max")),
            ):
                if i in found:
                    per_gpu.update(_levels(series(samples, found[i]), g, f"gpu{i}_{metric}", stats))
        energy = _energy(samples, g, i)
        if energy is None:
            continue
        joules, n, methods[f"gpu.{i}"] = energy
        total = joules if total is None else total + joules
        total_n += g.count_of(n)
        if len(gpus) > 1:
            per_gpu[f"gpu{i}_energy_j"] = g.total(joules)
            per_gpu[f"gpu{i}_energy_j_n"] = g.count_of(n)
    if total is not None:
        cols["energy_j"] = g.total(total)
        cols["energy_j_n"] = total_n
        attrs["energy_method"] = methods
    cols.update(per_gpu)
    return cols
