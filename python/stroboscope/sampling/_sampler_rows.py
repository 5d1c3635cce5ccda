"""The rows side of :class:`stroboscope.sampling.CoreSampler` (a part, :class:`RingReader`): ticks
taken on the caller's thread, an extra row asked for now, the copies out of the ring (snapshot,
drain, from a row on), the sampler's measurement of itself, and what describes its frames
(schema, columns, interval, pid, the ring's file).

The sampler builds the ring and runs the thread (:mod:`stroboscope.sampling._sampler`); this is
how the rows it writes come out.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import pyarrow as pa

import stroboscope._core as _core
from stroboscope._base.checks import check_int
from stroboscope.sampling._checks import check_row_index
from stroboscope.sampling._frame import Frame
from stroboscope.sampling._schema import TIME_COLUMN, Column
from stroboscope.sampling._stats import SamplerStats


class RingReader:
    """The rows side of one sampler, a part of :class:`stroboscope.sampling.CoreSampler`: the
    copies out of its ring, ticks taken on the caller's thread, the sampler's measurement of
    itself and what describes its frames.

    The copies are the ring's rows as the core gives them (``_core.Frame``); the sampler makes
    them frames with its run's provenance.

    Parameters
    ----------
    core : _core.Sampler
        The ring and the thread that fills it.
    interval : float
        Base interval (s).
    pid : int
        The sampled process.
    details : mapping
        What ``_core.source_details`` said of each source (for :class:`SamplerStats`).
    ring_file : str or None
        The file the ring lives in.
    """

    def __init__(
        self,
        core: _core.Sampler,
        *,
        interval: float,
        pid: int,
        details: Mapping[str, Mapping[str, Any]],
        ring_file: str | None,
    ) -> None:
        self._core = core
        self._interval = interval
        self._pid = pid
        self._details = details
        self._ring_file = ring_file
        self._columns = [TIME_COLUMN] + [Column(**c) for c in core.columns()]
        self._schema = pa.schema(Frame(core.snapshot()))  # exactly what frames carry

    def tick(self, n: int) -> int:
        """Take ``n`` ticks at once on the calling thread (see :meth:`CoreSampler.tick_now`);
        returns the number of rows written. RuntimeError while the thread runs."""
        check_int("n", n, 1, 1 << 30, unit="ticks")
        if self._core.running:
            raise RuntimeError("tick_now() needs a stopped Sampler: stop() it first")
        before = int(self._core.stats()["rows_written"])
        self._core.run_ticks_inline(n)
        return int(self._core.stats()["rows_written"]) - before

    def request_tick(self) -> None:
        """Ask the thread for one extra row now (lock-free; a no-op while not running)."""
        self._core.request_tick()

    def snapshot(self) -> _core.Frame:
        """A consistent copy of every row still in the ring (the rows are kept)."""
        return self._core.snapshot()

    def drain(self) -> _core.Frame:
        """The rows written since the previous drain (or since the start)."""
        return self._core.drain()

    def copy_since(self, first_row: int) -> _core.Frame:
        """The rows with index ``>= first_row`` still in the ring (moves no cursor)."""
        return self._core.copy_since(check_row_index("first_row", first_row))

    def stats(self, **extra: Any) -> SamplerStats:
        """The sampler's measurement of itself, with ``extra`` fields (see
        :meth:`SamplerStats.from_core`); ``interval_s`` and ``pid`` are this reader's."""
        return SamplerStats.from_core(
            self._core.stats(), self._details, interval_s=self._interval, pid=self._pid, **extra
        )

    @property
    def schema(self) -> pa.Schema:
        """The Arrow schema of the frames (``unit``/``kind`` in field metadata)."""
        return self._schema

    @property
    def columns(self) -> list[Column]:
        """The columns of the frames, with units, kinds and help (a new list)."""
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
