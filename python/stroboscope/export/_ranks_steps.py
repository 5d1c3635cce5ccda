"""Step times per rank from scope calls, the straggler rule, and the ranks' steps on one clock.

The *step* is a scope name (or path): given by the caller, else the depth-0 scope name called
most often over all ranks (ties: the first in alphabetical order). A rank's step times are the
durations of its closed calls of it (``end_ns - begin_ns``); open calls are counted apart.
Percentiles interpolate linearly between the two nearest durations (numpy's default).
"""

from __future__ import annotations

import math
from collections import Counter
from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt
import pyarrow as pa
import pyarrow.compute as pc

from stroboscope.export._ranks import Key, Rank

I64 = npt.NDArray[np.int64]
MAD_SIGMA = 1.4826
"""MAD times this estimates the standard deviation of normally distributed values."""


@dataclass(frozen=True)
class StepStats:
    """One rank's step times (seconds): closed calls ``count``, ``open`` calls, median, 90th
    percentile, mean, min and max of the closed ones (None without any)."""

    count: int
    open: int
    median_s: float | None
    p90_s: float | None
    mean_s: float | None
    min_s: float | None
    max_s: float | None

    def to_dict(self) -> dict[str, Any]:
        """JSON-able."""
        return dict(self.__dict__)


@dataclass(frozen=True)
class StragglerRule:
    """A rank is a straggler when its median step time ``m`` exceeds the median ``M`` of all
    ranks' medians by more than ``k`` robust standard deviations and by more than ``pct`` %::

        m - M > k * 1.4826 * MAD   and   m > M * (1 + pct / 100)

    where ``MAD = median(|m_r - M|)`` over the ranks of the job. The first test asks that the
    rank stand out from how much ranks differ anyway; the second that the difference matter
    (it alone decides when the other ranks are identical, MAD = 0). Only slow ranks are named;
    with fewer than 3 ranks no rank can stand out from the others.
    """

    k: float = 3.0
    pct: float = 5.0

    def __post_init__(self) -> None:
        for name, value in (("k", self.k), ("pct", self.pct)):
            ok = isinstance(value, (int, float)) and not isinstance(value, bool)
            if not ok or not math.isfinite(value) or value < 0:
                raise ValueError(f"straggler rule: {name} must be a number >= 0, got {value!r}")

    def text(self) -> str:
        """The rule in words, with its parameters."""
        return (
            f"a straggler's median step time exceeds the median over ranks by more than "
            f"{self.k:g} x 1.4826 x MAD (median absolute deviation of the ranks' medians) and "
            f"by more than {self.pct:g} %"
        )

    def to_dict(self) -> dict[str, Any]:
        """JSON-able: ``k``, ``pct`` and the rule's text."""
        return {"k": self.k, "pct": self.pct, "text": self.text()}


@dataclass(frozen=True)
class Verdict:
    """The rule applied to one job: ``center_s`` (M), ``mad_s``, the ``threshold_s`` a median
    must exceed, and the ``stragglers`` (keys, slowest first)."""

    center_s: float | None
    mad_s: float | None
    threshold_s: float | None
    stragglers: list[Key]


def _calls(scopes: pa.Table, step: str) -> pa.Table:
    mask = pc.equal(scopes.column("name"), step)
    if "path" in scopes.column_names:
        mask = pc.or_kleene(mask, pc.equal(scopes.column("path"), step))
    return scopes.filter(pc.fill_null(mask, False))


def choose_step(ranks: list[Rank], step: str | None) -> str | None:
    """``step`` when some rank called a scope of that name or path (ValueError naming the
    names seen otherwise), else the most frequent depth-0 scope name (None: no scope at all)."""
    counts: Counter[str] = Counter()
    for r in ranks:
        if r.scopes is None or not r.scopes.num_rows:
            continue
        table = r.scopes
        if step is None and "depth" in table.column_names:
            table = table.filter(pc.fill_null(pc.equal(table.column("depth"), 0), False))
        counts.update(str(n) for n in table.column("name").to_pylist() if n is not None)
    if step is not None:
        if not isinstance(step, str) or not step:
            raise ValueError(f"step must be a scope name or path, got {step!r}")
        if any(r.scopes is not None and _calls(r.scopes, step).num_rows for r in ranks):
            return step
        seen = ", ".join(n for n, _ in counts.most_common(8)) or "none"
        raise ValueError(
            f"step {step!r}: no rank called a scope of that name or path (scopes called most: "
            f"{seen})"
        )
    if not counts:
        return None
    top = max(counts.values())
    return min(n for n, c in counts.items() if c == top)


def step_calls(rank: Rank, step: str) -> tuple[I64, I64]:
    """Begin times (CLOCK_MONOTONIC ns, sorted) of all of ``rank``'s calls of ``step``, and the
    durations (ns) of its closed ones (in begin order)."""
    if rank.scopes is None:
        empty = np.empty(0, dtype=np.int64)
        return empty, empty
    calls = _calls(rank.scopes, step)
    begin = calls.column("begin_ns").to_numpy(zero_copy_only=False).astype(np.int64)
    return np.sort(begin), closed_calls(rank, step)[1]


