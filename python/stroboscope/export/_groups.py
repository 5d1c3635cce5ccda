"""Which plot each column goes to: CPU, CPU per core, memory, one per GPU, network, disk,
pressure, load, process, other. Within a plot, one panel per unit."""

from __future__ import annotations

import re
from dataclasses import dataclass

import pyarrow as pa

from stroboscope.analysis.column_stats import IDENTIFIER, TIME_COLUMNS, column_kind, column_unit

_NOT_PLOTTED = re.compile(r"\.read_mono_ns$|\.clock_event_reasons$")
"""Columns that are not levels: a reading's time, a bitmask."""

_RULES: list[tuple[str, str, re.Pattern[str]]] = [
    ("cpu-cores", "CPU per core", re.compile(r"^cpu\.\d+\.")),
    ("cpu", "CPU", re.compile(r"^cpu\.|^proc(\.tree)?\.cpu_pct$|^cgroup\.cpu_")),
    ("memory", "Memory", re.compile(r"^mem\.|^proc(\.tree)?\.(rss_bytes|mem_pct)$|^cgroup\.mem_")),
    ("gpu", "GPU", re.compile(r"^gpu\.")),
    ("network", "Network", re.compile(r"^net\.")),
    ("disk", "Disk", re.compile(r"^disk\.|^proc\.(read|write)_bytes$")),
    ("pressure", "Pressure (PSI)", re.compile(r"^psi\.")),
    ("load", "Load", re.compile(r"^load\.")),
    ("process", "Process", re.compile(r"^proc\.")),
]
_GPU_RE = re.compile(r"^gpu\.([^.]+)\.")


@dataclass(frozen=True)
class Group:
    """One plot: a file-safe ``key``, a ``title`` and its panels as ``(label, columns)``."""

    key: str
    title: str
    panels: tuple[tuple[str, tuple[str, ...]], ...]


def _panel_label(unit: str, kind: str) -> str:
    if kind == "counter":
        return f"{unit or 'count'} (total since start)"
    return unit or "value"


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
        found.setdefault(slot, {}).setdefault(_panel_label(column_unit(f), kind), []).append(name)
    return [
        Group(key, titles[(order, key)], tuple((u, tuple(c)) for u, c in panels.items()))
        for (order, key), panels in sorted(
            found.items(), key=lambda kv: (kv[0][0], _natural(kv[0][1]))
        )
    ]


def _natural(text: str) -> tuple[object, ...]:
    """``gpu-10`` after ``gpu-9``."""
    return tuple(int(p) if p.isdigit() else p for p in re.split(r"(\d+)", text))
