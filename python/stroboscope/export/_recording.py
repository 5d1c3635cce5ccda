"""One recording of a report, held so that a long one is never decoded whole.

A report of a 1-hour 1 kHz run (3.6M rows x 27 columns) holds 753 MiB when the table is decoded
at once, though each of its consumers (the column figures, the per-scope summary, the page, the
plots) needs one column at a time. So a Parquet recording keeps only ``time`` and ``mono_ns`` in
memory; its metric columns stay in the file (:class:`FileColumns`) and each consumer reads the
ones it needs (:meth:`Recording.column`, :meth:`Recording.columns`), reduces them and drops them.
The selections of a report (columns, a time range, a scope's spans) are kept as which columns
and which of the file's rows the recording is, and applied to each column as it is read.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from stroboscope._base.files import regular_source
from stroboscope.analysis.column_stats import TIME_COLUMNS  # what a recording holds in memory


def read_columns(pf: pq.ParquetFile, names: list[str] | None) -> pa.Table:
    """The columns ``names`` (None: all) of ``pf``, decoded one column at a time.

    A whole-file read decodes every column at once on several threads, each holding its
    pages and buffers: for a 1-hour 1 kHz run (3.6M rows x 27 columns, 753 MiB decoded) it
    peaked 190 MiB above the table it returned; one column at a time, on one thread, adds
    about what one column's pages hold, and is no slower.
    """
    schema = pf.schema_arrow
    wanted = schema.names if names is None else names
    if len(set(schema.names)) < len(schema.names):  # a name twice: read by pyarrow as a whole
        return pf.read(columns=names)
    arrays = [pf.read(columns=[n], use_threads=False).column(0) for n in wanted]
    fields = [schema.field(n) for n in wanted]
    return pa.Table.from_arrays(arrays, schema=pa.schema(fields, metadata=schema.metadata))


@dataclass(frozen=True)
class FileColumns:
    """Metric columns left in a Parquet file, each read when asked for.

    Attributes
    ----------
    path : str
        The file (opened again for each read, as a regular file: never a FIFO or a device).
    schema : pyarrow.Schema
        The columns the recording has (its selection of the file's), with their metadata.
    file_rows : int
        Rows of the file: a file that changed since it was first read is refused.
    rows : numpy.ndarray or None
        The file's rows the recording is, in its order (int64); None: all, as stored.
    """

    path: str
    schema: pa.Schema
    file_rows: int
    rows: np.ndarray[Any, Any] | None = None

    def read(self, name: str) -> pa.ChunkedArray:
        """Column ``name``, decoded on one thread, for the recording's rows."""
        try:
            with regular_source(self.path, "recording") as src:
                pf = pq.ParquetFile(src)
                if pf.metadata.num_rows != self.file_rows or name not in pf.schema_arrow.names:
                    gone = "" if name in pf.schema_arrow.names else f" and no column {name!r}"
                    raise ValueError(
                        f"{self.path} changed while the report read it: it had {self.file_rows} "
                        f"rows, it has {pf.metadata.num_rows}{gone}"
                    )
                col = pf.read(columns=[name], use_threads=False).column(0)
        except (pa.ArrowException, OSError) as exc:
            raise ValueError(f"{self.path} is not a readable Parquet file: {exc}") from None
        if self.rows is not None:
            col = col.take(pa.array(self.rows))
        return col

    def take(self, rows: np.ndarray[Any, Any]) -> FileColumns:
        """These columns for ``rows`` (indices into the recording's present rows)."""
        idx = np.asarray(rows, np.int64)
        return replace(self, rows=idx if self.rows is None else self.rows[idx])


@dataclass(frozen=True)
class Recording:
    """The rows of one recording (one host/rank of a dataset), with what came with them.

    Attributes
    ----------
    label : str
        How plots and tables name it: the file's stem, or the partition values.
    source : str
        The path it was read from.
    held : pyarrow.Table
        The columns in memory, in ``mono_ns`` order: every column, or with ``lazy`` only
        ``time`` and ``mono_ns``.
    metadata : dict of str to str
        The schema metadata (``stroboscope.rows_lost``, ``stroboscope.provenance``, ...).
    scopes : pyarrow.Table or None
        Scope intervals (``name``, ``path``, ``begin_ns``, ``end_ns`` in CLOCK_MONOTONIC ns, ...).
    lazy : FileColumns or None
        The metric columns left in the file, read one at a time (:meth:`column`).
    """

    label: str
    source: str
    held: pa.Table
    metadata: dict[str, str] = field(default_factory=dict)
    scopes: pa.Table | None = None
    lazy: FileColumns | None = None

    @property
    def schema(self) -> pa.Schema:
        """Every column of the recording (``time``, ``mono_ns`` and the metrics)."""
        return self.lazy.schema if self.lazy is not None else self.held.schema

    @property
    def column_names(self) -> list[str]:
        """The names of :attr:`schema`."""
        return list(self.schema.names)

    @property
    def num_rows(self) -> int:
        """Rows of the recording."""
        return int(self.held.num_rows)

    @property
    def times(self) -> pa.Table:
        """``time`` and ``mono_ns`` (those present), from memory."""
        return self.held.select([n for n in TIME_COLUMNS if n in self.held.column_names])

    @property
    def table(self) -> pa.Table:
        """Every column as one table: a long recording decoded whole (the report's own
        consumers read a column at a time, :meth:`column`)."""
        if self.lazy is None:
            return self.held
        return self.columns([n for n in self.column_names if n not in TIME_COLUMNS])

    def column(self, name: str) -> pa.ChunkedArray:
        """One column, from memory or read from the file."""
        if self.lazy is None or name in self.held.column_names:
            return self.held.column(name)
        return self.lazy.read(name)

    def columns(self, names: list[str]) -> pa.Table:
        """``time``, ``mono_ns`` and the columns ``names`` (those the recording has), as one
        table in the recording's column order."""
        want = set(names) | set(TIME_COLUMNS)
        keep = [n for n in self.column_names if n in want]
        if self.lazy is None:
            return self.held.select(keep)
        fields = [self.schema.field(n) for n in keep]
        return pa.Table.from_arrays(
            [self.column(n) for n in keep], schema=pa.schema(fields, metadata=self.schema.metadata)
        )

    @property
    def anchor_ns(self) -> int:
        """Realtime minus monotonic ns of this recording (``time`` minus ``mono_ns``)."""
        t = self.held.column("time").cast(pa.int64())
        return int(t[0].as_py()) - int(self.held.column("mono_ns")[0].as_py())

    def with_table(self, table: pa.Table) -> Recording:
        """The same series holding other rows, all of them in memory."""
        return replace(self, held=table, lazy=None)

    def select(self, names: list[str]) -> Recording:
        """The same rows with the columns ``names`` only (in that order)."""
        if self.lazy is None:
            return replace(self, held=self.held.select(names))
        fields = [self.schema.field(n) for n in names]
        schema = pa.schema(fields, metadata=self.schema.metadata)
        held = self.held.select([n for n in names if n in self.held.column_names])
        return replace(self, held=held, lazy=replace(self.lazy, schema=schema))

    def take_rows(self, rows: np.ndarray[Any, Any] | pa.Array) -> Recording:
        """The same columns for ``rows`` (indices of this recording's rows, in their order)."""
        idx = np.asarray(rows, np.int64)
        held = self.held.take(pa.array(idx))
        return replace(self, held=held, lazy=None if self.lazy is None else self.lazy.take(idx))

    def filter_rows(self, mask: np.ndarray[Any, Any] | pa.Array | pa.ChunkedArray) -> Recording:
        """The rows where ``mask`` (one boolean per row) is true."""
        if isinstance(mask, (pa.Array, pa.ChunkedArray)):
            mask = mask.to_numpy(zero_copy_only=False)
        keep = np.asarray(mask, bool)
        if self.lazy is None:
            return replace(self, held=self.held.filter(pa.array(keep)))
        return self.take_rows(np.flatnonzero(keep))


def open_lazy(
    path: str | os.PathLike[str], pf: pq.ParquetFile, names: list[str] | None
) -> tuple[pa.Table, FileColumns]:
    """A Parquet recording's ``time`` and ``mono_ns`` read, its other columns (``names``, or
    all) left in the file: ``(held table, FileColumns)``."""
    schema = pf.schema_arrow
    wanted = schema.names if names is None else names
    fields = [schema.field(n) for n in wanted]
    full = pa.schema(fields, metadata=schema.metadata)
    held = read_columns(pf, [n for n in wanted if n in TIME_COLUMNS])
    return held, FileColumns(os.fspath(path), full, int(pf.metadata.num_rows))