def closed_calls(rank: Rank, step: str) -> tuple[I64, I64]:
    """Begin times and durations (ns) of ``rank``'s closed calls of ``step``, in begin order."""
    if rank.scopes is None:
        empty = np.empty(0, dtype=np.int64)
        return empty, empty
    calls = _calls(rank.scopes, step)
    calls = calls.filter(calls.column("end_ns").is_valid())
    begin = calls.column("begin_ns").to_numpy(zero_copy_only=False).astype(np.int64)
    end = calls.column("end_ns").to_numpy(zero_copy_only=False).astype(np.int64)
    order = np.argsort(begin, kind="stable")
    return begin[order], (end - begin)[order]


def step_stats(durations_ns: I64, open_calls: int) -> StepStats:
    """The figures of one rank's closed step durations (ns) as :class:`StepStats`."""
    d = np.asarray(durations_ns, dtype=np.float64) / 1e9
    if len(d) == 0:
        return StepStats(0, open_calls, None, None, None, None, None)
    return StepStats(
        count=len(d),
        open=open_calls,
        median_s=float(np.median(d)),
        p90_s=float(np.percentile(d, 90)),
        mean_s=float(d.mean()),
        min_s=float(d.min()),
        max_s=float(d.max()),
    )


def judge(medians: dict[Key, float], rule: StragglerRule) -> Verdict:
    """Apply ``rule`` to the ranks' median step times (s) of one job."""
    if not medians:
        return Verdict(None, None, None, [])
    values = np.array(list(medians.values()), dtype=np.float64)
    center = float(np.median(values))
    mad = float(np.median(np.abs(values - center)))
    threshold = max(center + rule.k * MAD_SIGMA * mad, center * (1 + rule.pct / 100))
    slow = [
        key
        for key, m in medians.items()
        if m - center > rule.k * MAD_SIGMA * mad and m > center * (1 + rule.pct / 100)
    ]
    slow.sort(key=lambda key: -medians[key])
    return Verdict(center, mad, threshold, slow)


@dataclass(frozen=True)
class Alignment:
    """The ranks' step starts on one realtime axis (each rank's monotonic begin times plus its
    clock anchor), compared step by step: each start of the rank with the most calls (the
    reference) with every other rank's nearest start within half the reference's median step
    period; a step some rank has no start for is left out (a rank that began recording a step
    late is not read as a whole step behind).

    Attributes
    ----------
    steps : int
        Steps compared (the reference's starts that every rank matched).
    skew_median_ns, skew_max_ns : int or None
        Per step, the latest start minus the earliest over ranks: its median and maximum.
    lag_ns : dict
        Per rank, the median over steps of its start minus the median start of that step over
        ranks (positive: it starts its steps late; within half a step period by construction).
    """

    steps: int
    skew_median_ns: int | None
    skew_max_ns: int | None
    lag_ns: dict[Key, int]


def _nearest(starts: I64, ref: I64) -> I64:
    """For each reference start, the index of ``starts``'s nearest one."""
    idx = np.searchsorted(starts, ref)
    lo = np.clip(idx - 1, 0, len(starts) - 1)
    hi = np.clip(idx, 0, len(starts) - 1)
    closer_lo = np.abs(starts[lo] - ref) <= np.abs(starts[hi] - ref)
    return np.where(closer_lo, lo, hi)


def align(starts: dict[Key, I64]) -> Alignment:
    """Compare the ranks' realtime step starts (ns, sorted, one array per rank) step by step."""
    have = {k: np.asarray(v, dtype=np.int64) for k, v in starts.items() if len(v)}
    if not have:
        return Alignment(0, None, None, {})
    keys = list(have)
    ref = have[max(keys, key=lambda k: len(have[k]))]
    if len(ref) < 2:  # no step period to match within: the first start of each rank
        rows = [have[k][:1] for k in keys]
    else:
        half = float(np.median(np.diff(ref))) / 2
        picks = {k: have[k][_nearest(have[k], ref)] for k in keys}
        matched = np.all([np.abs(picks[k] - ref) <= half for k in keys], axis=0)
        rows = [picks[k][matched] for k in keys]
    grid = np.stack(rows)  # ranks x steps
    if grid.shape[1] == 0:
        return Alignment(0, None, None, {})
    grid = grid - grid.min()  # small numbers: a float64 median of epoch ns would round them
    skew = grid.max(axis=0) - grid.min(axis=0)
    center = np.median(grid, axis=0)
    lag = np.median(grid - center, axis=1)
    return Alignment(
        steps=int(grid.shape[1]),
        skew_median_ns=int(np.median(skew)),
        skew_max_ns=int(skew.max()),
        lag_ns={k: round(float(v)) for k, v in zip(keys, lag)},
    )
