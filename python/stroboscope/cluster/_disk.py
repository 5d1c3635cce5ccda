"""Which filesystem a ``disk`` usage column measures, for both exporters.

The ``disk`` source names its columns ``disk.used_pct`` / ``free_bytes`` / ``total_bytes`` for
its first path and ``disk.NAME.*`` for the others; the path itself is in the help text of the
size columns ("... the filesystem holding /data."). Exporters serve one family per measure with
the path as a label (node_exporter's ``mountpoint``, OpenTelemetry's
``system.filesystem.mountpoint``), never the path in the metric's name.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping

USAGE = re.compile(r"^disk\.(?:(\w+)\.)?(used_pct|free_bytes|total_bytes)$")
"""A disk usage column: group 1 the extra path's name (None for the first path), group 2 what."""

_HOLDING = re.compile(r"holding (.+)\.$")


def usage_prefix(column: str) -> tuple[str, str] | None:
    """``(prefix, what)`` of a disk usage column (``("disk.tmp.", "used_pct")``), else None."""
    found = USAGE.match(column)
    if found is None:
        return None
    return (f"disk.{found.group(1)}." if found.group(1) else "disk."), found.group(2)


def mountpoint(helps: Mapping[str, str], prefix: str) -> str:
    """The path a disk column group measures, from its size columns' help text (``helps``:
    column name -> help); ``/`` when it cannot be told."""
    text = helps.get(f"{prefix}total_bytes") or helps.get(f"{prefix}free_bytes") or ""
    found = _HOLDING.search(text)
    return found.group(1) if found else "/"


def helps_of(columns: Iterable[tuple[str, str]]) -> dict[str, str]:
    """``{name: help}`` of the disk usage columns among ``(name, help)`` pairs."""
    return {name: text for name, text in columns if USAGE.match(name)}
