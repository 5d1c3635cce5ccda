"""CSV sender: one row per published event, one column per (flattened) metric."""

from __future__ import annotations

import csv
import logging
import os
import threading
from collections.abc import Sequence
from pathlib import Path
from typing import Any, TextIO

from stroboscope._base.checks import check_bool, check_file_path, check_str, describe
from stroboscope.senders._base import BuiltinSender, StatsDict, flatten_event
from stroboscope.senders._files import open_private_text, part_path, seconds_iso_utc

logger = logging.getLogger("stroboscope.senders")


class CSVSender(BuiltinSender):
    """Write each event as a CSV row: ``time`` (ISO-8601 UTC) then one column per metric.

    Nested values are flattened (``network.sent``, ``network.recv``). The columns of a file are
    fixed by the first event written to it; when a later event brings a metric the file has no
    column for, the sender starts the next part (``metrics.1.csv``, ``metrics.2.csv``, …) with the
    wider header, so every file keeps one header. A metric missing from an event is an empty cell;
    an event without any metric writes no row.

    Parameters
    ----------
    path : str or os.PathLike
        The CSV file, created (truncated) with mode 0600.
    columns : sequence of str, optional
        Fix the columns (after ``time``) up front; other metrics are then left out.
    flush : bool
        Flush to the OS after every row (default True: a crash loses at most the current row).
    """

    def __init__(
        self,
        path: str | os.PathLike[str],
        *,
        columns: Sequence[str] | None = None,
        flush: bool = True,
    ) -> None:
        super().__init__()
        self.path = Path(check_file_path("path", path))
        self.paths: list[Path] = []
        self._fixed = _check_columns(columns)
        self._flush = check_bool("flush", flush)
        self._file: TextIO | None = None
        self._writer: Any = None
        self._columns: list[str] = []
        self._lock = threading.Lock()
        self._closed = False

    def _open_part(self, columns: list[str]) -> None:
        if self._file is not None:
            self._file.close()
        target = part_path(self.path, len(self.paths))
        self._file = open_private_text(target)
        self.paths.append(target)
        self._columns = columns
        self._writer = csv.writer(self._file)
        self._writer.writerow(["time", *columns])
        if len(self.paths) > 1:
            logger.info("stroboscope: new metrics appeared; CSV continues in %s", target)

    def publish(self, event: StatsDict, **kwargs: Any) -> None:
        """Append ``event`` as one row (``timestamp=`` in seconds sets the time cell)."""
        flat = flatten_event(event)
        if not flat:
            return  # nothing measured yet (e.g. a flush() before start()): no row
        with self._lock:
            if self._closed:
                raise RuntimeError(f"CSVSender({str(self.path)!r}) is closed")
            if self._file is None:
                self._open_part(self._fixed if self._fixed is not None else list(flat))
            elif self._fixed is None and any(k not in self._columns for k in flat):
                known = set(self._columns)
                self._open_part(self._columns + [k for k in flat if k not in known])
            row: list[object] = [seconds_iso_utc(self._timestamp(kwargs))]
            row.extend(_cell(flat.get(c)) for c in self._columns)
            self._writer.writerow(row)
            if self._flush and self._file is not None:
                self._file.flush()

    def close(self) -> None:
        """Close the current file (idempotent)."""
        with self._lock:
            self._closed = True
            if self._file is not None:
                self._file.close()
                self._file = None

    def __repr__(self) -> str:
        return f"CSVSender({str(self.path)!r})"


def _check_columns(columns: object) -> list[str] | None:
    if columns is None:
        return None
    if isinstance(columns, str):
        raise TypeError(
            f"columns must be a sequence of metric names (str), not one str; did you mean "
            f"{[columns]!r}?"
        )
    if not isinstance(columns, Sequence):
        raise TypeError(
            f"columns must be a sequence of metric names (str), got {describe(columns)}"
        )
    return [check_str(f"columns[{i}]", c) for i, c in enumerate(columns)]


def _cell(value: float | None) -> object:
    # repr() of a float is the shortest text that reads back to the same value.
    return "" if value is None else repr(value)
