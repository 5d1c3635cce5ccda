"""Stack weights: what each sampled Python stack is worth, by CPU time, wall time or a metric
column of the recording's rows, and the same per function.

The input is the two stacks tables (:mod:`stroboscope.formats.stacks`: samples and interned
frames). Every sample gets a weight (:func:`sample_weights`), then the weights are summed per
stack (:func:`stack_weights`) and per function (:func:`function_table`). The rules, stated here
once (docs/stacks.md and ``stroboscope stacks`` print :attr:`StackWeights.rule`):

``"cpu"``
    A sample weighs its thread's CPU time since the thread's previous sample (``cpu_ns``, ns).
    A thread's first sample (``cpu_ns`` null) weighs nothing.
``"wall"``
    A sample weighs the wall time since its thread's previous sample (ns, ``mono_ns``
    differences per ``(pid, tid)``). A thread's first sample weighs nothing, and so does a
    sample the reader marks as a thread's first (``cpu_ns`` null: a new thread, or a Linux TID
    used again), as for ``"cpu"``: no time is counted for a thread before it was seen.
a metric column (``gpu.0.power_w``, ``proc.rss_bytes``, ``disk.read_bytes``, ...)
    Each sample falls in a row of the recording: the last row with ``mono_ns`` at or before the
    sample's. Call the rows that samples fall in *sampled rows*; the samples of a sampled row
    cover the time from the latest sample of the previous sampled row to their own latest (one
    round of the stack reader when stacks are read at every tick; the samples' own times, not
    the row's, so a row written late does not shift what its samples are given). Over that time
    the column is taken as the package's one model of a metric between readings
    (:mod:`stroboscope.analysis._series`, as energy and attribution take it): its valid
    readings, each at the time it was read (a GPU's value at its poll's time), linear between
    them. The row carries, for a level or a rate (kind ``gauge`` or ``rate``), the column's
    integral over the span (``W`` x s = ``J``: the energy drawn while the stack ran; ``%`` gives
    ``%·s``, ``bytes`` gives ``bytes·s``, ``bytes/s`` gives ``bytes``), and for a running total
    (kind ``counter``) its increase over the span (the bytes read while it ran);
    ``COLUMN:growth`` takes any column's rises as a counter's increase
    (``proc.rss_bytes:growth``: the bytes the process grew by while the stack ran, a fall
    counting nothing). A sampled row's quantity is shared between the samples that fell in it
    (the threads sampled then, of every process) in proportion to their CPU time since their
    previous sample; when none of them ran (all preempted, or all asleep), in proportion to
    their CPU time over their last :data:`RECENT_SAMPLES` samples (a busy thread that the
    machine paused keeps its claim, a thread asleep has none), and equally when none ran in
    those either. The first sampled row, samples before the first row and spans the column's
    readings do not cover carry nothing; so do a counter that went down (a reset) and a negative
    integral.

A time range (``begin_ns``/``end_ns``, CLOCK_MONOTONIC) and a scope (the samples of the thread
that ran a scope call while it was open) select samples *after* the weights are computed, so a
selection's weights are those the samples have in the whole run.
"""

from __future__ import annotations

import difflib
from dataclasses import dataclass
from typing import Any

import numpy as np
import pyarrow as pa

from stroboscope.analysis._intervals import check_intervals
from stroboscope.analysis._series import F64, I64, cells, integral, interp, series
from stroboscope.analysis.column_stats import IDENTIFIER, column_kind, column_unit
from stroboscope.formats.stacks import check_stacks

__all__ = [
    "GROWTH",
    "WEIGHTS",
    "StackWeights",
    "function_table",
    "sample_weights",
    "select_samples",
    "stack_weights",
    "weight_column",
    "weight_source",
    "weight_unit",
]

WEIGHTS = ("cpu", "wall")
"""The weights that need no column of the rows; any other weight names a metric column."""
GROWTH = ":growth"
"""A column weight with this suffix (``proc.rss_bytes:growth``) weighs the column's rises."""

RECENT_SAMPLES = 16
"""A row in which no sampled thread ran is shared by the threads' CPU time over their last this
many samples: a thread preempted for a moment keeps its claim, one asleep has none."""
TIME_UNITS = {"W": "J", "mW": "mJ", "kW": "kJ"}
"""Level units whose product with seconds has a name of its own."""


