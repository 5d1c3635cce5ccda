"""The export window: the rows a sampler wrote since the previous collection, summarised.

At each collection the OpenTelemetry SDK calls every observable instrument's callback once, in
turn. The first callback of a collection (:meth:`Window.points_for` notices it: an instrument
that was already served in the current window asks again) copies the new rows with
``sampler.copy_since(cursor)`` and reduces each column once with the one window reducer
(:func:`stroboscope.analysis.windows.window_stats`: count, mean, max, last valid value); every
callback then reads its points from that summary. So one
collection is one window, whatever the number of instruments, and nothing is read per sample
in Python.
"""

from __future__ import annotations

import math
import threading
from collections.abc import Iterable

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from stroboscope.analysis.windows import Stats, window_stats
from stroboscope.cluster._otel_names import Metric, Point
from stroboscope.sampling import CoreSampler as Sampler
from stroboscope.sampling import Frame


class Window:
    """The exporter's cursor into a sampler's rows and the summary of the current window.

    Counters (``stat="total"``) keep their last total across windows in which their column
    had no valid cell, so a cumulative counter never disappears or goes back. The CPU seconds
    of ``process.cpu.time`` are the integral of a CPU % column over the rows read: each valid
    value times the time since the previous valid value (the window over which the core
    computed that rate), summed from the exporter's start. The first valid value covers the
    time since the sampler's first row when the exporter read that row, else it only starts
    the integral (the reading before it is not known).
    """

    def __init__(self, sampler: Sampler, metrics: Iterable[Metric]) -> None:
        self._sampler = sampler
        self._metrics = list(metrics)
        wanted: set[str] = set()
        self._cpu_columns: set[str] = set()
        for metric in self._metrics:
            for p in metric.points:
                wanted.add(p.column)
                if p.minus:
                    wanted.add(p.minus)
                if p.stat == "cpu_seconds":
                    self._cpu_columns.add(p.column)
        self._wanted = sorted(wanted)
        self._lock = threading.Lock()
        self._cursor = 0
        self._served: set[str] = set()
        self._summary: dict[str, Stats] = {}
        self._totals: dict[str, float] = {}
        self._cpu_seconds: dict[str, float] = {}
        self._cpu_last_ns: dict[str, int] = {}
        self.windows = 0
        self.rows = 0
        self.rows_lost = 0
        self.closed = False

    @property
    def cursor(self) -> int:
        """Index of the next row the exporter will read (rows before it were summarised)."""
        return self._cursor

    def refresh(self) -> Frame:
        """Start a new window: read the rows since the cursor and summarise them."""
        frame = self._sampler.copy_since(self._cursor)
        table = frame.to_arrow()
        n = table.num_rows
        self.rows_lost += frame.rows_lost
        self._cursor = frame.first_row + n if n else max(self._cursor, frame.first_row)
        self._summary = window_stats(table, self._wanted)
        for name, s in self._summary.items():
            self._totals[name] = s.last
        for name in self._cpu_columns:
            self._integrate(table, name, frame.first_row)
        self.windows += 1
        self.rows += n
        self._served = set()
        return frame

    def _integrate(self, table: pa.Table, name: str, first_row: int) -> None:
        if name not in table.column_names or "mono_ns" not in table.column_names:
            return
        valid = table.filter(pc.is_valid(table.column(name)))
        if valid.num_rows == 0:
            return
        pct = np.asarray(valid.column(name).to_numpy(zero_copy_only=False), dtype=np.float64)
        mono = np.asarray(valid.column("mono_ns").to_numpy(), dtype=np.int64)
        before = self._cpu_last_ns.get(name)
        if before is None and first_row == 0:
            # The sampler's first row is where the source read first (with a null: no rate
            # yet), so the first value's rate covers the time since that row.
            before = int(table.column("mono_ns")[0].as_py())
        starts = np.concatenate(([before if before is not None else mono[0]], mono[:-1]))
        seconds = float(np.sum(pct * (mono - starts)) / 1e9)  # % x s; scaled by the Point
        self._cpu_seconds[name] = self._cpu_seconds.get(name, 0.0) + seconds
        self._cpu_last_ns[name] = int(mono[-1])

    def points_for(self, metric: Metric) -> list[tuple[float, dict[str, str | int]]]:
        """The (value, attributes) of ``metric`` for the current window, opening a new window
        when ``metric`` was already served in this one (the start of the next collection)."""
        with self._lock:
            if self.closed:
                return []
            if metric.name in self._served or self.windows == 0:
                self.refresh()
            self._served.add(metric.name)
            out = []
            for point in metric.points:
                value = self._value(point)
                if value is not None and math.isfinite(value):
                    out.append((value * point.scale, dict(point.attributes)))
            return out

    def _value(self, point: Point) -> float | None:
        if point.stat == "total":
            return self._totals.get(point.column)
        if point.stat == "cpu_seconds":
            return (
                self._cpu_seconds.get(point.column) if point.column in self._cpu_last_ns else None
            )
        s = self._summary.get(point.column)
        if s is None:
            return None
        value = {"mean": s.mean, "max": s.maximum, "last": s.last}[point.stat]
        if point.minus is not None:
            other = self._summary.get(point.minus)
            if other is None:
                return None
            value -= {"mean": other.mean, "max": other.maximum, "last": other.last}[point.stat]
        return value
