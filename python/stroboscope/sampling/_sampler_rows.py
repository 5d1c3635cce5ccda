"""The rows side of :class:`stroboscope.sampling.CoreSampler` (a mixin): ticks taken on the
caller's thread, an extra row asked for now, the copies out of the ring (snapshot, drain, from a
row on), the sampler's measurement of itself, and what describes its frames (schema, columns,
interval, pid, the ring's file).

The sampler builds the ring and runs the thread (:mod:`stroboscope.sampling._sampler`); this is
how the rows it writes come out.
"""

from __future__ import annotations

import threading
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

import pyarrow as pa

import stroboscope._core as _core
from stroboscope._base.checks import check_int
from stroboscope.sampling._checks import check_row_index
from stroboscope.sampling._frame import Frame
from stroboscope.sampling._plan import available_sources
from stroboscope.sampling._schema import Column
from stroboscope.sampling._stats import SamplerStats

_CoreRows = _core.Frame  # (in the class, "_core" names the sampler's attribute)


class SamplerRows:
    """The rows side of :class:`stroboscope.sampling.CoreSampler` (a mixin)."""

    _core: _core.Sampler
    _lock: threading.Lock
    _closed: bool
    _interval: float
    _pid: int
    _details: Mapping[str, Mapping[str, Any]]
    _schema: pa.Schema
    _columns: list[Column]
    _ring_file: str | None

    if TYPE_CHECKING:  # the provenance side's (RunRecord); a stub here would shadow it

        def _frame(self, rows: _CoreRows) -> Frame: ...

    def tick_now(self, n: int = 1) -> int:
        """Take ``n`` ticks at once on the calling thread, while the sampler is stopped.

        Each tick reads every source due on it, exactly as the sampler thread would, and writes
        one row (the tick counter advances, so per-source intervals hold). A deterministic way to
        produce rows for tests and tools, with no sleeping and no thread. Returns the number of
        rows written.

        Raises
        ------
        RuntimeError
            When the sampler is running or closed.
        """
        check_int("n", n, 1, 1 << 30, unit="ticks")
        with self._lock:
            if self._closed:
                raise RuntimeError("tick_now() on a closed Sampler")
            if self._core.running:
                raise RuntimeError("tick_now() needs a stopped Sampler: stop() it first")
            before = int(self._core.stats()["rows_written"])
            self._core.run_ticks_inline(n)
            return int(self._core.stats()["rows_written"]) - before

    def request_tick(self) -> None:
        """Ask for one extra row now (an "edge row", e.g. at a scope's begin or end).

        Lock-free and cheap (no Python lock, no GIL release); a no-op while not running. The
        regular deadlines are unchanged; requests made before the row starts share it (counted in
        ``stats().tick_requests``; the rows in ``ticks_requested``). Sources read every n > 1
        ticks appear on an edge row only when due on the next regular tick, which then skips them.
        """
        self._core.request_tick()

    def snapshot(self) -> Frame:
        """A consistent copy of every row still in the ring (the rows are kept)."""
        return self._frame(self._core.snapshot())

    def drain(self) -> Frame:
        """The rows written since the previous drain (or since the start)."""
        return self._frame(self._core.drain())

    def copy_since(self, first_row: int) -> Frame:
        """The rows with index ``>= first_row`` still in the ring, for a consumer that keeps its
        own cursor (moves no cursor; rows already overwritten are counted in ``rows_lost``)."""
        return self._frame(self._core.copy_since(check_row_index("first_row", first_row)))

    def stats(self) -> SamplerStats:
        """The sampler's measurement of itself (see :class:`SamplerStats`)."""
        return SamplerStats.from_core(self._core.stats(), self._details, **self._extra_stats())

    def _extra_stats(self) -> dict[str, Any]:
        return {"interval_s": self._interval, "pid": self._pid}

    @property
    def schema(self) -> pa.Schema:
        """The Arrow schema of this sampler's frames (``unit``/``kind`` in field metadata)."""
        return self._schema

    @property
    def columns(self) -> list[Column]:
        """The columns of this sampler's frames, with units, kinds and help."""
        return list(self._columns)

    @property
    def ring_file(self) -> str | None:
        """The file the ring lives in, when it lives in one."""
        return self._ring_file

    @property
    def interval(self) -> float:
        """Base sampling interval in seconds."""
        return self._interval

    @property
    def pid(self) -> int:
        """The monitored process id."""
        return self._pid

    @staticmethod
    def available_sources() -> list[dict[str, Any]]:
        """Every source: name, help, whether it is on by default and whether it works here."""
        return available_sources()
