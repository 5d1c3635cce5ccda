"""Parquet sender: events in rolling Parquet files, each with one fixed schema."""

from __future__ import annotations

import logging
import os
import threading
from pathlib import Path
from typing import Any, BinaryIO

import pyarrow as pa

from stroboscope._base.checks import check_file_path, check_int
from stroboscope._base.files import open_private
from stroboscope.formats.writers import check_codec
from stroboscope.senders._base import BuiltinSender, StatsDict, flatten_event

logger = logging.getLogger("stroboscope.senders")


class ParquetSender(BuiltinSender):
    """Write events to rolling Parquet files: ``time`` then one ``float64`` column per metric.

    Files are named ``<stem>-00000.parquet``, ``<stem>-00001.parquet``, … next to ``path``. A file's
    schema is fixed by its first event; a file is finished (and the next one started) after
    ``rows_per_file`` rows, or when an event brings a metric the schema lacks, so every file is
    schema-stable and readable on its own. Rows are buffered and written as one row group every
    ``rows_per_group`` rows and at :meth:`close`; a metric missing from an event is null.

    Parameters
    ----------
    path : str or os.PathLike
        Base name of the files (``metrics.parquet`` → ``metrics-00000.parquet``, …); each file is
        created with mode 0600.
    rows_per_file : int
        Rows (events) per file before rolling to the next (default 3600: two hours at 2 s).
    rows_per_group : int
        Rows buffered in memory before a row group is written (default 60).
    compression : str
        Parquet codec (default ``"zstd"``).
    """

    def __init__(
        self,
        path: str | os.PathLike[str],
        *,
        rows_per_file: int = 3600,
        rows_per_group: int = 60,
        compression: str = "zstd",
    ) -> None:
        super().__init__()
        self.path = Path(check_file_path("path", path))
        self._rows_per_file = check_int("rows_per_file", rows_per_file, 1, unit="rows")
        self._rows_per_group = min(
            check_int("rows_per_group", rows_per_group, 1, unit="rows"), rows_per_file
        )
        self._compression = check_codec(compression)  # here, not in the worker thread
        import pyarrow.parquet  # noqa: F401 - fail here, not on the first write

        self.paths: list[Path] = []
        self._schema: pa.Schema | None = None
        self._columns: list[str] = []
        self._buffer: list[tuple[int, dict[str, float]]] = []
        self._rows_in_file = 0
        self._file: BinaryIO | None = None
        self._writer: Any = None
        self._lock = threading.Lock()
        self._closed = False

    def publish(self, event: StatsDict, **kwargs: Any) -> None:
        """Buffer ``event`` as one row (``timestamp=`` in seconds sets ``time``)."""
        flat = flatten_event(event)
        if not flat:
            return  # nothing measured yet (e.g. a flush() before start()): no row
        time_us = round(self._timestamp(kwargs) * 1e6)
        with self._lock:
            if self._closed:
                raise RuntimeError(f"ParquetSender({str(self.path)!r}) is closed")
            if self._schema is None:
                self._start_schema(list(flat))
            elif any(k not in self._columns for k in flat):
                known = set(self._columns)
                self._finish_file()
                self._start_schema(self._columns + [k for k in flat if k not in known])
            self._buffer.append((time_us, flat))
            if len(self._buffer) >= self._rows_per_group or (
                self._rows_in_file + len(self._buffer) >= self._rows_per_file
            ):
                self._write_group()
            if self._rows_in_file >= self._rows_per_file:
                self._finish_file()

    def _start_schema(self, columns: list[str]) -> None:
        self._columns = columns
        fields = [pa.field("time", pa.timestamp("us", tz="UTC"), nullable=False)]
        fields += [pa.field(c, pa.float64()) for c in columns]
        self._schema = pa.schema(fields)

    def _write_group(self) -> None:
        if not self._buffer or self._schema is None:
            return
        import pyarrow.parquet as pq

        if self._writer is None:
            target = self.path.with_name(
                f"{self.path.stem}-{len(self.paths):05d}{self.path.suffix or '.parquet'}"
            )
            self._file = open_private(target)
            self._writer = pq.ParquetWriter(self._file, self._schema, compression=self._compression)
            self.paths.append(target)
            self._rows_in_file = 0
        arrays = [pa.array([t for t, _ in self._buffer], pa.timestamp("us", tz="UTC"))]
        arrays += [
            pa.array([row.get(c) for _, row in self._buffer], pa.float64()) for c in self._columns
        ]
        self._writer.write_table(pa.Table.from_arrays(arrays, schema=self._schema))
        self._rows_in_file += len(self._buffer)
        self._buffer.clear()

    def _finish_file(self) -> None:
        self._write_group()
        if self._writer is not None:
            self._writer.close()
            self._writer = None
        if self._file is not None:
            self._file.close()
            self._file = None

    def close(self) -> None:
        """Write buffered rows and finish the current file (idempotent)."""
        with self._lock:
            if self._closed:
                return
            self._closed = True
            self._finish_file()

    def __repr__(self) -> str:
        return f"ParquetSender({str(self.path)!r})"
