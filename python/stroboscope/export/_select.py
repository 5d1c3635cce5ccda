"""What a report shows of its inputs: the columns asked for, a time range, a scope's spans.

Each selection checks its argument against the data and says what is wrong with it (a column
no input has, a time outside the run, a scope never entered) in a ValueError naming the option.
"""

from __future__ import annotations

import datetime as dt
import fnmatch
import re

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from stroboscope.analysis.column_stats import TIME_COLUMNS
from stroboscope.export._recording import Recording

_DURATION_RE = re.compile(r"^\s*([0-9]*\.?[0-9]+(?:[eE][-+]?[0-9]+)?)\s*(ms|s|m|min|h)?\s*$")
_SCALE = {None: 1.0, "s": 1.0, "ms": 1e-3, "m": 60.0, "min": 60.0, "h": 3600.0}


def split_patterns(patterns: list[str]) -> list[str]:
    """``["cpu.*,mem.used_bytes", "gpu.0.*"]`` → each name or pattern once, in order."""
    return list(dict.fromkeys(p.strip() for text in patterns for p in text.split(",") if p.strip()))


def select_columns(series: list[Recording], patterns: list[str] | None) -> list[Recording]:
    """Keep ``time``, ``mono_ns`` and the columns matching any of ``patterns`` (names or
    shell-style patterns such as ``gpu.0.*``; comma-separated lists are split)."""
    if not patterns:
        return series
    wanted = split_patterns(patterns)
    if not wanted:
        raise ValueError("--columns names no column: give names or patterns such as 'cpu.*'")
    available = sorted({c for s in series for c in s.column_names if c not in TIME_COLUMNS})
    for pattern in wanted:
        if not fnmatch.filter(available, pattern):
            raise ValueError(
                f"--columns: {pattern!r} matches no column of the recording(s); they have: "
                f"{', '.join(available)}"
            )
    out = []
    for s in series:
        keep = [c for c in s.column_names if c in TIME_COLUMNS]
        keep += [
            c
            for c in s.column_names
            if c not in TIME_COLUMNS and any(fnmatch.fnmatchcase(c, p) for p in wanted)
        ]
        out.append(s.select(keep))
    return out


def _span_ns(series: list[Recording]) -> tuple[int, int]:
    firsts, lasts = [], []
    for s in series:
        mm = pc.min_max(s.held.column("time").cast(pa.int64()))
        firsts.append(int(mm["min"].as_py()))
        lasts.append(int(mm["max"].as_py()))
    return min(firsts), max(lasts)


def iso_ms(ns: int) -> str:
    """``ns`` since the epoch as ISO 8601 UTC to the millisecond, for messages and pages
    (``2026-12-03T10:00:00.250Z``)."""
    t = dt.datetime.fromtimestamp(ns / 1e9, tz=dt.timezone.utc)
    return t.isoformat(timespec="milliseconds").replace("+00:00", "Z")


MAX_OFFSET_S = 1e9
"""The latest time ``--from``/``--to`` may name after a run's first row (about 31.7 years):
any span a recording can have, and far from the end of ``timestamp[ns]`` (year 2262)."""


def parse_time(option: str, text: str, start_ns: int) -> int:
    """A realtime in ns from ``text``: seconds after the run's first row (``30``, ``1.5s``,
    ``250ms``, ``2m``, ``1h``; at most :data:`MAX_OFFSET_S`) or an ISO-8601 time (UTC when no
    zone is given; within the years 1678 to 2261, which ``timestamp[ns]`` holds)."""
    m = _DURATION_RE.match(text)
    if m:
        seconds = float(m.group(1)) * _SCALE[m.group(2)]  # inf for 1e400 or 1e308m
        if not seconds <= MAX_OFFSET_S:
            raise ValueError(
                f"{option} {text!r} is {seconds:g} s after the run's start: give 0 to "
                f"{MAX_OFFSET_S:,.0f} s (about 31 years), e.g. 30, 1.5s, 250ms, 2m, 1h"
            )
        return start_ns + round(seconds * 1e9)
    try:
        when = dt.datetime.fromisoformat(text.strip().replace("Z", "+00:00"))
    except ValueError:
        raise ValueError(
            f"{option} must be seconds after the run's start (30, 1.5s, 250ms, 2m) or an "
            f"ISO-8601 time (2026-01-31T12:00:00Z), got {text!r}"
        ) from None
    if when.tzinfo is None:
        when = when.replace(tzinfo=dt.timezone.utc)
    ns = round(when.timestamp() * 1e6) * 1000
    if not -(2**63) < ns < 2**63:
        raise ValueError(
            f"{option} {text!r} is outside the times a recording holds (timestamp[ns]): give "
            f"an ISO-8601 time between 1678 and 2261, or seconds after the run's start"
        )
    return ns


def select_time(series: list[Recording], start: str | None, end: str | None) -> list[Recording]:
    """Keep the rows from ``start`` to ``end`` (inclusive; see :func:`parse_time`), measured
    from the first row of all inputs; a ValueError when the range is empty or outside the run."""
    if start is None and end is None:
        return series
    first, last = _span_ns(series)
    lo = parse_time("--from", start, first) if start is not None else first
    hi = parse_time("--to", end, first) if end is not None else last
    run = (
        f"the run spans {iso_ms(first)} to {iso_ms(last)}, 0 to {(last - first) / 1e9:.3f} s "
        f"after its first row"
    )
    if start is not None and end is not None and lo > hi:
        raise ValueError(f"--from ({start}) is after --to ({end}): {run}")
    # Only the option that missed is named (an absent one is the run's own end, not "None"):
    # lo > last needs --from, hi < first needs --to.
    if lo > last:
        raise ValueError(f"--from {start} ({iso_ms(lo)}) is after the run's last row: {run}")
    if hi < first:
        raise ValueError(f"--to {end} ({iso_ms(hi)}) is before the run's first row: {run}")
    out = []
    for s in series:
        t = s.held.column("time").cast(pa.int64())
        picked = s.filter_rows(pc.and_(pc.greater_equal(t, lo), pc.less_equal(t, hi)))
        if picked.num_rows:
            out.append(picked)
    if not out:
        raise ValueError(
            f"no row lies between {iso_ms(lo)} and {iso_ms(hi)} (--from {start}, --to {end}): {run}"
        )
    return out


