"""Which columns a window publishes as their last value, whatever the aggregate asked.

The one home of the rule every window of the package follows (``stroboscope record``'s
senders, :class:`stroboscope.compat.SystemMonitor`, the training callbacks): running totals
(kind ``counter``) and integer columns in :data:`LAST_VALUE_UNITS` give the window's last value,
because a mean of a count (5.99 threads), of a clock or of a bitmask (half a throttle bit) is a
value that never was.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Protocol

LAST_VALUE_UNITS = frozenset({"count", "MHz", "bitmask"})
"""Units of the integer gauges that publish their window's last value (counters always do)."""

TIME_COLUMNS = frozenset({"time", "mono_ns"})
"""The time columns of every frame: a window spans them, it does not reduce them."""


class ColumnLike(Protocol):
    """What the rule reads of a column (:class:`stroboscope.sampling.Column` has it)."""

    @property
    def name(self) -> str: ...
    @property
    def unit(self) -> str: ...
    @property
    def dtype(self) -> str: ...
    @property
    def kind(self) -> str: ...


def counter_columns(columns: Iterable[ColumnLike]) -> list[str]:
    """The running totals among ``columns`` (kind ``counter``), by name."""
    return [c.name for c in columns if c.kind == "counter"]


def level_columns(columns: Iterable[ColumnLike]) -> list[str]:
    """The integer gauges among ``columns`` that publish their last value (an int64 column in
    a unit of :data:`LAST_VALUE_UNITS`), by name."""
    return [c.name for c in columns if c.dtype == "int64" and c.unit in LAST_VALUE_UNITS]


def metric_columns(columns: Iterable[ColumnLike]) -> list[str]:
    """Every column but the time columns, by name: what a window reduces."""
    return [c.name for c in columns if c.name not in TIME_COLUMNS]