@dataclass(frozen=True)
class StackWeights:
    """The weight of every stack of a set of samples.

    Attributes
    ----------
    stacks : pyarrow.Table
        One row per stack sampled (in ``stack_id`` order): ``stack_id`` int32, ``samples``
        int64 (the samples selected with it), ``weight`` float64 (in :attr:`unit`).
    frames : pyarrow.Table
        The interned stacks (:data:`stroboscope.formats.stacks.FRAMES_SCHEMA`).
    weight : str
        ``"cpu"``, ``"wall"``, the metric column, or the column with :data:`GROWTH`.
    unit : str
        The unit of the weights: ``"ns"`` for ``cpu`` and ``wall``; for a column, see
        :func:`weight_unit` (``"J"`` for a power in W).
    rule : str
        What a weight means, in one paragraph (for the output's reader).
    total : float
        The sum of the weights (in :attr:`unit`).
    """

    stacks: pa.Table
    frames: pa.Table
    weight: str
    unit: str
    rule: str
    total: float


def weight_unit(unit: str, kind: str) -> str:
    """The unit of a weight taken from a column in ``unit`` of ``kind``: a counter's own unit;
    for a level or rate, the unit times seconds (``W`` -> ``J``, ``bytes/s`` -> ``bytes``,
    ``%`` -> ``%·s``, a column without a unit -> ``s``)."""
    if kind == "counter":
        return unit
    if unit in TIME_UNITS:
        return TIME_UNITS[unit]
    if unit.endswith("/s"):
        return unit[:-2]
    return f"{unit}·s" if unit else "s"


def weight_column(schema: pa.Schema, name: str) -> tuple[str, str]:
    """The unit and kind (``gauge``, ``rate``, ``counter``) of the metric column ``name`` of a
    recording whose columns are ``schema``, from its field metadata.

    Raises
    ------
    ValueError
        ``name`` is no column (the closest names listed), a time or text column, or an
        identifier (unit ``id``).
    """
    metrics = [
        f.name
        for f in schema
        if f.name not in ("time", "mono_ns")
        and (pa.types.is_integer(f.type) or pa.types.is_floating(f.type))
    ]
    if name not in schema.names:
        close = difflib.get_close_matches(name, metrics, n=5, cutoff=0.5)
        hint = f"close names: {', '.join(close)}" if close else f"its columns: {_few(metrics)}"
        raise ValueError(
            f"weight {name!r} is not 'cpu', 'wall' or a metric column of the recording ({hint})"
        )
    if name not in metrics:
        raise ValueError(
            f"weight {name!r} is not a metric column: it is a time or text column "
            f"({schema.field(name).type}); give 'cpu', 'wall' or one of {_few(metrics)}"
        )
    field = schema.field(name)
    kind = column_kind(field)
    if kind == IDENTIFIER:
        raise ValueError(
            f"weight {name!r} is an identifier (unit id), not a quantity: it cannot weigh stacks"
        )
    return column_unit(field), kind


def _few(names: list[str]) -> str:
    return ", ".join(names[:12]) + (", …" if len(names) > 12 else "") if names else "none"


def _by_thread(samples: pa.Table) -> tuple[I64, I64, Any]:
    """The samples' (pid, tid, mono_ns) order, their ``mono_ns`` in it, and whether each starts
    its thread there (the first of its (pid, tid), or ``cpu_ns`` null)."""
    mono = cells(samples.column("mono_ns"), np.int64, 0).astype(np.int64)
    pid = cells(samples.column("pid"), np.int64, 0).astype(np.int64)
    tid = cells(samples.column("tid"), np.int64, 0).astype(np.int64)
    order = np.lexsort((mono, tid, pid)).astype(np.int64)
    first = np.ones(len(order), dtype=bool)
    p, t = pid[order], tid[order]
    first[1:] = (p[1:] != p[:-1]) | (t[1:] != t[:-1])
    first |= ~np.asarray(
        samples.column("cpu_ns").is_valid().to_numpy(zero_copy_only=False), dtype=bool
    )[order]
    return order, mono[order], first


def _cpu(samples: pa.Table) -> F64:
    return np.asarray(cells(samples.column("cpu_ns"), np.float64, 0.0), dtype=np.float64)


