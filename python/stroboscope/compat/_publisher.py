"""Windows of a sampler's rows, reduced and handed on one window at a time.

:class:`WindowPublisher` is the one publisher of the package: ``stroboscope record``'s senders
(fed the tables the command drains), :class:`stroboscope.compat.SystemMonitor` (its own thread
drains the ring and publishes every period) and the training callbacks (a window when the
trainer logs) all reduce their rows here, with the one last-value rule of
:mod:`stroboscope.analysis._last_value`.

It lives in ``recording/`` because it composes on a sampler (drains its ring on a schedule) and
may import ``sampling`` and ``analysis`` only: it never sees a sender. What a window becomes is
the ``emit`` callable its owner hands it (a compat key map and a fan-out to the senders, a
prefix for a trainer's logger), so senders stay above, where ``compat`` and ``cli`` build them.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Iterable, Sequence
from typing import Callable, Generic, TypeVar

import pyarrow as pa

from stroboscope._base.checks import check_seconds
from stroboscope._base.ratelimit import RateLimitedLog
from stroboscope.analysis import (
    ColumnLike,
    counter_columns,
    level_columns,
    metric_columns,
)
from stroboscope.analysis.windows import AGGREGATES, Aggregate, WindowAggregator, WindowInfo

T = TypeVar("T")

DRAIN_PERIOD_S = 0.5
"""The publishing thread drains the ring at least this often (seconds), so the ring stays small."""

Emit = Callable[[dict[str, "float | int"], WindowInfo], T]
"""What a closed window becomes: called with its values per column and what it covered."""


class WindowPublisher(Generic[T]):
    """Reduces rows into windows (each column by ``aggregate``, totals and counts by their last
    value) and hands each closed window to ``emit``.

    Parameters
    ----------
    columns : sequence of Column
        The sampler's columns (name, unit, dtype, kind): every one but the time columns is
        reduced, unless ``select`` names which.
    emit : callable
        ``emit(values, info)`` is called with each closed window (its values per column and a
        :class:`~stroboscope.analysis.WindowInfo`); :meth:`publish` returns what it returns.
    every : float, optional
        Seconds between windows, when :meth:`feed` or the thread (:meth:`start`) drive it
        (None: a window closes only when :meth:`publish` is called).
    aggregate : {"mean", "max", "last"}
        How each window reduces a column's rows (counters and counts always give the last).
    select : iterable of str, optional
        Reduce only these columns (default: every column but ``time`` and ``mono_ns``).
    levels : iterable of str
        More columns that publish their last value (beyond the package's rule).
    source : callable, optional
        Returns the rows taken since its previous call, as an Arrow table (``lambda:
        sampler.drain().to_arrow()``): :meth:`publish` and the thread take them.
    drain_every : float, optional
        Seconds between the thread's drains of ``source`` (default: ``every`` or
        :data:`DRAIN_PERIOD_S`, whichever is shorter).
    name : str
        The thread's name.
    logger : logging.Logger, optional
        Where the thread reports a failed window (rate-limited), default ``stroboscope``.
    """

    def __init__(
        self,
        columns: Sequence[ColumnLike],
        emit: Emit[T],
        *,
        every: float | None = None,
        aggregate: Aggregate = "mean",
        select: Iterable[str] | None = None,
        levels: Iterable[str] = (),
        source: Callable[[], pa.Table] | None = None,
        drain_every: float | None = None,
        name: str = "stroboscope-publisher",
        logger: logging.Logger | None = None,
    ) -> None:
        if aggregate not in AGGREGATES:
            raise ValueError(f"aggregate must be one of {', '.join(AGGREGATES)}, got {aggregate!r}")
        self.every = None if every is None else check_seconds("every", every)
        self.aggregate: Aggregate = aggregate
        names = metric_columns(columns) if select is None else list(select)
        self.counters = counter_columns(columns)
        self.levels = list(dict.fromkeys([*level_columns(columns), *levels]))
        self._window = WindowAggregator(names, self.counters, levels=self.levels)
        self._emit = emit
        self._source = source
        if drain_every is None:
            drain_every = DRAIN_PERIOD_S if every is None else min(every, DRAIN_PERIOD_S)
        self._drain_every = drain_every
        self._name = name
        self._errors = RateLimitedLog(logger or logging.getLogger("stroboscope"))
        self._lock = threading.Lock()  # add + reduce + emit: one window at a time
        self._next = time.monotonic() + (self.every or 0.0)
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    # -- driven from outside -----------------------------------------------------------------

    def feed(self, table: pa.Table) -> None:
        """Add rows; close and emit the window when its time has come."""
        with self._lock:
            self._window.add(table)
        if self.every is None:
            return
        now = time.monotonic()
        if now >= self._next:
            self.publish()
            self._next = max(self._next + self.every, now)

    def drain(self) -> None:
        """Move the rows ``source`` has into the window (nothing without a source)."""
        if self._source is not None:
            with self._lock:
                self._window.add(self._source())

    def publish(self) -> T:
        """Close the window now (with the rows ``source`` has) and emit it; return what
        ``emit`` returned."""
        with self._lock:
            if self._source is not None:
                self._window.add(self._source())
            values = self._window.result(self.aggregate)
            info = self._window.info()
            self._window.reset()
            return self._emit(values, info)

    def aggregate_of(self, column: str) -> Aggregate:
        """The aggregate that applies to ``column`` (``"last"`` for totals and counts)."""
        return self._window.aggregate_of(column, self.aggregate)

    # -- its own thread ----------------------------------------------------------------------

    @property
    def running(self) -> bool:
        """Whether the publishing thread runs."""
        return self._thread is not None and self._thread.is_alive()

    def start(self) -> None:
        """Start the thread that drains ``source`` and emits a window every ``every`` seconds
        (a no-op when it runs)."""
        if self.every is None:
            raise ValueError("every: the publishing thread needs seconds between windows")
        if self.running:
            return
        self._stop.clear()
        self._thread = threading.Thread(target=self._run, name=self._name, daemon=True)
        self._thread.start()

    def stop(self) -> None:
        """Stop the thread and wait for it (the window so far stays: :meth:`publish` it)."""
        self._stop.set()
        thread, self._thread = self._thread, None
        if thread is not None and thread is not threading.current_thread():
            thread.join()

    def _run(self) -> None:
        every, drain_every = self.every or DRAIN_PERIOD_S, self._drain_every
        now = time.monotonic()
        next_publish = now + every
        next_drain = now + drain_every
        while not self._stop.wait(max(0.0, min(next_publish, next_drain) - time.monotonic())):
            now = time.monotonic()
            try:
                if now >= next_publish:
                    self.publish()
                    next_publish += every
                    if next_publish <= now:  # fell behind (suspended?): skip, never bunch
                        next_publish = now + every
                else:
                    self.drain()
                next_drain = now + drain_every
            except Exception:
                self._errors(logging.ERROR, "stroboscope: publishing failed", exc_info=True)
