"""What the training-framework callbacks share: a recording of one training run.

:class:`TrainingRecorder` composes the rooms below on behalf of a callback
(:mod:`stroboscope.compat.lightning`, :mod:`stroboscope.compat.transformers`): a
:class:`stroboscope.Sampler` on a crash-safe spool beside the output, scopes opened and closed
by the framework's hooks (through :func:`stroboscope.annotate` when the scopes room is there;
without it the recording goes on unscoped), windows of metrics aggregated since the previous one
for the trainer's logger, and the whole recording written at the end with its provenance, as
``stroboscope record`` writes it. The framework is never imported here.
"""

from __future__ import annotations

import contextlib
import importlib
import os
from typing import Any, Callable, cast

from stroboscope.analysis.windows import AGGREGATES, Aggregate, WindowAggregator
from stroboscope.export.writers import output_format
from stroboscope.recording import finish
from stroboscope.recording.sampler import Sampler
from stroboscope.sampling._checks import check_interval

ScopeFactory = Callable[..., contextlib.AbstractContextManager[Any]]

LAST_VALUE_UNITS = frozenset({"count", "MHz", "bitmask"})
"""Integer columns in these units give a window's last value (a mean of a count, a clock or a
bitmask is a value that never was): the rule of ``stroboscope record``'s publisher
(``cli/_publish.py``; a test keeps the two equal, since compat/ may not import cli/)."""


def scope_factory() -> ScopeFactory | None:
    """``stroboscope.annotate`` when the scopes room is installed, else None."""
    try:  # imported by name: the scopes room may not be part of this build
        scopes = importlib.import_module("stroboscope.scopes")
    except ImportError:
        return None
    return cast(ScopeFactory, scopes.annotate)


class TrainingRecorder:
    """A recording of one training run, driven by a framework's callback hooks.

    Parameters
    ----------
    path : str or os.PathLike, optional
        Where the recording is written when training ends (``.parquet``/``.pq`` or ``.csv``; a
        CSV gets its provenance sidecar). ``None`` keeps nothing on disk: only the windows are
        logged. While training runs the rows are in ``PATH.spool`` (and its segments) beside
        it, so they survive a crash: ``stroboscope recover PATH.spool -o FILE``.
    interval : float
        Sampling interval in seconds (default 0.01).
    prefix : str
        Put before every metric name in a window (default ``"system/"``).
    aggregate : {"mean", "max", "last"}
        How a window reduces each column (counters and counts always give their last value).
    **sampler_options
        Passed to :class:`stroboscope.Sampler` (``sources``, ``pid``, ``gpus``, ``capacity``…).
    """

    def __init__(
        self,
        path: str | os.PathLike[str] | None = "stroboscope.parquet",
        *,
        interval: float = 0.01,
        prefix: str = "system/",
        aggregate: Aggregate = "mean",
        **sampler_options: Any,
    ) -> None:
        if path is not None:
            output_format(path)  # a bad suffix is refused before training starts
        if aggregate not in AGGREGATES:
            raise ValueError(f"aggregate must be one of {AGGREGATES}, got {aggregate!r}")
        if not isinstance(prefix, str):
            raise TypeError(f"prefix must be a str, got {type(prefix).__name__}")
        self.path = None if path is None else os.fspath(path)
        self.interval = check_interval("interval", interval)  # here, not when training starts
        self.prefix = prefix
        self.aggregate: Aggregate = aggregate
        self._options = sampler_options
        self._sampler: Sampler | None = None
        self._spool: str | None = None
        self._window: WindowAggregator | None = None
        self._cursor = 0
        self._finished = False
        self._scopes: list[tuple[str, contextlib.ExitStack]] = []
        self._annotate = scope_factory()
        self.written: str | None = None
        """The path the recording was written to (None until :meth:`finish` wrote it)."""

    @property
    def sampler(self) -> Sampler | None:
        """The sampler of the run (None before :meth:`start`; closed after :meth:`finish`, its
        rows still readable): ``snapshot()``, ``stats()``, ``summary()`` with scopes…"""
        return self._sampler

    @property
    def scoped(self) -> bool:
        """Whether hooks open scopes (the scopes room is installed)."""
        return self._annotate is not None

    def start(self) -> None:
        """Build and start the sampler (a no-op when it runs already)."""
        if self._sampler is not None:
            return
        spool = None if self.path is None else f"{self.path}.spool"
        sampler = Sampler(self.interval, spool=spool, segment_seconds=1.0, **self._options)
        columns = sampler.columns
        names = [c.name for c in columns if c.name not in ("time", "mono_ns")]
        counters = [c.name for c in columns if c.kind == "counter"]
        levels = [c.name for c in columns if c.dtype == "int64" and c.unit in LAST_VALUE_UNITS]
        self._window = WindowAggregator(names, counters, levels=levels)
        self._sampler, self._spool = sampler, spool
        sampler.start()

    def open_scope(self, name: str, **labels: Any) -> None:
        """Open the scope ``name`` (a no-op without the scopes room, or when it is open)."""
        if self._annotate is None or self._sampler is None or self._finished:
            return
        if any(open_name == name for open_name, _ in self._scopes):
            return
        stack = contextlib.ExitStack()
        stack.enter_context(self._annotate(name, **labels))
        self._scopes.append((name, stack))

    def close_scope(self, name: str) -> None:
        """Close the scope ``name`` and any opened after it (scopes nest: last opened, first
        closed). A no-op when it is not open."""
        names = [open_name for open_name, _ in self._scopes]
        if name not in names:
            return
        while self._scopes:
            open_name, stack = self._scopes.pop()
            stack.close()
            if open_name == name:
                return

    def window(self) -> dict[str, float | int]:
        """The metrics since the previous window (each column reduced by ``aggregate``), keyed
        ``prefix + column``; empty before :meth:`start` or when no row was taken since."""
        if self._sampler is None or self._window is None or self._finished:
            return {}
        frame = self._sampler.copy_since(self._cursor)  # moves no cursor: the spool keeps all
        self._cursor = frame.first_row + len(frame)
        self._window.add(frame.to_arrow())
        values = self._window.result(self.aggregate)
        self._window.reset()
        return {f"{self.prefix}{name}": value for name, value in values.items()}

    def finish(self) -> str | None:
        """Close the open scopes, stop the sampler and write the recording (every row, from
        the spool and its segments, with its provenance); return the path written. A second
        call does nothing."""
        while self._scopes:
            self._scopes.pop()[1].close()
        sampler = self._sampler
        if sampler is None or self._finished:
            return self.written
        self._finished = True
        if self.path is None or self._spool is None:
            sampler.close()
            return None
        finish(sampler, self.path)
        self.written = self.path
        return self.path