def scope_mask(mono: np.ndarray, begins: np.ndarray, ends: np.ndarray) -> np.ndarray:
    """Whether each ``mono`` time lies in one of the intervals ``[begin, end]`` (any order,
    overlapping or nested)."""
    if len(begins) == 0:
        return np.zeros(len(mono), dtype=bool)
    order = np.argsort(begins, kind="stable")
    b, e = begins[order], ends[order]
    reach = np.maximum.accumulate(e)  # the union: a new run starts where begin > reach so far
    starts = np.ones(len(b), dtype=bool)
    starts[1:] = b[1:] > reach[:-1]
    idx = np.flatnonzero(starts)
    ub = b[idx]
    ue = np.maximum.reduceat(e, idx)
    k = np.searchsorted(ub, mono, side="right") - 1
    inside = k >= 0
    inside[inside] = mono[inside] <= ue[k[inside]]
    return inside


def select_scope(series: list[Recording], name: str | None) -> list[Recording]:
    """Keep the rows taken while the scope ``name`` (its name or its path) was open."""
    if name is None:
        return series
    with_scopes = [s for s in series if s.scopes is not None and s.scopes.num_rows]
    if not with_scopes:
        raise ValueError(
            f"--scope {name!r}: no scope intervals came with the recording(s); give --scopes "
            f"FILE or keep <stem>.scopes.parquet beside the recording"
        )
    out = []
    known: set[str] = set()
    for s in with_scopes:
        assert s.scopes is not None
        scopes = s.scopes
        known.update(str(n) for n in scopes.column("name").to_pylist())
        hit = pc.equal(scopes.column("name"), name)
        if "path" in scopes.column_names:
            hit = pc.or_(hit, pc.equal(scopes.column("path"), name))
        chosen = scopes.filter(pc.fill_null(hit, False))
        if not chosen.num_rows:
            continue
        big = np.iinfo(np.int64).max
        begins = chosen.column("begin_ns").to_numpy(zero_copy_only=False).astype(np.int64)
        ends = pc.fill_null(chosen.column("end_ns"), big).to_numpy(zero_copy_only=False)
        mono = s.held.column("mono_ns").to_numpy(zero_copy_only=False)
        picked = s.filter_rows(scope_mask(mono, begins, ends.astype(np.int64)))
        if picked.num_rows:
            out.append(picked)
    if not out:
        if name not in known:
            names = sorted(known)
            raise ValueError(
                f"--scope {name!r} is not a scope of the recording(s); they have: "
                f"{', '.join(names[:30])}{', …' if len(names) > 30 else ''}"
            )
        raise ValueError(f"--scope {name!r}: no row was taken while it was open")
    return out


def check_align(align: str | None) -> str | None:
    """``--align``: None (one absolute time axis), ``start`` or ``scope:NAME``; a ValueError
    naming what is accepted otherwise."""
    if align is None or align == "start":
        return align
    if isinstance(align, str) and align.startswith("scope:") and align[len("scope:") :].strip():
        return align
    raise ValueError(
        f"--align {align!r}: give 'start' (each run from its first row) or 'scope:NAME' "
        f"(each run from the first call of the scope NAME, a name or a path)"
    )


def time_origins(series: list[Recording], align: str | None) -> list[int]:
    """The realtime (ns) each series' plots count from (their time 0), one per series.

    ``None``: the first row of all inputs, one absolute axis for every run. ``start``: each
    run's own first row, so runs taken minutes apart overlay. ``scope:NAME``: the begin of
    the first call of the scope NAME (its name or its path) in each run; a ValueError names
    a run without one.
    """
    check_align(align)
    if align is None:
        first = _span_ns(series)[0]
        return [first] * len(series)
    if align == "start":
        return [int(pc.min(s.held.column("time").cast(pa.int64())).as_py()) for s in series]
    name = align[len("scope:") :]
    out = []
    for s in series:
        scopes = s.scopes
        hit = None
        if scopes is not None and scopes.num_rows:
            match = pc.equal(scopes.column("name"), name)
            if "path" in scopes.column_names:
                match = pc.or_(match, pc.equal(scopes.column("path"), name))
            chosen = scopes.filter(pc.fill_null(match, False))
            if chosen.num_rows:
                hit = int(pc.min(chosen.column("begin_ns")).as_py())
        if hit is None:
            raise ValueError(
                f"--align {align!r}: {s.label} ({s.source}) has no call of the scope {name!r}"
            )
        out.append(hit + s.anchor_ns)
    return out


def align_text(align: str | None) -> str:
    """What time 0 is under ``align`` (:func:`time_origins`), for axis labels and notes."""
    if align is None:
        return "seconds after the first row of all inputs"
    if align == "start":
        return "seconds after each run's first row"
    return f"seconds after each run's first {align[len('scope:') :]!r} scope"
