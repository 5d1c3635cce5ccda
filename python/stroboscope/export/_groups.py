"""What the report's pages draw where, in one home for the static page and the zooming one:
which plot each column goes to (CPU, CPU per core, memory, one per GPU, network, disk,
pressure, load, process, other), its panels (one per unit and scale: host memory apart from
the process's, a share of one core apart from a share of all cores), the colour of each scope
name, and the scope lane's rows and calls on a time axis."""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from stroboscope._base.text import fmt_value
from stroboscope.analysis.column_stats import (
    IDENTIFIER,
    TIME_COLUMNS,
    column_kind,
    column_unit,
)
from stroboscope.export._recording import Recording

_NOT_PLOTTED = re.compile(r"\.read_mono_ns$|\.clock_event_reasons$")
"""Columns that are not levels: a reading's time, a bitmask."""

_RULES: list[tuple[str, str, re.Pattern[str]]] = [
    ("cpu-cores", "CPU per core", re.compile(r"^cpu\.\d+\.")),
    (
        "cpu",
        "CPU",
        re.compile(
            r"^cpu\.|^proc(\.tree)?\.cpu_pct$|^threads\.(top\d+\.)?(cpu|wait)_pct$|^cgroup\.cpu_"
        ),
    ),
    ("memory", "Memory", re.compile(r"^mem\.|^proc(\.tree)?\.(rss_bytes|mem_pct)$|^cgroup\.mem_")),
    ("gpu", "GPU", re.compile(r"^gpu\.")),
    ("network", "Network", re.compile(r"^net\.")),
    ("disk", "Disk", re.compile(r"^disk\.|^proc\.(read|write)_bytes$")),
    ("pressure", "Pressure (PSI)", re.compile(r"^psi\.")),
    ("load", "Load", re.compile(r"^load\.")),
    ("process", "Process", re.compile(r"^proc\.|^threads\.")),
]
_GPU_RE = re.compile(r"^gpu\.([^.]+)\.")


@dataclass(frozen=True)
class Group:
    """One plot: a file-safe ``key``, a ``title`` and its panels as ``(label, columns)``."""

    key: str
    title: str
    panels: tuple[tuple[str, tuple[str, ...]], ...]


_SCALES: list[tuple[str, re.Pattern[str]]] = [
    ("of one core", re.compile(r"^proc(\.tree)?\.cpu_pct$|^threads\.(top\d+\.)?(cpu|wait)_pct$")),
    ("of all cores", re.compile(r"^cpu\.[a-z]+_pct$")),
    ("process", re.compile(r"^proc(\.tree)?\.|^threads\.|^gpu\.[^.]+\.proc_")),
    ("cgroup", re.compile(r"^cgroup\.")),
    ("host", re.compile(r"^mem\.")),
]
"""The scale of a column where columns of one unit measure different wholes: a process's
CPU share counts 100 per busy core (0 to 100 x cores), the machine's 100 for all cores; a
process's memory is MiB beside GiB of the host's. Columns of different scales never share a
panel (the first pattern that matches names the scale; none: the unit alone)."""


def column_scale(name: str) -> str:
    """The scale of ``name`` (``of one core``, ``of all cores``, ``process``, ``cgroup``,
    ``host``), or ``""`` for the columns whose unit alone says it."""
    for scale, pattern in _SCALES:
        if pattern.search(name):
            return scale
    return ""


def panel_label(name: str, unit: str, kind: str) -> str:
    """The panel a column is drawn in, as its y-axis label: unit, scale and, for a counter,
    that it is a running total (``% of one core``, ``bytes · process``, ``mJ (total since
    start)``); columns with the same label share a panel."""
    scale = column_scale(name)
    text = unit or ("count" if kind == "counter" else "value")
    if scale.startswith("of "):
        text = f"{text} {scale}"
    elif scale:
        text = f"{text} · {scale}"
    return f"{text} (total since start)" if kind == "counter" else text


