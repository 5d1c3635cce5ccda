"""Columns of a sampler's frames: name, unit, Arrow type, kind and help."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Column:
    """One column of a sampler's frames: name, unit, Arrow type, kind and a one-line help.

    ``kind`` is ``"gauge"`` (a level: the latest value means something on its own) or
    ``"counter"`` (a running total since the sampler started).
    """

    name: str
    unit: str
    dtype: str
    kind: str
    help: str


TIME_COLUMN = Column(
    "time", "ns", "timestamp[ns, UTC]", "gauge", "UTC time of the tick (monotonic + anchor)."
)