def _recent_cpu(samples: pa.Table) -> F64:
    """Per sample: its thread's CPU time over its last :data:`RECENT_SAMPLES` samples, this one
    included (ns): the claim of a thread that did not run since its previous sample."""
    order, _mono, _first = _by_thread(samples)
    pid = cells(samples.column("pid"), np.int64, 0).astype(np.int64)[order]
    tid = cells(samples.column("tid"), np.int64, 0).astype(np.int64)[order]
    n = len(order)
    new = np.ones(n, dtype=bool)
    new[1:] = (pid[1:] != pid[:-1]) | (tid[1:] != tid[:-1])
    start = np.maximum.accumulate(np.where(new, np.arange(n), 0))  # each thread's first index
    cum = np.concatenate(([0.0], np.cumsum(_cpu(samples)[order])))
    lo = np.maximum(np.arange(n) - RECENT_SAMPLES + 1, start)
    out = np.empty(n, dtype=np.float64)
    out[order] = cum[np.arange(n) + 1] - cum[lo]
    return out


def _wall(samples: pa.Table) -> F64:
    order, sorted_mono, first = _by_thread(samples)
    gaps = np.zeros(len(order), dtype=np.float64)
    gaps[1:] = np.diff(sorted_mono).astype(np.float64)
    gaps[first] = 0.0
    out = np.empty(len(order), dtype=np.float64)
    out[order] = gaps
    return out


def _row_quantities(rows: pa.Table, column: str, kind: str, at: I64) -> F64:
    """Per sampled row (the time of its latest sample, increasing): the quantity it carries (see
    the module docstring); 0 for the first, and where the column's readings do not cover the
    span."""
    s = series(rows, column)  # its readings, each at the time it was read
    out = np.zeros(len(at), dtype=np.float64)
    if len(at) < 2:
        return out
    if kind == "counter":
        gained = np.diff(interp(s, at))  # value at the span's end minus at its start
    else:
        gained = np.diff(integral(s, at)) / 1e9  # value x ns -> value x s
    out[1:] = np.where(np.isnan(gained) | (gained < 0), 0.0, gained)
    return out


def _column_weights(samples: pa.Table, rows: pa.Table, column: str, kind: str) -> F64:
    t = cells(rows.column("mono_ns"), np.int64, 0).astype(np.int64)
    if len(t) > 1 and bool((np.diff(t) < 0).any()):
        order = np.argsort(t, kind="stable")
        rows, t = rows.take(pa.array(order)), t[order]
    mono = cells(samples.column("mono_ns"), np.int64, 0).astype(np.int64)
    row = np.searchsorted(t, mono, side="right").astype(np.int64) - 1  # -1: before every row
    inside = row >= 0
    present = np.zeros(len(t), dtype=bool)
    present[row[inside]] = True
    sampled = np.flatnonzero(present)  # the sampled rows, in order: no sort of the samples
    which = (np.cumsum(present) - 1)[row[inside]]
    ends = np.full(len(sampled), np.iinfo(np.int64).min, dtype=np.int64)
    np.maximum.at(ends, which, mono[inside])  # each sampled row's latest sample: increasing
    quantity = _row_quantities(rows, column, kind, ends)
    cpu = _cpu(samples)[inside]
    recent = _recent_cpu(samples)[inside]
    ran = np.bincount(which, cpu, minlength=len(sampled))
    ran_recently = np.bincount(which, recent, minlength=len(sampled))
    count = np.bincount(which, minlength=len(sampled)).astype(np.float64)
    with np.errstate(invalid="ignore", divide="ignore"):
        share = np.where(
            ran[which] > 0,
            cpu / ran[which],
            np.where(ran_recently[which] > 0, recent / ran_recently[which], 1.0 / count[which]),
        )
    out = np.zeros(samples.num_rows, dtype=np.float64)
    out[inside] = quantity[which] * share
    return out