_WHOLE = re.compile(r"(^|\.)(mem_)?total_bytes$")
"""Columns that are the whole the other columns of their panel are parts of: the memory
installed (``mem.total_bytes``), a GPU's memory, the filesystem's size."""
WHOLE_LEGEND_COLUMNS = 2
"""Entries per row of the legend of a panel with a whole: their texts are long."""
WHOLE_COLOR = "#555555"
"""The colour of a whole's reference line (dashed), on both pages."""


def whole_of(columns: Sequence[str]) -> str | None:
    """The column of a panel's ``columns`` that is the whole the others are parts of (drawn as
    a dashed reference line, the value axis from 0, every other column said as a share of
    it); None where the panel has no such column or nothing else."""
    wholes = [c for c in columns if _WHOLE.search(c)]
    return wholes[0] if len(wholes) == 1 and len(columns) > 1 else None


def line_label(name: str, lo: float, hi: float, whole: float | None, unit: str) -> str:
    """A line's legend text in a panel with a whole (:func:`whole_of`): the range of its
    readings ``lo`` to ``hi`` and, against the ``whole``'s largest reading, their share:
    ``mem.used_bytes: 580.00 Mi to 612.00 Mi (2.4 to 2.6 % of the total)``; the whole's own
    line (``whole`` None) is said to be the total."""
    unit = unit.split(" ")[0]  # a panel's label: "bytes · host"
    if not (np.isfinite(lo) and np.isfinite(hi)):
        return name
    span = fmt_value(lo, unit) if lo == hi else f"{fmt_value(lo, unit)} to {fmt_value(hi, unit)}"
    if whole is None or not np.isfinite(whole) or whole <= 0:
        return f"{name}: {span} (the total)"
    a, b = 100 * lo / whole, 100 * hi / whole
    share = f"{a:.1f}" if f"{a:.1f}" == f"{b:.1f}" else f"{a:.1f} to {b:.1f}"
    return f"{name}: {span} ({share} % of the total)"


def plot_groups(schema: pa.Schema) -> list[Group]:
    """The plots for the columns of ``schema``, in the order a reader looks for them.

    Counters whose rate is recorded too (``x_bytes`` beside ``x_bytes_per_s``) are left to
    their rate; other counters are drawn as their running total in a panel of their own.
    """
    names = set(schema.names)
    found: dict[tuple[int, str], dict[str, list[str]]] = {}
    titles: dict[tuple[int, str], str] = {}
    for f in schema:
        name = f.name
        if name in TIME_COLUMNS or _NOT_PLOTTED.search(name):
            continue
        if not (pa.types.is_integer(f.type) or pa.types.is_floating(f.type)):
            continue
        kind = column_kind(f)
        if kind == IDENTIFIER or (kind == "counter" and f"{name}_per_s" in names):
            continue  # an identifier is no level (its tables show it); a counter has its rate
        order, key, title = len(_RULES), "other", "Other"
        for i, (k, t, pattern) in enumerate(_RULES):
            if pattern.search(name):
                order, key, title = i, k, t
                break
        if key == "gpu":
            m = _GPU_RE.match(name)
            device = m.group(1) if m else "?"
            key, title = f"gpu-{device}", f"GPU {device}"
        slot = (order, key)
        titles[slot] = title
        panel = panel_label(name, column_unit(f), kind)
        found.setdefault(slot, {}).setdefault(panel, []).append(name)
    return [
        Group(key, titles[(order, key)], tuple((u, tuple(c)) for u, c in panels.items()))
        for (order, key), panels in sorted(
            found.items(), key=lambda kv: (kv[0][0], _natural(kv[0][1]))
        )
    ]


def _natural(text: str) -> tuple[object, ...]:
    """``gpu-10`` after ``gpu-9``."""
    return tuple(int(p) if p.isdigit() else p for p in re.split(r"(\d+)", text))


