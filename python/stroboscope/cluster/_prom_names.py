"""Prometheus names for a sampler's columns, derived from each column's unit and kind.

One rule, not one line per column: the column's dotted name gives the metric family (scopes
joined by ``_``) and its labels (an index after ``cpu``, ``gpu`` or ``mig`` becomes a label, so
there is one family per measure, not one per core or GPU); its unit gives the base unit of the
name and the factor to it (``%`` → ``_ratio`` 0 to 1, ``mJ`` → ``_joules``, ``MHz`` → ``_hertz``,
``ns`` → ``_seconds``); its kind gives the type (a ``counter`` column is a ``_total`` counter,
every other kind a gauge summarised over the scrape window). ``cpu.3.util_pct`` (%, rate) →
``stroboscope_cpu_core_util_ratio{cpu="3"}``; ``gpu.0.energy_mj`` (mJ, counter) →
``stroboscope_gpu_energy_joules_total{gpu="0", UUID=…}``.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Literal

from stroboscope.cluster._disk import helps_of, mountpoint, usage_prefix

Kind = Literal["gauge", "counter", "bitmask"]


@dataclass(frozen=True)
class Unit:
    """How a column unit maps to Prometheus: the column-name suffix it replaces, the base-unit
    suffix of the metric name ('' for a plain number) and the factor ``mul / div``."""

    strip: str
    suffix: str
    mul: float = 1.0
    div: float = 1.0


UNITS: dict[str, Unit] = {
    "%": Unit("_pct", "ratio", div=100.0),
    "bytes": Unit("_bytes", "bytes"),
    "KiB": Unit("_kib", "bytes", mul=1024.0),
    "MiB": Unit("_mib", "bytes", mul=1024.0**2),
    "bytes/s": Unit("_bytes_per_s", "bytes_per_second"),
    "W": Unit("_w", "watts"),
    "mW": Unit("_mw", "watts", div=1e3),
    "J": Unit("_j", "joules"),
    "mJ": Unit("_mj", "joules", div=1e3),
    "celsius": Unit("_c", "celsius"),
    "Hz": Unit("_hz", "hertz"),
    "MHz": Unit("_mhz", "hertz", mul=1e6),
    "s": Unit("_s", "seconds"),
    "ms": Unit("_ms", "seconds", div=1e3),
    "us": Unit("_us", "seconds", div=1e6),
    "ns": Unit("_ns", "seconds", div=1e9),
    "cores": Unit("_cores", "cores"),
    "count": Unit("", ""),
    "1": Unit("", ""),
    "bitmask": Unit("", ""),
}
"""Column unit → Prometheus base unit. A column whose unit is not here is not served (listed in
:attr:`PrometheusExporter.skipped`, with the reason)."""

# An index after one of these scopes becomes a label; the family takes the infix (so that the
# per-core ``cpu.{i}.util_pct`` and the all-core ``cpu.util_pct`` are two families).
INDEX_LABELS: dict[str, tuple[str, str]] = {
    "cpu": ("cpu", "core"),  # node_exporter's label for a core
    "gpu": ("gpu", ""),  # dcgm-exporter's label for the GPU index
    "mig": ("mig", ""),  # the MIG device's index on its GPU (not DCGM's GPU_I_ID)
}
_RANKED = re.compile(r"^([a-z_]+?)(\d+)$")  # threads.top0 → family "top", label top="0"
_NOT_ALLOWED = re.compile(r"[^a-zA-Z0-9_]")
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


def _clean(part: str) -> str:
    return _NOT_ALLOWED.sub("_", part)


def split_name(column: str) -> tuple[list[str], list[tuple[str, str]]]:
    """The family parts and the index labels of a dotted column name.

    ``cpu.3.util_pct`` → ``(["cpu", "core", "util_pct"], [("cpu", "3")])``;
    ``threads.top1.cpu_pct`` → ``(["threads", "top", "cpu_pct"], [("top", "1")])``.
    """
    parts: list[str] = []
    labels: list[tuple[str, str]] = []
    tokens = column.split(".")
    for i, token in enumerate(tokens):
        if token.isdigit() and i > 0:
            scope = tokens[i - 1]
            label, infix = INDEX_LABELS.get(scope, (_clean(scope), ""))
            labels.append((label, token))
            if infix:
                parts.append(infix)
            continue
        ranked = _RANKED.match(token)
        if ranked is not None and i < len(tokens) - 1:
            parts.append(ranked.group(1))
            labels.append((ranked.group(1), ranked.group(2)))
            continue
        parts.append(_clean(token))
    return parts, labels


def _stem(parts: list[str], unit: Unit) -> str:
    last = parts[-1]
    if unit.strip and last.endswith(unit.strip) and len(last) > len(unit.strip):
        last = last[: -len(unit.strip)]
    elif unit.strip and last == unit.strip.lstrip("_"):
        return "_".join(parts[:-1])
    return "_".join([*parts[:-1], last])


def _join(*pieces: str) -> str:
    return "_".join(p for p in pieces if p)


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
    parts, labels = split_name(column.name)
    stem = _clean(prefix) + _stem(parts, unit)
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
        name=_join(stem, unit.suffix),
        max_name=_join(stem, "max", unit.suffix) if kind == "gauge" else "",
        kind=kind,
        unit=unit.suffix,
        mul=unit.mul,
        div=unit.div,
        labels=tuple(labels),
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
