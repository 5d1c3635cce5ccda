"""Pure table math on recorded tables: series, scope intervals (one schema), samples by scope,
the scope summary, energy (one model), window reduction (one reducer), attribution, column
statistics, the data of a trace, and the weights of sampled stacks. Not here: reading or
writing files (formats), drawing or text for a person (export, and :mod:`stroboscope._base.text`
for units), the extension.
"""

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
    "F64",
    "GROWTH",
    "I64",
    "WEIGHTS",
    "Aggregate",
    "ColumnLike",
    "StackWeights",
    "WindowAggregator",
    "WindowInfo",
    "cells",
    "column_stats_text",
    "counter_columns",
    "function_table",
    "gpu_columns",
    "gpu_labels",
    "int64_cells",
    "level_columns",
    "metric_columns",
    "read_times",
    "select_samples",
    "stack_weights",
    "weight_column",
    "weight_source",
    "weight_unit",
]

_DOORS = {  # what the rooms above use
    "ColumnLike": "._last_value",
    "F64": "._series",
    "I64": "._series",
    "cells": "._series",
    "counter_columns": "._last_value",
    "gpu_columns": "._series",
    "gpu_labels": "._series",
    "int64_cells": "._series",
    "level_columns": "._last_value",
    "metric_columns": "._last_value",
    "read_times": "._series",
}

__getattr__, __dir__ = face(
    __name__, __all__, {**_LAZY, **_DOORS, **{name: ".stacks" for name in _STACKS}}
)

if TYPE_CHECKING:
    from stroboscope.analysis._last_value import (
        ColumnLike,
        counter_columns,
        level_columns,
        metric_columns,
    )
    from stroboscope.analysis._series import (
        F64,
        I64,
        cells,
        gpu_columns,
        gpu_labels,
        int64_cells,
        read_times,
    )
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
