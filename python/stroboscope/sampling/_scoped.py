"""What a Sampler knows of the scopes its process opened while it ran.

A running Sampler is a recorder of the process-wide scope events log (:mod:`stroboscope._events`):
it notes the log's write counter when it starts and when it stops, and its scope tables cover the
events between. The figures per scope (:meth:`ScopeRecording.summary`), the as-of join of samples
to scopes and the trace export live in :mod:`stroboscope.analysis` and :mod:`stroboscope.export`;
these methods hand them this sampler's two tables (imported on first call, so a Sampler costs
nothing of theirs until asked).
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from typing import TYPE_CHECKING, Callable

import pyarrow as pa

from stroboscope import _core, _events

if TYPE_CHECKING:
    import pandas as pd

    from stroboscope.sampling._frame import Frame


class ScopeRecording:
    """The scope side of :class:`stroboscope.sampling.CoreSampler` (a mixin)."""

    _core: _core.Sampler
    _edge_rows: bool
    _event_windows: list[list[int]]  # [first, last) of the events log per run; last -1: running

    def snapshot(self) -> Frame:
        raise NotImplementedError  # the Sampler's

    def _edge_target(self) -> Callable[[], None] | None:
        return self._core.request_tick if self._edge_rows else None

    def _attach_scopes(self) -> None:
        """Called right after the thread starts: scopes opened from now on are this run's."""
        if self._event_windows and self._event_windows[-1][1] < 0:
            return  # start() of a running sampler
        self._event_windows.append([int(_core.events_written()), -1])
        _events.attach(self, self._edge_target())

    def _detach_scopes(self) -> None:
        """Called when the thread stops."""
        _events.detach(self, self._edge_target())
        if self._event_windows and self._event_windows[-1][1] < 0:
            self._event_windows[-1][1] = int(_core.events_written())

    def scope_events(self) -> pa.Table:
        """The raw scope edges of this sampler's runs still in the events log.

        Columns ``mono_ns``, ``kind`` (1 begin, 2 end), ``thread_id``, ``scope_id``, ``depth``,
        ``labels_id``, ``stack_id``; schema metadata ``events_lost`` counts edges the log
        overwrote before this read (its capacity is ``_core.events_stats()["capacity"]``).
        """
        tables, lost = [], 0
        now = int(_core.events_written())
        for first, last in self._event_windows:
            batch = _core.events_read(first, now if last < 0 else last)
            lost += int(batch.lost)
            tables.append(pa.table(batch))
        if not tables:
            tables.append(pa.table(_core.events_read(now, now)))
        table = pa.concat_tables(tables)
        return table.replace_schema_metadata({b"events_lost": str(lost).encode()})

    def scope_intervals(self) -> pa.Table:
        """One row per scope call of this sampler's runs (name, path, thread, times, labels);
        ``end_ns`` is null for a scope still open."""
        from stroboscope.scopes._intervals import pair_events

        events = self.scope_events()
        table = pair_events(events, list(_core.events_strings()))
        return table.replace_schema_metadata(events.schema.metadata)

    def summary(self, *, by: str | Sequence[str] | None = None) -> pd.DataFrame:
        """Per scope path and labels (or per ``by``: ``"name"``, ``"path"`` and/or label keys,
        see :func:`stroboscope.analysis.scope_summary.summary`): calls, durations (exact, from
        the edges), inclusive and exclusive time, and the metrics sampled while it ran (CPU,
        RSS, GPU, power, energy), each with the number of samples behind it."""
        from stroboscope.analysis.scopes import summary

        return summary(self.snapshot().to_arrow(), self.scope_intervals(), by=by)

    def samples_by_scope(self) -> pa.Table:
        """This sampler's rows with the scope open at each (an as-of join on ``mono_ns``)."""
        from stroboscope.analysis.scopes import samples_by_scope

        return samples_by_scope(self.snapshot().to_arrow(), self.scope_intervals())

    def export_chrome_trace(self, path: str | os.PathLike[str]) -> str:
        """Scopes and metrics as a Chrome Trace Event file (Perfetto, chrome://tracing), on
        torch.profiler's time base; returns the path written."""
        from stroboscope.export.traces import write_chrome_trace

        write_chrome_trace(path, self.snapshot().to_arrow(), self.scope_intervals())
        return os.fspath(path)