def sample_weights(
    samples: pa.Table, weight: str = "cpu", rows: pa.Table | None = None
) -> tuple[F64, str, str]:
    """Each sample's weight (see the module docstring for the rules).

    Parameters
    ----------
    samples : pyarrow.Table
        Stack samples (:data:`stroboscope.formats.stacks.SAMPLES_SCHEMA`), all of a run: a
        sample's weight depends on its thread's previous sample and on the samples of its row.
    weight : str
        ``"cpu"``, ``"wall"`` or a metric column of ``rows``.
    rows : pyarrow.Table, optional
        The recording's rows (``mono_ns`` and the column, its unit and kind in the field
        metadata); needed for a column.

    Returns
    -------
    (weights, unit, rule)
        float64 per sample (in ``unit``), the unit, and the rule in words.

    Raises
    ------
    ValueError
        A weight that is neither ``cpu``, ``wall`` nor a metric column of ``rows`` (the closest
        names listed); a column weight without ``rows``.
    """
    if not isinstance(weight, str) or not weight:
        raise ValueError(f"weight must be 'cpu', 'wall' or a metric column name, got {weight!r}")
    if weight == "cpu":
        return _cpu(samples), "ns", RULES["cpu"]
    if weight == "wall":
        return _wall(samples), "ns", RULES["wall"]
    if rows is None:
        raise ValueError(
            f"weight {weight!r} is a column of the recording's rows: pass rows (the recording)"
        )
    if "mono_ns" not in rows.column_names:
        raise ValueError("rows has no mono_ns column: pass the recording's rows")
    column = weight_source(weight) or weight
    unit, kind = weight_column(rows.schema, column)
    growth = weight.endswith(GROWTH)
    out = _column_weights(samples, rows, column, "counter" if growth else kind)
    return out, weight_unit(unit, "counter" if growth else kind), column_rule(weight, unit, kind)


def weight_source(weight: str) -> str | None:
    """The column of the rows a weight reads: None for ``cpu`` and ``wall``, else the weight
    without its :data:`GROWTH` suffix."""
    if weight in WEIGHTS:
        return None
    return weight[: -len(GROWTH)] if weight.endswith(GROWTH) else weight


RULES = {
    "cpu": (
        "cpu: each sample weighs its thread's CPU time since the thread's previous sample (ns); "
        "a thread's first sample weighs nothing."
    ),
    "wall": (
        "wall: each sample weighs the wall time since its thread's previous sample (ns); a "
        "thread's first sample (cpu_ns null: a new thread or a reused TID) weighs nothing."
    ),
}
"""What the weights without a column mean (printed by ``stroboscope stacks``)."""


def column_rule(weight: str, unit: str, kind: str) -> str:
    """What a weight by a column (``weight``: its name, or with :data:`GROWTH`) of ``unit`` and
    ``kind`` means, in one paragraph (see the module docstring)."""
    column = weight_source(weight) or weight
    shown = f"{column} ({unit or 'no unit'}, {kind})"
    out = weight_unit(unit, "counter" if weight.endswith(GROWTH) else kind)
    if weight.endswith(GROWTH):
        what = (
            f"the rises of {shown} over the time the sample covers (a fall counts nothing): "
            f"{out} grown while"
        )
    elif kind == "counter":
        what = f"the increase of {shown} over the time the sample covers: {out} counted while"
    else:
        what = f"{shown} integrated over the time the sample covers: {out} accumulated while"
    return (
        f"{weight}: each stack weighs {what} it ran. A sample falls in the last row at or "
        "before it; the samples of a row cover the time since the samples of the previous row "
        "that samples fell in (the column linear between its readings, each at the time it was "
        "read); a row's "
        "quantity is shared between the threads sampled in it in proportion to their CPU time "
        "since their previous sample (when none ran then, by their CPU time over their last "
        f"{RECENT_SAMPLES} samples; equally when none ran in those either). The value "
        "describes what the column measures (a device, the process, the machine), not the "
        "thread alone."
    )