SCOPE_PALETTE = (
    "#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b", "#e377c2", "#7f7f7f",
    "#bcbd22", "#17becf", "#aec7e8", "#ffbb78", "#98df8a", "#ff9896", "#c5b0d5", "#c49c94",
    "#f7b6d2", "#c7c7c7", "#dbdb8d", "#9edae5",
)  # fmt: skip
"""The colours of scope names (matplotlib's tab10, then tab20's light tones), as ``#rrggbb``."""


def scope_colors(names: Iterable[str]) -> dict[str, str]:
    """The colour of each scope name (``#rrggbb``), the one rule of every page: the names in
    the order given (:func:`scope_names` orders them by their first call), each the next
    colour of :data:`SCOPE_PALETTE`; past its 20 colours they repeat."""
    out: dict[str, str] = {}
    for name in names:
        if name not in out:
            out[name] = SCOPE_PALETTE[len(out) % len(SCOPE_PALETTE)]
    return out


def scope_names(intervals: Iterable[pa.Table | None]) -> list[str]:
    """Every scope name of ``intervals`` (one table per run, None where a run has none), each
    once, in the order of its first call (by ``begin_ns``) in the first run that has it."""
    seen: dict[str, None] = {}
    for table in intervals:
        if table is None or not table.num_rows:
            continue
        order = table.sort_by([("begin_ns", "ascending")]).column("name").to_pylist()
        seen.update(dict.fromkeys(str(n) for n in order))
    return list(seen)


MAX_LANE_ROWS = 32
"""Rows of the scope lane at most (threads x nesting levels); the ones after are left out."""


def lane_rows(series: Sequence[Recording]) -> list[tuple[int, int, int, str]]:
    """The rows of the scope lane: ``(series index, thread id, depth, label)``, one per thread
    (of each run) and nesting level that has a scope call, like a trace viewer's tracks; at
    most :data:`MAX_LANE_ROWS`."""
    rows = []
    for i, s in enumerate(series):
        if s.scopes is None or not s.scopes.num_rows:
            continue
        tids = int_column(s.scopes, "thread_id")
        depths = int_column(s.scopes, "depth")
        pairs = sorted(set(zip(tids.tolist(), depths.tolist())))
        threads = len({t for t, _ in pairs})
        for tid, depth in pairs:
            label = f"{s.label[:12]} " if len(series) > 1 else ""
            label += f"tid {tid} d{depth}" if threads > 1 else f"depth {depth}"
            rows.append((i, tid, depth, label))
    return rows[:MAX_LANE_ROWS]


def scope_calls(
    s: Recording, origin_ns: int
) -> tuple[
    np.ndarray[Any, Any],
    np.ndarray[Any, Any],
    list[str],
    np.ndarray[Any, Any],
    np.ndarray[Any, Any],
]:
    """The scope calls of ``s`` on a plot's time axis: begin and end in seconds after
    ``origin_ns`` (realtime; monotonic times plus the series' anchor; a call still open ends
    at the last row), names, thread ids and depths, in the table's order."""
    assert s.scopes is not None
    last = int(pc.max(s.held.column("mono_ns")).as_py())
    begin = int_column(s.scopes, "begin_ns")
    end = np.asarray(
        pc.fill_null(s.scopes.column("end_ns"), last).to_numpy(zero_copy_only=False), np.int64
    )
    shift = s.anchor_ns - origin_ns  # ints first: realtime ns in float64 lose 256 ns
    x0 = (begin + shift) / 1e9
    x1 = (np.maximum(end, begin) + shift) / 1e9
    names = [str(n) for n in s.scopes.column("name").to_pylist()]
    return x0, x1, names, int_column(s.scopes, "thread_id"), int_column(s.scopes, "depth")


def int_column(table: pa.Table, name: str) -> np.ndarray[Any, Any]:
    if name not in table.column_names:
        return np.zeros(table.num_rows, np.int64)
    return np.asarray(pc.fill_null(table.column(name), 0).to_numpy(zero_copy_only=False), np.int64)
