"""The rolling Parquet segment writer: drains a sampler's ring into files beside its spool.

For runs longer than the ring holds, a background thread copies the rows written since the last
segment (with the sampler's own consumer API, not its drain cursor) and writes them as one
complete Parquet file, written whole and renamed into place, so a segment on disk is always
readable. :func:`stroboscope.recording.spool.recover` reads them back with the spool.
"""

from __future__ import annotations

import os
import threading
import time
from typing import TYPE_CHECKING

import pyarrow.parquet as pq

from stroboscope._files import open_private
from stroboscope.recording.spool import FIRST_ROW_KEY, last_segment_index

if TYPE_CHECKING:
    from stroboscope.sampling import Sampler


class SegmentWriter:
    """Drains a sampler's ring into rolling Parquet segments beside its spool.

    Every ``segment_seconds`` (or sooner when ``segment_rows`` rows are waiting) the rows written
    since the last segment are copied out (with the sampler's own consumer API, not its drain
    cursor) and written as one complete Parquet file, renamed into place. The ring must hold a
    segment's worth of rows; rows overwritten before a segment took them are counted in
    :attr:`rows_lost`.
    """

    def __init__(
        self, sampler: Sampler, spool: str, segment_seconds: float, segment_rows: int
    ) -> None:
        self._sampler = sampler
        self._spool = spool
        self._seconds = segment_seconds
        self._rows = segment_rows
        self._cursor = 0
        self._seq = last_segment_index(spool)
        self.rows_lost = 0
        self.segments_written = 0
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._lock = threading.Lock()

    def start(self) -> None:
        if self._thread is not None and self._thread.is_alive():
            return
        self._stop.clear()
        self._thread = threading.Thread(target=self._run, name="stroboscope-segments", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        """Stop the thread and write what is left as a last segment."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
            self._thread = None
        self.flush()

    def _run(self) -> None:
        poll = min(self._seconds / 2, 0.25)
        last = time.monotonic()
        while not self._stop.wait(poll):
            pending = self._sampler.stats().rows_written - self._cursor
            if time.monotonic() - last >= self._seconds or pending >= self._rows:
                self.flush()
                last = time.monotonic()

    def flush(self) -> None:
        """Write the rows not yet in a segment as a new segment (nothing when there are none)."""
        with self._lock:
            frame = self._sampler.copy_since(self._cursor)
            self.rows_lost += frame.rows_lost
            if len(frame) == 0:
                return
            table = frame.to_arrow()
            meta = dict(table.schema.metadata or {})
            meta[FIRST_ROW_KEY] = str(frame.first_row).encode()
            table = table.replace_schema_metadata(meta)
            self._seq += 1
            final = f"{self._spool}.seg-{self._seq:06d}.parquet"
            tmp = final + ".tmp"
            with open_private(tmp) as f:
                pq.write_table(table, f, compression="zstd")
                f.flush()
                os.fsync(f.fileno())
            os.replace(tmp, final)
            self._cursor = frame.first_row + len(frame)
            self.segments_written += 1
