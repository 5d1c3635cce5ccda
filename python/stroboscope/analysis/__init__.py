"""Pure table math: window aggregates (for senders and the drop-in monitor) and the column
statistics of a recording, and the weights of sampled stacks."""

from __future__ import annotations

from typing import TYPE_CHECKING

from stroboscope._base.lazy import face

# Every name loads on first use: a light module of this room (scope_columns) costs no pyarrow.
_LAZY = {
    "column_stats_text": ".column_stats",
    **{name: ".windows" for name in ("AGGREGATES", "Aggregate", "WindowAggregator", "WindowInfo")},
}

_STACKS = (
    "GROWTH",
    "WEIGHTS",
    "StackWeights",
    "function_table",
    "select_samples",
    "stack_weights",
    "weight_column",
    "weight_source",
    "weight_unit",
)

__all__ = [
    "AGGREGATES",
    "GROWTH",
    "WEIGHTS",
    "Aggregate",
    "StackWeights",
    "WindowAggregator",
    "WindowInfo",
    "column_stats_text",
    "function_table",
    "select_samples",
    "stack_weights",
    "weight_column",
    "weight_source",
    "weight_unit",
]

__getattr__, __dir__ = face(__name__, __all__, {**_LAZY, **{name: ".stacks" for name in _STACKS}})

if TYPE_CHECKING:
    from stroboscope.analysis.column_stats import column_stats_text
    from stroboscope.analysis.stacks import (
        GROWTH,
        WEIGHTS,
        StackWeights,
        function_table,
        select_samples,
        stack_weights,
        weight_column,
        weight_source,
        weight_unit,
    )
    from stroboscope.analysis.windows import AGGREGATES, Aggregate, WindowAggregator, WindowInfo
