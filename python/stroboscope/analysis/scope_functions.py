"""A scope broken down by function: the per-scope summary's rows by ``function`` too
(``summary(..., by=[..., "function"], stacks=...)``, :mod:`stroboscope.analysis.scope_summary`).

For each group of closed scope calls (a row of the per-scope summary), the stack samples taken
inside the calls are those :func:`stroboscope.analysis.select_samples` selects for a scope: the
samples of the thread that ran a call (and of its process, when the intervals say which), taken
while the call was open (``[begin_ns, end_ns)``). Each sample weighs what
:func:`stroboscope.analysis.stacks.sample_weights` gives it over the whole run (CPU time by
default), and :func:`stroboscope.analysis.function_table` sums the weights per function: its
self weight (the stacks it is the leaf of) and its total (the stacks it is on), each also as a
share of the group's weight.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from stroboscope.analysis._intervals import Intervals
from stroboscope.analysis.stacks import (
    WEIGHTS,
    StackWeights,
    function_table,
    sample_weights,
    select_samples,
)
from stroboscope.formats.stacks import check_stacks

if TYPE_CHECKING:
    import pandas

FUNCTION_KEY = "function"
"""The key of ``by`` that breaks each row of the per-scope summary down by function."""
FUNCTION_LEVELS = ("function", "file", "line")
"""The index levels a function adds to the summary's keys (``line``: its first line)."""
FUNCTION_COLUMNS = ("self", "total", "self_share", "total_share", "samples")
"""The columns of the summary by function (as :func:`stroboscope.analysis.function_table`)."""


def check_stacks_argument(stacks: Any) -> tuple[pa.Table, pa.Table]:
    """``stacks`` as the (samples, frames) pair of stack tables, checked; a TypeError or a
    ValueError naming the argument otherwise."""
    if stacks is None:
        raise ValueError(
            "by 'function' needs the stacks: pass stacks=(samples, frames), the two stack tables "
            "(a Sampler(stacks=True)'s stacks(), or stroboscope.formats.stacks.read_stacks(RUN))"
        )
    if not isinstance(stacks, (tuple, list)) or len(stacks) != 2:
        raise TypeError(
            "stacks must be a (samples, frames) pair of pyarrow Tables, got "
            f"{type(stacks).__name__}"
        )
    return check_stacks(stacks[0], stacks[1])


def by_function(
    samples: pa.Table,
    iv: Intervals,
    code: Any,
    index: pandas.Index,
    stacks: Sequence[pa.Table] | None,
    weight: str,
) -> pandas.DataFrame:
    """Per group of calls (``code``: each interval's row of ``index``) and function: the stack
    samples' weights inside the group's closed calls (see the module's text).

    Parameters
    ----------
    samples : pyarrow.Table
        The sample frame (the rows, for a weight by a metric column).
    iv : Intervals
        The scope calls.
    code : numpy.ndarray
        Each call's group (a position in ``index``).
    index : pandas.Index
        The groups' keys.
    stacks : (pyarrow.Table, pyarrow.Table)
        The stack samples and the interned stacks.
    weight : str
        ``"cpu"``, ``"wall"`` or a metric column of ``samples``.
    """
    import pandas as pd

    st, frames = check_stacks_argument(stacks)
    w, unit, rule = sample_weights(st, weight, None if weight in WEIGHTS else samples)
    mono = np.asarray(st.column("mono_ns").to_numpy(), np.int64)
    order = np.argsort(mono, kind="stable")
    mono = mono[order]
    ids = np.asarray(st.column("stack_id").to_numpy(), np.int64)
    names = np.asarray(iv.table.column("name").to_numpy(zero_copy_only=False), dtype=object)
    keys: list[tuple[Any, ...]] = []
    parts: list[pa.Table] = []
    for g in range(len(index)):
        rows = np.flatnonzero((code == g) & iv.closed)
        if not len(rows):
            continue
        # the samples within the calls' span (sorted by time), then those selection keeps
        lo = int(np.searchsorted(mono, iv.begin[rows].min(), side="left"))
        hi = int(np.searchsorted(mono, iv.end[rows].max(), side="left"))
        near = order[lo:hi]
        sub = st.take(pa.array(near))
        keep = np.zeros(len(near), dtype=bool)
        calls = iv.table.take(pa.array(rows))
        for name in dict.fromkeys(names[rows].tolist()):  # each name once, in call order
            own = calls.filter(pc.equal(calls.column("name"), name))
            keep |= select_samples(sub, scope=name, intervals=own)
        picked = near[keep]
        if not len(picked):
            continue
        stack, which = np.unique(ids[picked], return_inverse=True)
        which = which.reshape(-1)
        total = np.bincount(which, w[picked], minlength=len(stack))
        count = np.bincount(which, minlength=len(stack)).astype(np.int64)
        table = pa.table(
            {
                "stack_id": pa.array(stack, pa.int32()),
                "samples": pa.array(count, pa.int64()),
                "weight": pa.array(total, pa.float64()),
            }
        )
        ft = function_table(StackWeights(table, frames, weight, unit, rule, float(total.sum())))
        key = index[g] if isinstance(index[g], tuple) else (index[g],)
        functions = zip(*(ft.column(c).to_pylist() for c in FUNCTION_LEVELS))
        keys += [(*key, *f) for f in functions]
        parts.append(ft.select(list(FUNCTION_COLUMNS)))
    levels = [*index.names, *FUNCTION_LEVELS]
    out_index = (
        pd.MultiIndex.from_tuples(keys, names=levels)
        if keys
        else pd.MultiIndex.from_arrays([[] for _ in levels], names=levels)
    )
    if parts:
        cols = pa.concat_tables(parts)
        data = {c: cols.column(c).to_numpy() for c in FUNCTION_COLUMNS}
    else:
        data = {c: np.zeros(0, np.int64 if c == "samples" else float) for c in FUNCTION_COLUMNS}
    df: pandas.DataFrame = pd.DataFrame(data, index=out_index)
    df.attrs.update({"weight": weight, "unit": unit, "rule": rule})
    return df
