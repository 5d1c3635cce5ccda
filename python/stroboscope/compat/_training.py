"""A recording of one training run, driven by a framework's callback hooks: what the callbacks
(:mod:`stroboscope.compat.lightning`, :mod:`stroboscope.compat.transformers`) share.

:class:`TrainingRecording` is the machinery: a :class:`stroboscope.Sampler` on a crash-safe spool
beside the output, scopes opened and closed by the hooks through the factory it is handed, and
windows of metrics since the previous one for the trainer's logger (the package's window
publisher, :mod:`._publisher`). :class:`TrainingRecorder` names the output, hands it
:func:`stroboscope.annotate` and writes the whole recording at the end with its provenance, as
``stroboscope record`` writes it. The framework is never imported here.
"""

from __future__ import annotations

import contextlib
import os
from typing import Any, Callable

import pyarrow as pa

from stroboscope.analysis.windows import AGGREGATES, Aggregate, WindowInfo
from stroboscope.compat._publisher import WindowPublisher
from stroboscope.formats.writers import output_format
from stroboscope.recording import Sampler, finish, prepare
from stroboscope.sampling import check_interval
from stroboscope.scopes import annotate

ScopeFactory = Callable[..., contextlib.AbstractContextManager[Any]]
"""``factory(name, **labels)`` -> a context manager that holds the scope open."""


class TrainingRecording:
    """A sampler started on the first hook, scopes opened by name, windows taken on demand.

    Parameters
    ----------
    spool : str, optional
        Where the sampler keeps every row while training runs (its segments beside it), so the
        rows survive a crash; None keeps no rows on disk.
    interval : float
        Sampling interval in seconds (default 0.01).
    prefix : str
        Put before every metric name in a window (default ``"system/"``).
    aggregate : {"mean", "max", "last"}
        How a window reduces each column (counters and counts always give their last value).
    scope : callable, optional
        ``scope(name, **labels)``: the context manager of a scope (None: no scopes).
    **sampler_options
        Passed to :class:`stroboscope.Sampler` (``sources``, ``pid``, ``gpus``, ``capacity``…).
    """

    def __init__(
        self,
        spool: str | None = None,
        *,
        interval: float = 0.01,
        prefix: str = "system/",
        aggregate: Aggregate = "mean",
        scope: ScopeFactory | None = None,
        **sampler_options: Any,
    ) -> None:
        if aggregate not in AGGREGATES:
            raise ValueError(f"aggregate must be one of {AGGREGATES}, got {aggregate!r}")
        if not isinstance(prefix, str):
            raise TypeError(f"prefix must be a str, got {type(prefix).__name__}")
        self.interval = check_interval("interval", interval)  # here, not when training starts
        self.prefix = prefix
        self.aggregate: Aggregate = aggregate
        self._options = sampler_options
        self._sampler: Sampler | None = None
        self._spool = spool
        self._windows: WindowPublisher[dict[str, float | int]] | None = None
        self._cursor = 0
        self._finished = False
        self._scopes: list[tuple[str, contextlib.ExitStack]] = []
        self._annotate = scope

    @property
    def sampler(self) -> Sampler | None:
        """The sampler of the run (None before :meth:`start`; closed after :meth:`close`, its
        rows still readable): ``snapshot()``, ``stats()``, ``summary()`` with scopes…"""
        return self._sampler

    @property
    def scoped(self) -> bool:
        """Whether hooks open scopes (a scope factory was given)."""
        return self._annotate is not None

    def start(self) -> None:
        """Build and start the sampler (a no-op when it runs already)."""
        if self._sampler is not None:
            return
        sampler = Sampler(self.interval, spool=self._spool, segment_seconds=1.0, **self._options)
        if self._spool is not None:
            # Its end is finish()'s: segments as pieces of the output's file from the first one,
            # the rows since the last one left in the ring, so no row is written twice.
            prepare(sampler)
        self._windows = WindowPublisher(
            sampler.columns, self._prefixed, aggregate=self.aggregate, source=self._rows_since
        )
        self._sampler = sampler
        sampler.start()

    def open_scope(self, name: str, **labels: Any) -> None:
        """Open the scope ``name`` (a no-op without a scope factory, or when it is open)."""
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
        if self._sampler is None or self._windows is None or self._finished:
            return {}
        return self._windows.publish()

    def _rows_since(self) -> pa.Table:
        assert self._sampler is not None
        frame = self._sampler.copy_since(self._cursor)  # moves no cursor: the spool keeps all
        self._cursor = frame.first_row + len(frame)
        table: pa.Table = frame.to_arrow()
        return table

    def _prefixed(self, values: dict[str, float | int], info: WindowInfo) -> dict[str, float | int]:
        return {f"{self.prefix}{name}": value for name, value in values.items()}

    def close(self) -> Sampler | None:
        """Close the open scopes and stop the sampler; return it the first time (its rows
        still readable), None before :meth:`start` and on a second call."""
        while self._scopes:
            self._scopes.pop()[1].close()
        sampler = self._sampler
        if sampler is None or self._finished:
            return None
        self._finished = True
        sampler.close()
        return sampler


class TrainingRecorder(TrainingRecording):
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
        super().__init__(
            None if path is None else f"{os.fspath(path)}.spool",
            interval=interval,
            prefix=prefix,
            aggregate=aggregate,
            scope=annotate,
            **sampler_options,
        )
        self.path = None if path is None else os.fspath(path)
        self.written: str | None = None
        """The path the recording was written to (None until :meth:`finish` wrote it)."""

    def finish(self) -> str | None:
        """Close the open scopes, stop the sampler and write the recording (every row, from
        the spool and its segments, with its provenance); return the path written. A second
        call does nothing."""
        sampler = self.close()
        if sampler is None:
            return self.written
        if self.path is None or self._spool is None:
            return None
        finish(sampler, self.path)
        self.written = self.path
        return self.path
