"""Reading frames: window aggregates (for senders and the drop-in monitor) and summaries."""

from __future__ import annotations

from stroboscope.analysis.summary import summarize
from stroboscope.analysis.windows import AGGREGATES, Aggregate, WindowAggregator, WindowInfo

__all__ = ["AGGREGATES", "Aggregate", "WindowAggregator", "WindowInfo", "summarize"]
