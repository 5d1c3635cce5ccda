"""Prometheus series for a sampler's columns, derived from each column's unit and kind.

One rule, not one line per column: the name and labels are
:func:`stroboscope.analysis.prom_names.prom_name`'s (the one naming the Prometheus sender uses
too: the column's dotted name gives the family and its labels, its unit the base unit and the
factor to it, ``%`` → ``_ratio`` 0 to 1, ``mJ`` → ``_joules``); its kind gives the type (a
``counter`` column is a ``_total`` counter, every other kind a gauge summarised over the scrape
window). ``cpu.3.util_pct`` (%, rate) → ``stroboscope_cpu_core_util_ratio{cpu="3"}``;
``gpu.0.energy_mj`` (mJ, counter) → ``stroboscope_gpu_energy_joules_total{gpu="0", UUID=…}``.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Literal

from stroboscope.analysis.prom_names import UNITS, Unit, prom_name, split_name
from stroboscope.cluster._disk import helps_of, mountpoint, usage_prefix

__all__ = ["UNITS", "ColumnInfo", "PromSeries", "Unit", "plan_series", "series_for", "split_name"]

Kind = Literal["gauge", "counter", "bitmask"]


_SKIP_UNITS = {"id": "an identifier (such as a thread id) is not a measure"}


@dataclass(frozen=True)
class PromSeries:
    """One column served as one Prometheus series.

    ``name`` is the family of the window's mean (gauges), latest total (counters, without the
    ``_total`` that the exposition adds) or bitwise OR (bitmasks); ``max_name`` the family of a
    gauge's window maximum. ``labels`` are the labels the column's own name gives (``gpu``,
    ``cpu``, ...), before identity and GPU labels are added.
    """

    column: str
    name: str
    max_name: str
    kind: Kind
    unit: str
    mul: float
    div: float
    labels: tuple[tuple[str, str], ...]
    help: str

    def scaled(self, value: float) -> float:
        """``value`` in the column's unit → the metric's base unit."""
        return value * self.mul / self.div


@dataclass(frozen=True)
class ColumnInfo:
    """What the mapping needs of a column (a :class:`stroboscope.sampling.Column` fits)."""

    name: str
    unit: str
    kind: str
    help: str


def why_not_served(column: ColumnInfo) -> str | None:
    """Why a column is not served, or None when it is."""
    if column.name in ("time", "mono_ns") or column.name.endswith("mono_ns"):
        return "a clock reading (when a value was taken), not a measure"
    if column.unit in _SKIP_UNITS:
        return _SKIP_UNITS[column.unit]
    if column.unit not in UNITS:
        return f"unit {column.unit!r} has no Prometheus base unit in stroboscope's table"
    if column.kind not in ("gauge", "counter", "rate"):
        return f"kind {column.kind!r} is neither gauge, counter nor rate"
    return None


def series_for(column: ColumnInfo, prefix: str = "stroboscope_") -> PromSeries | None:
    """The series of one column, or None when it is not served (see :func:`why_not_served`)."""
    if why_not_served(column) is not None:
        return None
    unit = UNITS[column.unit]
    named = prom_name(column.name, column.unit, prefix)
    kind: Kind = (
        "counter"
        if column.kind == "counter"
        else ("bitmask" if column.unit == "bitmask" else "gauge")
    )
    generic = ".".join("{i}" if t.isdigit() else t for t in column.name.split("."))
    factor = ""
    if unit.mul != 1.0 or unit.div != 1.0:
        factor = f", {column.unit} converted to {unit.suffix}"
    what = {
        "counter": "Running total since the sampler's first reading",
        "bitmask": "Bitwise OR of the values in the scrape window",
        "gauge": "Mean over the scrape window",
    }[kind]
    help_text = f"{column.help} ({what}; column {generic}{factor}.)"
    return PromSeries(
        column=column.name,
        name=named.name,
        max_name=named.max_name if kind == "gauge" else "",
        kind=kind,
        unit=unit.suffix,
        mul=unit.mul,
        div=unit.div,
        labels=named.labels,
        help=help_text,
    )


def plan_series(
    columns: Iterable[ColumnInfo], prefix: str = "stroboscope_"
) -> tuple[list[PromSeries], dict[str, str]]:
    """PromSeries for every column that maps, and ``{column: why not}`` for those that do not.

    Two columns that would give the same family and labels (or a family name another family's
    ``max`` takes) keep the first; the second is listed with the reason.
    """
    served: list[PromSeries] = []
    skipped: dict[str, str] = {}
    owner: dict[tuple[str, tuple[tuple[str, str], ...]], str] = {}
    families: dict[str, tuple[str, frozenset[str]]] = {}  # name → (role, label names)
    columns = list(columns)
    helps = helps_of((c.name, c.help) for c in columns)
    for column in columns:
        reason = why_not_served(column)
        series = None if reason is not None else _series_with_mount(column, prefix, helps)
        if series is None:
            skipped[column.name] = reason or "not mapped"
            continue
        clash = _clash(series, owner, families)
        if clash:
            skipped[column.name] = clash
            continue
        names = {label for label, _ in series.labels}
        owner[(series.name, series.labels)] = series.column
        families[series.name] = ("value", frozenset(names))
        if series.max_name:
            families[series.max_name] = ("max", frozenset(names))
        served.append(series)
    return served, skipped


def _series_with_mount(
    column: ColumnInfo, prefix: str, helps: Mapping[str, str]
) -> PromSeries | None:
    """:func:`series_for`, with a disk usage column's path as a ``mountpoint`` label (as
    node_exporter's filesystem series) and not in the family's name."""
    disk = usage_prefix(column.name)
    if disk is None:
        return series_for(column, prefix)
    plain = dataclasses.replace(column, name=f"disk.{disk[1]}")
    series = series_for(plain, prefix)
    if series is None:
        return None
    mount = ("mountpoint", mountpoint(helps, disk[0]))
    return dataclasses.replace(series, column=column.name, labels=(*series.labels, mount))


def _clash(
    series: PromSeries,
    owner: Mapping[tuple[str, tuple[tuple[str, str], ...]], str],
    families: Mapping[str, tuple[str, frozenset[str]]],
) -> str | None:
    first = owner.get((series.name, series.labels))
    if first is not None:
        return f"maps to {series.name} with the same labels as column {first}"
    names = frozenset(label for label, _ in series.labels)
    for name, role in ((series.name, "value"), (series.max_name, "max")):
        if name and name in families and families[name] != (role, names):
            return f"family {name} is already another measure's"
    return None


def family_names(series: Sequence[PromSeries]) -> list[str]:
    """Every family name the series give, in order, each once (``_total`` added to counters)."""
    out: dict[str, None] = {}
    for s in series:
        out[s.name + ("_total" if s.kind == "counter" else "")] = None
        if s.max_name:
            out[s.max_name] = None
    return list(out)