def _rows_in_scope(samples: pa.Table, scope: str, intervals: pa.Table) -> Any:
    iv = check_intervals(intervals)
    table = iv.table
    names = np.asarray(table.column("name").to_numpy(zero_copy_only=False), dtype=object)
    chosen = names == scope
    if not chosen.any() and "path" in table.column_names:
        chosen = np.asarray(table.column("path").to_numpy(zero_copy_only=False), object) == scope
    if not chosen.any():
        known = sorted({str(n) for n in names if n is not None})
        close = difflib.get_close_matches(scope, known, n=5, cutoff=0.5)
        raise ValueError(
            f"scope {scope!r} has no call in the scope intervals "
            f"({'close names: ' + ', '.join(close) if close else 'its scopes: ' + _few(known)})"
        )
    ctid = np.asarray(table.column("thread_id").cast(pa.int64()).to_numpy(), np.int64)[chosen]
    cpid = None
    if "pid" in table.column_names and "pid" in samples.column_names:
        cpid = cells(table.column("pid"), np.int64, -1).astype(np.int64)[chosen]
    begin, end = iv.begin[chosen], iv.end[chosen]
    mono = cells(samples.column("mono_ns"), np.int64, 0).astype(np.int64)
    tid = cells(samples.column("tid"), np.int64, 0).astype(np.int64)
    pid = cells(samples.column("pid"), np.int64, 0).astype(np.int64)
    keep = np.zeros(samples.num_rows, dtype=bool)
    for thread in np.unique(ctid):  # per thread that ran the scope: a few, not per sample
        on = ctid == thread
        if cpid is not None:
            for proc in np.unique(cpid[on]):
                mine = on & (cpid == proc)
                target = (tid == thread) & ((pid == proc) | (proc < 0))
                keep |= target & _inside(mono, begin[mine], end[mine])
        else:
            keep |= (tid == thread) & _inside(mono, begin[on], end[on])
    return keep


def _inside(t: I64, begin: I64, end: I64) -> Any:
    """Whether each ``t`` lies in one of the half-open ``[begin, end)`` (which may nest)."""
    b, e = np.sort(begin), np.sort(end)
    opened = np.searchsorted(b, t, side="right")
    closed = np.searchsorted(e, t, side="right")
    return opened > closed


def select_samples(
    samples: pa.Table,
    *,
    begin_ns: int | None = None,
    end_ns: int | None = None,
    scope: str | None = None,
    intervals: pa.Table | None = None,
) -> Any:
    """Which samples a selection keeps, as a bool array over ``samples``' rows.

    Parameters
    ----------
    samples : pyarrow.Table
        Stack samples.
    begin_ns, end_ns : int, optional
        Keep ``begin_ns <= mono_ns < end_ns`` (CLOCK_MONOTONIC ns; either side open).
    scope : str, optional
        Keep the samples of the thread (Linux TID, and pid when the intervals have one) that
        ran a call of this scope (its ``name``, else its ``path``), taken while the call was
        open (``[begin_ns, end_ns)``; a call still open runs on). Needs ``intervals``.
    intervals : pyarrow.Table, optional
        The scope-intervals table of the run.
    """
    keep = np.ones(samples.num_rows, dtype=bool)
    mono = cells(samples.column("mono_ns"), np.int64, 0).astype(np.int64)
    for name, value in (("begin_ns", begin_ns), ("end_ns", end_ns)):
        if value is not None and (isinstance(value, bool) or not isinstance(value, int)):
            raise TypeError(f"{name} must be an int (CLOCK_MONOTONIC ns), got {value!r}")
    if begin_ns is not None:
        keep &= mono >= begin_ns
    if end_ns is not None:
        keep &= mono < end_ns
    if scope is not None:
        if intervals is None:
            raise ValueError(f"scope {scope!r} needs the scope intervals (intervals=...)")
        keep &= _rows_in_scope(samples, scope, intervals)
    return keep


def stack_weights(
    samples: pa.Table,
    frames: pa.Table,
    weight: str = "cpu",
    *,
    rows: pa.Table | None = None,
    begin_ns: int | None = None,
    end_ns: int | None = None,
    scope: str | None = None,
    intervals: pa.Table | None = None,
) -> StackWeights:
    """The weight of each stack over the samples selected.

    Parameters
    ----------
    samples, frames : pyarrow.Table
        The stacks tables (:func:`stroboscope.formats.stacks.read_stacks`, or a Sampler's
        ``stacks()``), checked with :func:`stroboscope.formats.stacks.check_stacks`.
    weight : str
        ``"cpu"``, ``"wall"`` or a metric column of ``rows`` (see :func:`sample_weights`).
    rows : pyarrow.Table, optional
        The recording's rows, for a column weight.
    begin_ns, end_ns, scope, intervals
        The selection (:func:`select_samples`); the weights are those of the whole run.

    Returns
    -------
    StackWeights
    """
    samples, frames = check_stacks(samples, frames)
    per_sample, unit, rule = sample_weights(samples, weight, rows)
    keep = select_samples(
        samples, begin_ns=begin_ns, end_ns=end_ns, scope=scope, intervals=intervals
    )
    ids = cells(samples.column("stack_id"), np.int64, 0)[keep]
    # the stacks are the frames' (a few thousand, sorted): no sort of the samples
    known = np.unique(cells(frames.column("stack_id"), np.int64, 0))
    which = np.searchsorted(known, ids)  # check_stacks: every sample's stack is known
    total = np.bincount(which, per_sample[keep], minlength=len(known))
    count = np.bincount(which, minlength=len(known)).astype(np.int64)
    sampled = count > 0
    unique, total, count = known[sampled], total[sampled], count[sampled]
    stacks = pa.table(
        {
            "stack_id": pa.array(unique, pa.int32()),
            "samples": pa.array(count, pa.int64()),
            "weight": pa.array(total, pa.float64()),
        }
    )
    return StackWeights(stacks, frames, weight, unit, rule, float(total.sum()))


