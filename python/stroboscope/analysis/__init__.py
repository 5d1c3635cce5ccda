"""Pure table math: window aggregates (for senders and the drop-in monitor) and the column
statistics of a recording."""

from __future__ import annotations

from stroboscope._base.lazy import face
from stroboscope.analysis.column_stats import column_stats_text
from stroboscope.analysis.windows import AGGREGATES, Aggregate, WindowAggregator, WindowInfo

__all__ = ["AGGREGATES", "Aggregate", "WindowAggregator", "WindowInfo", "column_stats_text"]

__getattr__, __dir__ = face(__name__, __all__)
