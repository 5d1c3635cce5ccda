"""Samples joined to the scopes that were open when they were taken.

:func:`samples_by_scope` is an as-of join on ``mono_ns``: for every sample row and every stack
(a thread, or an asyncio task) with a scope open at that moment, the innermost such scope. A
scope call owns the half-open time ``[begin_ns, end_ns)``; a call still open (null ``end_ns``)
owns everything after its begin.

The summary per scope is in :mod:`stroboscope.analysis.scope_summary`.
"""

from __future__ import annotations

from typing import Literal

import numpy as np
import pyarrow as pa

from stroboscope.analysis._intervals import SCOPE_COLUMNS, Intervals, check_intervals
from stroboscope.analysis._series import I64, check_samples, mono, sorted_unique
from stroboscope.analysis.scope_summary import summary

__all__ = ["samples_by_scope", "summary"]


def samples_by_scope(
    samples: pa.Table, intervals: pa.Table, *, per: Literal["stack", "sample"] = "stack"
) -> pa.Table:
    """The sample frame with the innermost open scope of each stack at each row.

    Parameters
    ----------
    samples : pyarrow.Table
        A sample frame (``Frame.to_arrow()``): ``time``, ``mono_ns`` (sorted), metric columns.
    intervals : pyarrow.Table
        Scope calls in the scope-intervals schema.
    per : {"stack", "sample"}
        ``"stack"`` (default): one row per (sample, stack with a scope open at that sample), so
        two threads inside scopes at once give two rows for the sample, one per thread; with a
        single thread this is one row per sample. ``"sample"``: exactly one row per sample, for
        the scope opened most recently among all stacks (aitune's single ``scope`` column;
        ties go to the deeper call, then to the larger ``stack_id``).

    Returns
    -------
    pyarrow.Table
        The sample rows (repeated as above, in ``mono_ns`` order, then by stack) followed by
        ``scope`` (the innermost scope's path, names joined by ``/``), ``scope_name`` (its own
        name, as aitune's ``scope``), ``thread_id``, ``stack_id``, ``scope_depth`` (0 for an
        outermost scope) and one column per label key of the intervals. A sample with no open
        scope appears once, with nulls in these columns.
    """
    samples = check_samples(samples)
    iv = check_intervals(intervals)
    if per not in ("stack", "sample"):
        raise ValueError(f"per must be 'stack' or 'sample', got {per!r}")
    clash = [c for c in (*SCOPE_COLUMNS, *iv.labels) if c in samples.column_names]
    if clash:
        raise ValueError(f"samples already has the column(s) {', '.join(clash)}")
    t = mono(samples)
    if len(t) > 1 and bool((np.diff(t) < 0).any()):
        raise ValueError("samples must be sorted by mono_ns (as a Frame is)")
    sample_idx, scope_idx = _join(t, iv, per)
    return _assemble(samples, iv, sample_idx, scope_idx)


def _join(t: I64, iv: Intervals, per: str) -> tuple[I64, I64]:
    """Row pairs (sample, innermost scope call), with -1 for a sample without any."""
    n = len(t)
    keep = iv.end > iv.begin  # an empty call [b, b) owns no instant
    pb = np.searchsorted(t, iv.begin, side="left").astype(np.int64)
    pe = np.searchsorted(t, iv.end, side="left").astype(np.int64)
    rows = np.flatnonzero(keep)
    # The innermost open call per stack is a step function of time: a begin makes the call
    # innermost, an end hands back to its parent. Events sorted by (stack, time; ends before
    # begins at one instant, inner ends first, outer begins first) and keyed by the first sample
    # index each one applies to, so one searchsorted answers every (sample, stack) query.
    ev_stack = np.concatenate((iv.stack[rows], iv.stack[rows]))
    ev_time = np.concatenate((iv.begin[rows], iv.end[rows]))
    ev_pos = np.concatenate((pb[rows], pe[rows]))
    ev_kind = np.concatenate((np.ones(len(rows), np.int64), np.zeros(len(rows), np.int64)))
    ev_depth = np.concatenate((iv.depth[rows], -iv.depth[rows]))
    ev_value = np.concatenate((rows, iv.parent[rows]))
    order = np.lexsort((ev_depth, ev_kind, ev_time, ev_stack))
    ev_key = ev_stack[order] * (n + 1) + ev_pos[order]
    ev_value = ev_value[order]

    # (sample, stack) pairs where the stack has a call open: the ranges of its outermost calls.
    roots = rows[iv.parent[rows] < 0]
    length = pe[roots] - pb[roots]
    starts = np.repeat(pb[roots] - np.concatenate(([0], np.cumsum(length)[:-1])), length)
    pair_sample = np.arange(int(length.sum()), dtype=np.int64) + starts
    pair_key = sorted_unique(np.repeat(iv.stack[roots], length) * (n + 1) + pair_sample)
    at = np.searchsorted(ev_key, pair_key, side="right") - 1
    scope = ev_value[at] if len(at) else np.zeros(0, np.int64)
    pair_sample = pair_key % (n + 1)
    found = scope >= 0
    pair_sample, scope = pair_sample[found], scope[found]
    if per == "sample":  # the most recently opened call among the stacks
        pick = np.lexsort((iv.stack[scope], iv.depth[scope], iv.begin[scope], pair_sample))
        pair_sample, scope = pair_sample[pick], scope[pick]
        last = np.ones(len(pick), dtype=bool)
        last[:-1] = pair_sample[1:] != pair_sample[:-1]
        pair_sample, scope = pair_sample[last], scope[last]
    else:
        pick = np.lexsort((iv.stack[scope], pair_sample))
        pair_sample, scope = pair_sample[pick], scope[pick]
    covered = np.zeros(n, dtype=bool)
    covered[pair_sample] = True
    bare = np.flatnonzero(~covered)
    sample_idx = np.concatenate((pair_sample, bare))
    scope_idx = np.concatenate((scope, np.full(len(bare), -1, np.int64)))
    order = np.argsort(sample_idx, kind="stable")  # pairs of one sample stay in stack order
    return sample_idx[order], scope_idx[order]


def _assemble(samples: pa.Table, iv: Intervals, sample_idx: I64, scope_idx: I64) -> pa.Table:
    out = samples.take(pa.array(sample_idx))
    take = pa.array(scope_idx, mask=scope_idx < 0)
    picked = iv.table.select(["path", "name", "thread_id", "stack_id", "depth", *iv.labels])
    picked = picked.take(take)
    names = [*SCOPE_COLUMNS, *iv.labels]
    for name, column in zip(names, picked.columns):
        out = out.append_column(name, column)
    return out
