"""Prometheus's name of a column: one rule for every target that serves columns to Prometheus
(the cluster exporter and the Prometheus sender).

The column's dotted name gives the metric family (scopes joined by ``_``) and its labels (an
index after ``cpu``, ``gpu`` or ``mig`` becomes a label, so there is one family per measure, not
one per core or GPU); its unit gives the base unit of the name and the factor to it, as
Prometheus's naming guide asks (``%`` → ``_ratio`` 0 to 1, ``mJ`` → ``_joules``, ``MHz`` →
``_hertz``, ``ns`` → ``_seconds``). ``cpu.3.util_pct`` (%) →
``stroboscope_cpu_core_util_ratio{cpu="3"}``.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

__all__ = ["INDEX_LABELS", "UNITS", "PromName", "Unit", "prom_name", "split_name", "unit_of"]


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
"""Column unit → Prometheus base unit. A column whose unit is not here is not served by the
exporter (listed in
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


def unit_of(column: str) -> str | None:
    """The unit a column's name says by its suffix (``gpu.0.power_w`` → ``"W"``,
    ``cpu.util_pct`` → ``"%"``), the longest suffix of :data:`UNITS` that fits; None when the
    name carries none (``cpu``, ``gpu.0.powerWatts``: keys that are not columns)."""
    last = column.rsplit(".", 1)[-1]
    best: tuple[int, str] | None = None
    for unit, spec in UNITS.items():
        strip = spec.strip
        fits = strip and last.endswith(strip) and len(last) > len(strip)
        if fits and (best is None or len(strip) > best[0]):
            best = (len(strip), unit)
    return None if best is None else best[1]


@dataclass(frozen=True)
class PromName:
    """A column's Prometheus family ``name`` (without the ``_total`` the exposition adds to a
    counter), the family ``max_name`` of its window maximum, its ``labels`` from the column's
    own name and the ``factor`` from the column's unit to the base unit."""

    name: str
    max_name: str
    labels: tuple[tuple[str, str], ...]
    factor: float


def prom_name(column: str, unit: str, prefix: str = "stroboscope_") -> PromName:
    """Prometheus's name of ``column`` in ``unit`` (a key of :data:`UNITS`).

    Raises
    ------
    ValueError
        When ``unit`` is not in :data:`UNITS` (it has no Prometheus base unit here).
    """
    spec = UNITS.get(unit)
    if spec is None:
        raise ValueError(f"unit must be one of {', '.join(map(repr, UNITS))}, got {unit!r}")
    parts, labels = split_name(column)
    stem = _clean(prefix) + _stem(parts, spec)
    return PromName(
        name=_join(stem, spec.suffix),
        max_name=_join(stem, "max", spec.suffix),
        labels=tuple(labels),
        factor=spec.mul / spec.div,
    )
