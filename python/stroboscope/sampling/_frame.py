"""Frames: the rows of one snapshot, drain or recovery, readable by any Arrow consumer.

One type for every source of rows: a frame holds either the buffers the C++ core copied out of
the ring (read in place through the Arrow C data interface) or a :class:`pyarrow.Table` (rows
recovered from a spool, driver-resolution GPU samples). Both have the same conversions, the same
Arrow PyCapsule interface and ``rows_lost``. A frame never changes once made.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from types import MappingProxyType
from typing import TYPE_CHECKING, Any, Literal, Union

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from stroboscope._base.extras import require
from stroboscope.formats.provenance import PROVENANCE_KEY
from stroboscope.sampling._provenance import RunFacts, attach, for_table, from_schema

if TYPE_CHECKING:
    import pandas

    import stroboscope._core as _core

    _Rows = Union[_core.Frame, pa.Table]
Fill = Literal["forward"] | None


def _core_frame() -> type:
    """The core's frame type, imported only for a frame of the core's buffers: a frame of a
    table (rows recovered from a spool) loads no extension."""
    import stroboscope._core as _core

    return _core.Frame


def forward_filled(
    table: pa.Table,
    within_ns: Mapping[str, int] | None = None,
    failed_reads: Sequence[_core.FailedReads] = (),
) -> pa.Table:
    """``table`` with each numeric column's nulls replaced by the last value before them.

    ``within_ns`` (column -> ns) limits the fill of a column to rows less than that long after
    its last value (by ``mono_ns``): the rows in which its source was not due. Columns it does
    not name are filled without a limit.

    ``failed_reads`` (``_core.Frame.failed_reads``: per source, its columns as
    ``(name, window_ns)``, the ``mono_ns`` of each of its reads that failed after one that did
    not, and whether that log is complete) tells which nulls follow a failed read. For a column
    whose source it names, a value is carried on to the column's next value however late that
    comes (missed ticks delay a read past its period), except from a failed read of its source
    on, and, for a column without a window, except past the limit once its source was read again
    without a value for it (the reading said "none", as ``threads.top3.tid`` when fewer threads
    ran). For other columns a null past the limit is taken for a failed read (or a process that
    exited) and stays null.
    """
    limits = within_ns or {}
    mono = (
        np.asarray(table.column("mono_ns").to_numpy(), dtype=np.int64)
        if limits and "mono_ns" in table.column_names
        else None
    )
    # per column: its source, and whether it is written once per window (a null read of a
    # windowed column is "not due" too)
    sources: dict[str, tuple[_Source, bool]] = {}
    for columns, starts, complete in failed_reads:
        source = _Source(table, [name for name, _ in columns], starts, complete)
        for name, window in columns:
            sources[name] = (source, window > 0)
    out = []
    for field, column in zip(table.schema, table.columns):
        numeric = pa.types.is_integer(field.type) or pa.types.is_floating(field.type)
        if numeric and column.null_count and column.null_count < len(column):
            limit = limits.get(field.name)
            if limit is None or mono is None:
                column = pc.fill_null_forward(column)
            else:
                column = _fill_within(
                    table, field.name, mono, limit, *sources.get(field.name, (None, False))
                )
        out.append(column)
    return pa.Table.from_arrays(out, schema=table.schema)


def _valid(table: pa.Table, name: str) -> np.ndarray[Any, Any]:
    return np.asarray(table.column(name).is_valid().to_numpy(zero_copy_only=False), dtype=bool)


class _Source:
    """What the fill knows of one source of a sampler's frame: its columns, when its reads
    began to fail, and (computed once, for all its columns) the rows it wrote a value in."""

    def __init__(
        self, table: pa.Table, names: list[str], starts: Sequence[int], complete: bool
    ) -> None:
        self.table, self.names, self.complete = table, names, complete
        self.failed_at = np.asarray(starts, dtype=np.int64)
        self._read: np.ndarray[Any, Any] | None = None

    def read(self) -> np.ndarray[Any, Any]:
        """Rows in which any of its columns holds a value (reads that succeeded)."""
        if self._read is None:
            read = np.zeros(self.table.num_rows, dtype=bool)
            for name in self.names:
                if name in self.table.column_names:
                    read |= _valid(self.table, name)
            self._read = read
        return self._read


def _last_true(flags: np.ndarray[Any, Any]) -> np.ndarray[Any, Any]:
    """Per row, the index of the last row at or before it where ``flags`` holds (-1: none)."""
    return np.maximum.accumulate(np.where(flags, np.arange(len(flags)), -1))


def _fill_within(
    table: pa.Table,
    name: str,
    mono: np.ndarray[Any, Any],
    limit: int,
    source: _Source | None,
    windowed: bool,
) -> pa.Array:
    """Forward fill of column ``name`` (see :func:`forward_filled`): into rows less than
    ``limit`` ns after the value they take, and with its source's log of failed reads, on to the
    next value unless a read failed in between."""
    column = table.column(name)
    valid = _valid(table, name)
    rows = np.arange(len(valid))
    last = _last_true(valid)  # row of the value each row takes
    take = np.maximum(last, 0)
    since = mono[take]  # time of that value
    fill = ~valid & (last >= 0) & (mono - since < limit)
    if source is not None:
        failed_at = source.failed_at
        # a failed read in (value, row]: the row is after a failed read
        failed = np.searchsorted(failed_at, mono, "right") > np.searchsorted(
            failed_at, since, "right"
        )
        # the log says nothing of failures before its oldest kept entry: past the limit, a
        # value older than that is not carried (a failure it kept counts all the same)
        if source.complete:
            known = np.full(len(valid), True)
        elif len(failed_at):
            known = since >= failed_at[0]
        else:
            known = np.full(len(valid), False)
        carried = ~valid & (last >= 0) & known & ~failed
        if not windowed:
            # not past a read since the value that gave none for this column
            carried &= _last_true(source.read()) == last
        fill = (fill & ~failed) | carried
    filled = column.combine_chunks().take(pa.array(np.where(fill, take, rows)))
    return pa.array(filled.to_numpy(zero_copy_only=False), type=column.type, mask=~(valid | fill))


class Frame:
    """Rows with a fixed schema, in buffers this object owns.

    Columns of a sampler's frames: ``time`` (``timestamp[ns, UTC]``), ``mono_ns`` (``int64``, the
    clock of :func:`time.monotonic_ns`), then one nullable column per metric (``float64`` or
    ``int64``, units in the field metadata). A null cell means the source was not due on that
    tick or could not be read.

    The frame implements the Arrow PyCapsule interface (``__arrow_c_stream__``,
    ``__arrow_c_array__``, ``__arrow_c_schema__``), so ``pyarrow.table(frame)``,
    ``polars.DataFrame(frame)`` and DuckDB read its buffers in place.

    Parameters
    ----------
    rows : _core.Frame or pyarrow.Table
        The rows (frames are made by the package: ``Sampler.snapshot()``, ``drain()``,
        ``recover()``, ``gpu_samples()``).
    rows_lost : int
        For a table: rows that were wanted but lost before they could be kept.
    first_row : int
        For a table: index of its first row in the sampler's lifetime row count.
    provenance : dict, optional
        For a table: what is known of its run (:mod:`stroboscope.sampling._provenance`); the
        frame adds its rows' first and last time and count, and its Arrow schema carries the
        result in its metadata (``stroboscope.provenance``, JSON).
    run : RunFacts, optional
        For a core frame: its sampler's provenance, gathered once and shared by its frames;
        ``counted`` are the sampler's counters when the frame was made
        (:func:`stroboscope.sampling._provenance.counters`). The frame adds its rows' facts.
    fill_within_ns : mapping of str to int, optional
        Per column, how long after its last value a null is surely "not due"
        (``fill="forward"`` fills it; past that it uses the core frame's log of failed reads,
        :func:`forward_filled`). A :class:`Sampler` gives each source's read period; without it
        every null is filled.
    """

    __slots__ = ("_counted", "_fill_within", "_first_row", "_lost", "_rows", "_run")
    _counted: tuple[int, ...]
    _fill_within: Mapping[str, int]
    _first_row: int
    _lost: int
    _rows: _Rows
    _run: RunFacts | None

    def __init__(
        self,
        rows: _Rows,
        *,
        rows_lost: int = 0,
        first_row: int = 0,
        provenance: dict[str, Any] | None = None,
        fill_within_ns: Mapping[str, int] | None = None,
        run: RunFacts | None = None,
        counted: Sequence[int] = (0, 0, 0),
    ) -> None:
        if not isinstance(rows, pa.Table) and not isinstance(rows, _core_frame()):
            raise TypeError(f"rows must be a core frame or a pyarrow.Table, got {type(rows)!r}")
        init = object.__setattr__
        if not isinstance(rows, pa.Table):
            init(self, "_lost", int(rows.rows_lost))
            init(self, "_first_row", int(rows.first_row))
            if provenance is not None:
                raise TypeError("a core frame carries its sampler's provenance as run=, not a dict")
        else:
            init(self, "_lost", int(rows_lost))
            init(self, "_first_row", int(first_row))
            if run is not None:
                provenance = run.provenance(counted)
            if provenance is not None:
                rows = attach(rows, for_table(provenance, rows, rows_lost=self._lost))
            run = None  # kept in the table's schema
        # Set past __setattr__ (which refuses every change once _rows is set): a frame per
        # snapshot is on the path of every read, and this costs less.
        init(self, "_run", run)
        init(self, "_counted", tuple(counted))
        # A read-only mapping (the sampler's, shared by its frames) is kept; others are copied.
        within = fill_within_ns if isinstance(fill_within_ns, MappingProxyType) else None
        init(self, "_fill_within", within or dict(fill_within_ns or {}))
        init(self, "_rows", rows)  # last: from here on the frame refuses changes

    @classmethod
    def _of_sampler(
        cls,
        rows: _core.Frame,
        run: RunFacts,
        counted: tuple[int, int, int],
        fill_within_ns: MappingProxyType[str, int],
    ) -> Frame:
        """A sampler's frame, as ``Frame(rows, run=..., counted=..., fill_within_ns=...)`` makes
        it, without the checks that arguments from elsewhere need (a frame per read)."""
        frame = object.__new__(cls)
        init = object.__setattr__
        init(frame, "_lost", rows.rows_lost)
        init(frame, "_first_row", rows.first_row)
        init(frame, "_run", run)
        init(frame, "_counted", counted)
        init(frame, "_fill_within", fill_within_ns)
        init(frame, "_rows", rows)  # last: from here on the frame refuses changes
        return frame

    def __len__(self) -> int:
        if isinstance(self._rows, pa.Table):
            return int(self._rows.num_rows)
        return len(self._rows)

    def __repr__(self) -> str:
        lost = f" rows_lost={self._lost}" if self._lost else ""
        return f"<stroboscope.Frame rows={len(self)} columns={self.num_columns}{lost}>"

    def __setattr__(self, name: str, value: Any) -> None:
        if hasattr(self, "_rows"):
            raise AttributeError("a Frame cannot be changed once made")
        object.__setattr__(self, name, value)

    @property
    def column_names(self) -> list[str]:
        """Names of the columns (``time`` and ``mono_ns`` first in a sampler's frames)."""
        if isinstance(self._rows, pa.Table):
            return list(self._rows.column_names)
        return list(self._rows.column_names)

    @property
    def num_columns(self) -> int:
        """Number of columns."""
        if isinstance(self._rows, pa.Table):
            return int(self._rows.num_columns)
        return int(self._rows.num_columns)

    @property
    def schema(self) -> pa.Schema:
        """The Arrow schema (``unit`` and ``kind`` in each field's metadata; the provenance, when
        the frame carries one, in the schema's)."""
        if isinstance(self._rows, pa.Table):
            return self._rows.schema
        if self._run is None:
            return pa.schema(_Array(self._rows))
        return self.to_arrow().schema

    @property
    def rows_lost(self) -> int:
        """Rows that were wanted but had been overwritten before they could be copied."""
        return self._lost

    @property
    def first_row(self) -> int:
        """Index of this frame's first row in the sampler's lifetime row count."""
        return self._first_row

    @property
    def provenance(self) -> dict[str, Any] | None:
        """Where these rows come from (version, host, process, intervals, sources, GPUs, rank,
        clock anchor, first and last time, rows lost: see
        :func:`stroboscope.sampling._provenance.provenance`), or None when the frame carries
        none. The same dict as the schema metadata ``stroboscope.provenance``."""
        if isinstance(self._rows, pa.Table):
            return from_schema(self._rows.schema)
        if self._run is None:
            return None
        return self._run.for_rows(self._counted, self._core_table(), self._lost)

    def _core_table(self) -> pa.Table:
        """The core frame's buffers as a table (no copy), without provenance."""
        assert not isinstance(self._rows, pa.Table)
        # One import of the core's capsules (pa.record_batch does not look for pandas first).
        return pa.Table.from_batches([pa.record_batch(_Array(self._rows))])

    # -- Arrow PyCapsule interface ---------------------------------------------------------

    def __arrow_c_schema__(self) -> object:
        """Export the schema as an ``arrow_schema`` PyCapsule."""
        if isinstance(self._rows, pa.Table):
            return self._rows.schema.__arrow_c_schema__()
        return self._rows.export_schema()

    def __arrow_c_array__(self, requested_schema: object | None = None) -> tuple[object, object]:
        """Export the rows as one struct array: ``(arrow_schema, arrow_array)`` capsules.

        ``requested_schema`` is accepted for protocol compatibility and ignored: the data is
        returned in its own schema, which consumers check.
        """
        if isinstance(self._rows, pa.Table):
            table = self._rows.combine_chunks()
            batch = pa.RecordBatch.from_arrays(
                [c.combine_chunks() for c in table.columns], schema=table.schema
            )
            result: tuple[object, object] = batch.__arrow_c_array__()
            return result
        return self._rows.export_schema(), self._rows.export_array()

    def __arrow_c_stream__(self, requested_schema: object | None = None) -> object:
        """Export the rows as an ``arrow_array_stream`` PyCapsule."""
        if isinstance(self._rows, pa.Table):
            return self._rows.__arrow_c_stream__(requested_schema)
        if self._run is not None:  # the same buffers, the provenance in the metadata
            return self.to_arrow().__arrow_c_stream__(requested_schema)
        return self._rows.export_stream()

    # -- conversions -------------------------------------------------------------------------

    def to_arrow(self, *, fill: Fill = None) -> pa.Table:
        """Return a :class:`pyarrow.Table` over this frame's buffers (no copy without ``fill``).

        Parameters
        ----------
        fill : None or "forward"
            ``None`` keeps nulls where they are. ``"forward"`` carries each numeric column's
            last value into the null rows after it, up to its next reading: the source's next
            read (a source read every n ticks, at its natural resolution), or for a rate or
            share written once per window (``cpu_window``, ``rate_window``: cpu %, bytes/s,
            PSI) the next window's value, however late missed ticks make it; so such a column
            has a value in every row: the value a reader would have seen then. Rows from a
            failed read of the source on (or a process that exited) stay null, as do the rows
            before a column's first value, and a column that its source's read left without a
            value (``threads.top3.tid`` when fewer threads ran) past its period. (Frames of a
            sampler know each column's period and window and each source's failed reads; a
            recovered table does not, and every null is filled there.)
        """
        if fill not in (None, "forward"):
            raise ValueError(f"fill must be None or 'forward', got {fill!r}")
        if isinstance(self._rows, pa.Table):
            table = self._rows
        else:
            table = self._core_table()
            if self._run is not None:  # the run's facts were encoded once: the frame adds its own
                edges = self._rows.edges or (None, None, None)
                text = self._run.encoded(self._counted, table, self._lost, edges)
                # The core's schema has metadata only on its fields: nothing to keep here.
                table = table.replace_schema_metadata({_KEY: text.encode()})
        if fill is None:
            return table
        failed = () if isinstance(self._rows, pa.Table) else self._rows.failed_reads
        return forward_filled(table, self._fill_within, failed)

    def to_pandas(self, *, fill: Fill = None) -> pandas.DataFrame:
        """Return a pandas DataFrame (nullable integer columns become float64 with NaN);
        ``fill`` as in :meth:`to_arrow`."""
        require("pandas", "to_pandas()", "pandas")
        df: pandas.DataFrame = self.to_arrow(fill=fill).to_pandas()
        return df

    def to_numpy(self) -> np.ndarray[Any, Any]:
        """Return one structured NumPy array, a field per column (``arr["cpu.util_pct"]``).

        ``time`` is ``datetime64[ns]`` (UTC), ``mono_ns`` is ``int64``; numeric columns are
        ``float64`` with NaN for nulls, except integer columns without nulls, which keep their
        type; other columns (such as a ``kind`` label) are ``object``.
        """
        table = self.to_arrow()
        arrays: list[np.ndarray[Any, Any]] = []
        for column in table.columns:
            if pa.types.is_timestamp(column.type):
                arrays.append(column.cast(pa.int64()).to_numpy().astype("datetime64[ns]"))
            elif pa.types.is_integer(column.type) and column.null_count == 0:
                arrays.append(column.to_numpy())
            elif pa.types.is_integer(column.type) or pa.types.is_floating(column.type):
                arrays.append(column.cast(pa.float64()).to_numpy(zero_copy_only=False))
            else:
                arrays.append(column.to_numpy(zero_copy_only=False).astype(object))
        dtype = np.dtype([(name, a.dtype) for name, a in zip(table.column_names, arrays)])
        out = np.empty(table.num_rows, dtype=dtype)
        for name, a in zip(table.column_names, arrays):
            out[name] = a
        return out

    def write_parquet(self, path: str | os.PathLike[str], *, compression: str = "zstd") -> None:
        """Write the rows to a Parquet file (see :func:`stroboscope.export.write_parquet`)."""
        from stroboscope.formats.writers import write_parquet  # the home of output formats

        write_parquet(self.to_arrow(), path, compression=compression)

    def write_csv(self, path: str | os.PathLike[str]) -> None:
        """Write the rows to a CSV file (see :func:`stroboscope.export.write_csv`)."""
        from stroboscope.formats.writers import write_csv

        write_csv(self.to_arrow(), path)


_KEY = PROVENANCE_KEY.encode()


class _Array:
    """A core frame's rows as the Arrow PyCapsule array protocol (for pyarrow's importers)."""

    __slots__ = ("_rows",)

    def __init__(self, rows: _core.Frame) -> None:
        self._rows = rows

    def __arrow_c_schema__(self) -> object:
        return self._rows.export_schema()

    def __arrow_c_array__(self, requested_schema: object | None = None) -> tuple[object, object]:
        return self._rows.export_schema(), self._rows.export_array()