def function_table(weights: StackWeights) -> pa.Table:
    """Per function (``function``, ``file``, ``line``): its self weight (the stacks whose leaf
    it is), its total weight (the stacks it is on, counted once per stack however often it
    recurses), and both as shares of the weights' total (0 to 1); sorted by total, largest
    first.

    Returns
    -------
    pyarrow.Table
        ``function``, ``file`` string, ``line`` int32, ``self``, ``total`` float64 (in
        ``weights.unit``), ``self_share``, ``total_share`` float64, ``samples`` int64 (the
        samples it is on).
    """
    frames, stacks = weights.frames, weights.stacks
    sid = cells(frames.column("stack_id"), np.int64, 0).astype(np.int64)
    known = cells(stacks.column("stack_id"), np.int64, 0).astype(np.int64)
    pos = np.searchsorted(known, sid)
    on = (pos < len(known)) & (known[np.minimum(pos, max(len(known) - 1, 0))] == sid)
    if not len(known):
        on[:] = False
    w = np.asarray(stacks.column("weight").to_numpy(), dtype=np.float64)
    n = np.asarray(stacks.column("samples").to_numpy(), dtype=np.int64)
    depth = cells(frames.column("depth"), np.int64, 0).astype(np.int64)
    sub = frames.filter(pa.array(on))
    pos, sid, depth = pos[on], sid[on], depth[on]
    deepest = np.zeros(len(known), dtype=np.int64)  # per stack (dense: by its position)
    np.maximum.at(deepest, pos, depth)
    leaf = depth == deepest[pos]
    keyed = sub.select(["function", "file", "line"]).append_column(
        "stack", pa.array(sid, pa.int64())
    )
    keyed = keyed.append_column("w", pa.array(w[pos], pa.float64()))
    keyed = keyed.append_column("n", pa.array(n[pos], pa.int64()))
    keyed = keyed.append_column("self_w", pa.array(np.where(leaf, w[pos], 0.0), pa.float64()))
    once = keyed.group_by(["function", "file", "line", "stack"]).aggregate(
        [("w", "max"), ("n", "max"), ("self_w", "sum")]
    )
    per = once.group_by(["function", "file", "line"]).aggregate(
        [("w_max", "sum"), ("n_max", "sum"), ("self_w_sum", "sum")]
    )
    total = np.asarray(per.column("w_max_sum").to_numpy(), dtype=np.float64)
    own = np.asarray(per.column("self_w_sum_sum").to_numpy(), dtype=np.float64)
    grand = weights.total
    with np.errstate(invalid="ignore", divide="ignore"):
        total_share = total / grand if grand > 0 else np.zeros_like(total)
        self_share = own / grand if grand > 0 else np.zeros_like(own)
    order = np.lexsort((-own, -total))
    out = pa.table(
        {
            "function": per.column("function"),
            "file": per.column("file"),
            "line": per.column("line").cast(pa.int32()),
            "self": pa.array(own, pa.float64()),
            "total": pa.array(total, pa.float64()),
            "self_share": pa.array(self_share, pa.float64()),
            "total_share": pa.array(total_share, pa.float64()),
            "samples": per.column("n_max_sum").cast(pa.int64()),
        }
    )
    return out.take(pa.array(order, pa.int64()))
