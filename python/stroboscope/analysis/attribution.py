"""What the machine did while each op or kernel of a torch.profiler trace ran: CPU, memory, I/O,
GPU utilisation, power and energy, per op name.

Every complete event (``"ph": "X"``) of the chosen categories (``kernel`` and ``cpu_op`` by
default) is placed on our monotonic clock: ``baseTimeNanoseconds + ts·1000`` is its realtime
start (torch >= 2.4), minus the sampler's anchor. Then, per launch ``[a, b]``, each metric is
taken as linear between its readings (one model for every column):

- a level (``proc.cpu_pct``, ``gpu.{i}.util_pct``) is its integral over ``[a, b]``; summed over
  the launches of a name and divided by their time, the time-weighted mean while they ran;
- a count that grows (``proc.rss_bytes``, the I/O counters ``proc.read_bytes`` and
  ``proc.write_bytes``) is its value at ``b`` minus its value at ``a``, summed over launches;
- energy = the GPU energy over ``[a, b]`` of :func:`stroboscope.analysis.energy.window_energy`
  (the one model: the energy counter linear between its knots, else the integral of the
  power taken as linear between its readings).

The estimator: a launch inside one gap between readings (an op shorter than the sampling
interval) gets its duration times the interpolated value at its midpoint, which is what the
integral of a linear piece gives; summed over the many launches of one name, whose start times
fall anywhere between readings, this estimates the level while that op ran, and the share of a
count's growth that fell in its time. The evidence behind a figure is the number of distinct
readings the estimate used (those inside its launches and the two around each launch): few
readings for many launches mean the figure rests on few observations.

A launch is *matched* when the frame's rows cover it (a row at or before its start and one at or
after its end); the figures of the others are unknown, and a trace none of whose launches is
matched is refused (the trace and the frame were not recorded together, or the anchor is wrong).
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, Union

import numpy as np
import numpy.typing as npt
import pyarrow as pa

from stroboscope._base.extras import require
from stroboscope.analysis._series import (
    F64,
    I64,
    Series,
    anchor_of,
    check_samples,
    cpu_column,
    gpu_columns,
    integral,
    interp,
    mono,
    series,
    sorted_unique,
    total_series,
)
from stroboscope.analysis.energy import energy_gpus, gpu_windows
from stroboscope.formats.chrome_trace import base_time_ns, complete_events, read_trace
from stroboscope.formats.provenance import iso_utc

if TYPE_CHECKING:
    import pandas

PathLike = Union[str, "os.PathLike[str]"]
_NS = 1e9


def _load_events(
    path: PathLike, categories: Sequence[str]
) -> tuple[list[str], list[str], I64, I64]:
    """For each complete event of ``categories``: its category, name, and realtime start and
    end in ns. ValueError naming ``categories`` when the trace has none of them."""
    if isinstance(categories, str) or not all(isinstance(c, str) for c in categories):
        raise TypeError(f"categories must be a sequence of strings, got {categories!r}")
    trace = read_trace(path)
    base = base_time_ns(trace, path)
    cats, names, begin, end = complete_events(trace, base, categories)
    if not names:
        found = sorted(
            {str(e.get("cat")) for e in trace["traceEvents"] if e.get("ph") == "X" and "ts" in e}
        )
        raise ValueError(
            f"{os.fspath(path)} has no complete event of categories {list(categories)}: "
            f"nothing to attribute (its complete events' categories: {found})"
        )
    return cats, names, begin.to_numpy(), end.to_numpy()


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


class _Launches:
    """The launches on our monotonic clock, the group (row) of each, and the per-group sums."""

    def __init__(self, begin: I64, end: I64, group: I64, count: int) -> None:
        self.begin, self.end, self.group, self.count = begin, end, group, count
        self.dur = (end - begin).astype(np.float64) / _NS

    def level(self, s: Series) -> tuple[F64, I64]:
        """Per group: the time-weighted mean of a level over its launches (NaN where no
        launch lies within the readings), and the readings behind it."""
        area = (integral(s, self.end) - integral(s, self.begin)) / _NS
        known = ~np.isnan(area)
        g = self.group[known]
        time = np.bincount(g, self.dur[known], minlength=self.count)
        with np.errstate(invalid="ignore", divide="ignore"):
            total = np.bincount(g, area[known], minlength=self.count)
            mean = np.where(time > 0, total / time, np.nan)
        return mean, self.readings(s, known)

    def growth(self, s: Series) -> tuple[F64, I64]:
        """Per group: the sum over its launches of the growth of a count (its value at the
        end minus at the start), NaN where no launch lies within the readings; and the
        readings behind it."""
        delta = interp(s, self.end) - interp(s, self.begin)
        known = ~np.isnan(delta)
        total = np.bincount(self.group[known], delta[known], minlength=self.count)
        has = np.bincount(self.group[known], minlength=self.count) > 0
        return np.where(has, total, np.nan), self.readings(s, known)

    def readings(self, s: Series, known: npt.NDArray[np.bool_]) -> I64:
        g = self.group[known]
        return _readings_used(s, self.begin[known], self.end[known], g, self.count)


# (output column, its readings column, sample column): the process's counts that grow
_PROCESS = (
    ("rss_delta_bytes", "rss_n", "proc.rss_bytes"),
    ("read_bytes", "read_bytes_n", "proc.read_bytes"),
    ("write_bytes", "write_bytes_n", "proc.write_bytes"),
)


def attribute_trace(
    trace_path: PathLike,
    samples: pa.Table,
    *,
    categories: Sequence[str] = ("kernel", "cpu_op"),
    gpus: Sequence[int] | None = None,
    anchor_realtime_ns: int | None = None,
) -> pandas.DataFrame:
    """CPU, memory, I/O, GPU utilisation, power and energy per kernel / op name of a
    torch.profiler trace.

    Parameters
    ----------
    trace_path : str or PathLike
        A torch.profiler Chrome trace (``.json`` or ``.json.gz``) with ``baseTimeNanoseconds``.
    samples : pyarrow.Table
        A sample frame recorded while the trace was (``Frame.to_arrow()``). Each figure needs
        its column: ``proc.cpu_pct`` (or ``cpu.util_pct``), ``proc.rss_bytes`` (the
        ``process`` source), ``proc.read_bytes`` and ``proc.write_bytes`` (``process_io``),
        ``gpu.{i}.power_w`` or ``gpu.{i}.energy_mj`` and ``gpu.{i}.util_pct`` (``gpu``).
    categories : sequence of str
        Event categories to attribute (torch: ``kernel``, ``cpu_op``, ``gpu_memcpy``,
        ``user_annotation`` for ``record_function``...).
    gpus : sequence of int, optional
        The frame's GPU indices whose power and utilisation count (default: all of them,
        power summed, utilisation averaged).
    anchor_realtime_ns : int, optional
        Realtime ns minus monotonic ns (default: from the frame's ``time - mono_ns``).

    Returns
    -------
    pandas.DataFrame
        Indexed by ``category`` and ``name``, sorted by total time (longest first):

        - ``launches``, ``total_s``, ``mean_s``; ``matched``: the launches the frame's rows
          cover (the others are left out of every figure below);
        - ``cpu_pct_mean``, ``cpu_pct_n``: the time-weighted mean of ``proc.cpu_pct`` (else
          ``cpu.util_pct``; ``attrs["cpu_column"]`` names it) while the launches ran;
        - ``rss_delta_bytes``, ``rss_n``: the growth of ``proc.rss_bytes`` over the launches
          (negative where memory was given back), summed;
        - ``read_bytes``, ``read_bytes_n``, ``write_bytes``, ``write_bytes_n``: the process's
          storage I/O over the launches, summed;
        - ``energy_j`` (GPU), ``energy_share`` (of the energy over the whole span of the
          trace's chosen events; nested ops and concurrent kernels overlap, so shares need not
          add up to 1), ``power_w_mean`` (energy / time of the launches it covers),
          ``power_n``; ``util_pct_mean``, ``util_pct_n`` (GPU utilisation).

        ``_n`` columns count the distinct readings behind each figure (see the module
        docstring). A figure whose column is absent from the frame is absent (not zero).
        ``attrs``: ``unmatched_launches`` (launches outside the frame's rows), ``cpu_column``,
        ``run_energy_j``, ``energy_method`` (``"counter"`` where every chosen GPU has its
        energy counter, else ``"power integral"``).

    Raises
    ------
    ValueError
        The trace has no ``baseTimeNanoseconds`` or no event of ``categories``; or none of its
        launches lies within the frame's rows (the message gives both spans in UTC).
    ImportError
        When pandas is not installed: the message names the extra that installs it.
    """
    require("pandas", "attribute_trace()", "pandas")
    import pandas as pd

    samples = check_samples(samples)
    anchor = anchor_of(samples, None, anchor_realtime_ns)
    cats, names, rt_begin, rt_end = _load_events(trace_path, categories)
    begin, end = rt_begin - anchor, rt_end - anchor
    rows = mono(samples)
    matched = np.zeros(len(begin), dtype=bool)
    if len(rows):
        matched = (begin >= rows.min()) & (end <= rows.max())
    if not matched.any():
        raise ValueError(_unmatched(trace_path, rt_begin, rt_end, rows, anchor))
    energy = _energy_model(samples, gpus)
    found_util = gpu_columns(samples.column_names, "util_pct")
    util_cols = _pick(found_util, gpus) if _has_all(found_util, gpus) else []
    keys = pd.MultiIndex.from_arrays([cats, names], names=["category", "name"])
    frame = pd.DataFrame({"k": np.arange(len(names))}, index=keys)
    group = np.asarray(frame.groupby(level=[0, 1], sort=True).ngroup().to_numpy(), np.int64)
    index = frame.groupby(level=[0, 1], sort=True).size().index
    count = len(index)
    # the launches the rows cover: every figure is theirs
    ok = _Launches(begin[matched], end[matched], group[matched], count)
    dur = (end - begin).astype(np.float64) / _NS
    cols: dict[str, Any] = {
        "launches": np.bincount(group, minlength=count),
        "total_s": np.bincount(group, dur, minlength=count),
    }
    cols["mean_s"] = cols["total_s"] / np.maximum(cols["launches"], 1)
    cols["matched"] = np.bincount(ok.group, minlength=count)
    attrs: dict[str, Any] = {"unmatched_launches": int((~matched).sum())}
    cpu = cpu_column(samples)
    if cpu is not None:
        attrs["cpu_column"] = cpu
        cols["cpu_pct_mean"], cols["cpu_pct_n"] = ok.level(series(samples, cpu))
    for name, n_name, column in _PROCESS:
        if column in samples.column_names:
            cols[name], cols[n_name] = ok.growth(series(samples, column))
    if energy is not None:
        chosen, method, power = energy
        joules = _joules(samples, chosen, ok.begin, ok.end)
        known = ~np.isnan(joules)
        total = np.bincount(ok.group[known], joules[known], minlength=count)
        covered = np.bincount(ok.group[known], ok.dur[known], minlength=count)
        has = np.bincount(ok.group[known], minlength=count) > 0
        cols["energy_j"] = np.where(has, total, np.nan)
        span_lo = np.array([begin.min()])
        span_hi = np.array([end.max()])
        span_lo = np.maximum(span_lo, power.t[0]) if len(power) else span_lo
        span_hi = np.minimum(span_hi, power.t[-1]) if len(power) else span_hi
        run = float(_joules(samples, chosen, span_lo, np.maximum(span_hi, span_lo))[0])
        with np.errstate(invalid="ignore", divide="ignore"):
            cols["energy_share"] = cols["energy_j"] / run
            cols["power_w_mean"] = np.where(covered > 0, total / covered, np.nan)
        cols["power_n"] = ok.readings(power, known)
        attrs["run_energy_j"] = run
        attrs["energy_method"] = method
    if util_cols:
        util = total_series(samples, util_cols, "gpu.util_pct")
        util = Series(util.name, util.t, util.v / len(util_cols))
        cols["util_pct_mean"], cols["util_pct_n"] = ok.level(util)
    df: pandas.DataFrame = pd.DataFrame(cols, index=index)
    df = df.sort_values("total_s", ascending=False, kind="stable")
    df.attrs.update(attrs)
    return df


def _unmatched(path: PathLike, rt_begin: I64, rt_end: I64, rows: I64, anchor: int) -> str:
    """Why no launch has samples: the two spans, in UTC."""
    ops = f"{iso_utc(int(rt_begin.min()))} to {iso_utc(int(rt_end.max()))}"
    if len(rows):
        frame = f"from {iso_utc(int(rows.min()) + anchor)} to {iso_utc(int(rows.max()) + anchor)}"
    else:
        frame = "none (the frame has no row)"
    return (
        f"none of the {len(rt_begin)} launches of {os.fspath(path)} has samples: its events run "
        f"from {ops}, the frame's rows {frame} (UTC; realtime = mono_ns + the anchor "
        f"{anchor} ns). Record the frame while the profiler runs, or pass the right "
        "anchor_realtime_ns"
    )


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
