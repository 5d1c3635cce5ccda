"""The rolling Parquet segment writer: drains a sampler's ring into files beside its spool.

For runs longer than the ring holds, a background thread copies the rows written since the last
segment (with the sampler's own consumer API, not its drain cursor) and writes them as one
complete Parquet file, written whole under an unpredictable temporary name and renamed into
place, so a segment on disk is always readable. :func:`stroboscope.recording.spool.recover`
reads them back with the spool.

The spool stays the source of truth: a segment that cannot be written (a full disk, a removed
directory) is retried with backoff, and until one is written its rows are read from the spool by
``recover``. What the writer could not do is counted in :class:`SegmentStatus`
(``Sampler.segments``) and logged (rate-limited) on the ``stroboscope.recording`` logger.

Scope events: at every wake-up (at most every 0.25 s, and at :meth:`SegmentWriter.stop`) the
writer also appends the events recorded in the process's events log since it started, with the
names they use, to the sidecar ``PATH.events`` (:mod:`stroboscope.formats.events_file`; whole
chunks, so a crash leaves every complete one readable). A SIGKILL loses at most the events
recorded since the last wake-up, and events the log overwrote before a wake-up took them
(counted).

A clean end (:func:`stroboscope.recording.finish`) writes no last segment: the writer is told
so (:meth:`SegmentWriter.keep_rest`), the rows since the last segment stay in the ring (and the
spool, which a crash still recovers), and the finish takes them from the ring
(:meth:`SegmentWriter.take_rest`) straight into the output, so each row is written once. The
segments written before (:attr:`SegmentWriter.written`) are the rows the ring could not hold.
A recording prepared for that end before its first segment (:meth:`SegmentWriter.use_pieces`)
appends its segments as pieces of one file in the output's form
(:mod:`stroboscope.formats.pieces`): the finish appends the rest and one footer to that file and
renames it to the output, so those rows are not written again either.
"""

from __future__ import annotations

import contextlib
import logging
import os
import threading
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING

import pyarrow as pa

from stroboscope._base.ratelimit import RateLimitedLog
from stroboscope.formats.events_file import events_path
from stroboscope.formats.pieces import append_piece, encode_piece, is_pieces_path, pieces_path
from stroboscope.formats.segments import (
    FIRST_ROW_KEY,
    last_segment_index,
    segment_path,
    stored_schema,
)
from stroboscope.formats.spool_stats import StatsPublisher
from stroboscope.formats.writers import write_parquet
from stroboscope.recording._events_write import EventsSink
from stroboscope.sampling import Frame

if TYPE_CHECKING:
    import stroboscope._core as _core

_LOG = logging.getLogger("stroboscope.recording")

RETRY_FIRST_S = 0.05
"""Wait before the first retry of a failed segment (seconds); doubled on each failure after."""
RETRY_MAX_S = 5.0
"""Longest wait between retries (seconds; shorter when ``segment_seconds`` is)."""
STOP_ATTEMPTS = 3
"""Tries of the last segment at :meth:`SegmentWriter.stop` before its rows are left to the spool."""


@dataclass(frozen=True)
class SegmentStatus:
    """What the segment writer of a spooled sampler has done (``Sampler.segments``).

    Attributes
    ----------
    segments_written : int
        Segment files written.
    rows_lost : int
        Rows overwritten in the ring before a segment took them: in no segment and no longer in
        the spool (``recover`` reports them as ``rows_lost`` too).
    errors : int
        Segment writes that failed (each retry counts); 0 when every write succeeded.
    rows_unwritten : int
        Rows that the latest write failed to put in a segment and no later write has: they are
        still in the spool, where ``recover`` reads them, until the ring overwrites them (then
        ``rows_lost`` counts them). 0 after a successful write.
    last_error : str or None
        The latest failure (``"OSError: [Errno 28] No space left on device: ..."``), None when
        there was none.
    events_written : int
        Scope events appended to the sidecar ``PATH.events``.
    events_lost : int
        Scope events the process's events log overwrote before the writer took them.
    events_errors : int
        Appends to the sidecar that failed (the events are tried again at the next wake-up).
    """

    segments_written: int
    rows_lost: int
    errors: int
    rows_unwritten: int
    last_error: str | None
    events_written: int = 0
    events_lost: int = 0
    events_errors: int = 0


@dataclass(frozen=True)
class Written:
    """One segment this writer wrote: its file, the index of its first row, its rows."""

    path: str
    first_row: int
    rows: int


def _write_segment(table: pa.Table, path: str) -> None:
    """Write one segment: a file whole (a 0600 temporary beside ``path``, renamed over it), or
    a piece appended to the pieces file ``path`` and indexed."""
    if is_pieces_path(path):
        first = int((table.schema.metadata or {})[FIRST_ROW_KEY])
        append_piece(encode_piece(table), path, first, table.num_rows)
    else:
        write_parquet(table, path)


class SegmentWriter:
    """Drains a sampler's ring into rolling Parquet segments beside its spool.

    Every ``segment_seconds`` (or sooner when ``segment_rows`` rows are waiting) the rows written
    since the last segment are copied out (with the sampler's own consumer API, not its drain
    cursor) and written as one complete Parquet file, renamed into place. ``core`` is the
    extension's sampler (``Sampler._core``) whose ring is the spool. The ring must hold a
    segment's worth of rows; rows overwritten before a segment took them are counted in
    :attr:`rows_lost`. A failed write is retried with backoff (``RETRY_FIRST_S`` doubling up to
    ``RETRY_MAX_S``) and counted in :meth:`status`; the thread never dies of one.
    """

    def __init__(
        self, core: _core.Sampler, spool: str, segment_seconds: float, segment_rows: int
    ) -> None:
        # The extension's sampler, not the Python one: the Sampler's finalizer holds this writer,
        # and a reference back to the Sampler would keep it (and its spool's lock) alive forever.
        self._core = core
        self._spool = spool
        self._seconds = segment_seconds
        self._rows = segment_rows
        self._cursor = 0
        self._seq = last_segment_index(spool)
        self.rows_lost = 0
        self.segments_written = 0
        self.errors = 0
        self.rows_unwritten = 0
        self.last_error: str | None = None
        self._log = RateLimitedLog(_LOG)
        self._gave_up_at: int | None = None  # rows_written when stop() last gave up
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._lock = threading.Lock()
        self._events: EventsSink | None = None  # made by start(): events from then on
        self.events_errors = 0
        self._keep_rest = False  # set by keep_rest(): stop() writes no last segment
        self._pieces: str | None = None  # set by use_pieces(): the file segments go to
        self._stats_out: StatsPublisher | None = None  # the figures a live view reads
        self._written: list[Written] = []

    def status(self) -> SegmentStatus:
        """The counters as one consistent snapshot."""
        with self._lock:
            return SegmentStatus(
                self.segments_written,
                self.rows_lost,
                self.errors,
                self.rows_unwritten,
                self.last_error,
                0 if self._events is None else self._events.events_written,
                0 if self._events is None else self._events.events_lost,
                self.events_errors,
            )

    def start(self) -> None:
        if self._thread is not None and self._thread.is_alive():
            return
        if self._events is None:
            self._events = EventsSink(events_path(self._spool))
        if self._stats_out is None:
            # No figures in the spool when it cannot be opened: a live view infers them.
            with contextlib.suppress(OSError):
                self._stats_out = StatsPublisher(self._spool)
        self._stop.clear()
        self._thread = threading.Thread(target=self._run, name="stroboscope-segments", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        """Stop the thread and write what is left as a last segment.

        The last segment is tried ``STOP_ATTEMPTS`` times; when every try fails its rows stay in
        the spool (``recover`` reads them), :meth:`status` counts them in ``rows_unwritten``
        and a warning is logged; nothing is raised.
        """
        self._join_thread()
        self.append_events()
        try:
            if self._keep_rest or self._last_flush():
                return
        finally:
            self._publish_last()
        _LOG.warning(
            "%d rows of %s are in no segment (%s); they stay in the spool: "
            "`stroboscope recover %s -o FILE` reads them",
            self.rows_unwritten,
            self._spool,
            self.last_error,
            self._spool,
        )

    def keep_rest(self) -> None:
        """From now on :meth:`stop` writes no last segment: the rows since the last one stay in
        the ring (and the spool) for :meth:`take_rest` (a clean end writes them to its output,
        once). The writer thread still writes a segment whenever the ring needs it."""
        self._keep_rest = True

    def use_pieces(self) -> bool:
        """From now on segments are pieces appended to the spool's pieces file, in the form
        of the recording's output (:func:`stroboscope.formats.segments.stored_schema`), for a
        finish that makes that file its output. Only before the first segment file: True when
        the writer writes pieces."""
        with self._lock:
            if self._pieces is None and not self._written:
                self._pieces = pieces_path(self._spool)
            return self._pieces is not None

    @property
    def pieces(self) -> str | None:
        """The pieces file the segments go to (None: a file per segment)."""
        return self._pieces

    @property
    def written(self) -> list[Written]:
        """The segments this writer wrote, in order (their rows are no longer all in the ring)."""
        with self._lock:
            return list(self._written)

    def take_rest(self) -> Frame:
        """The rows in no segment yet, copied from the ring (the cursor moves past them; rows
        the ring overwrote before they were taken are counted in :attr:`rows_lost`). For the
        end of a stopped recording (:meth:`keep_rest`)."""
        with self._lock:
            frame = Frame(self._core.copy_since(self._cursor))
            self.rows_lost += frame.rows_lost
            self._cursor = frame.first_row + len(frame)
            return frame

    def _join_thread(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
            self._thread = None

    def _last_flush(self) -> bool:
        """Write what is left, ``STOP_ATTEMPTS`` tries with a doubling wait; False when every
        try failed (the rows stay unwritten, counted). A stop that already gave up on these
        very rows (stop() then close(), nothing new) does not try again and says True."""
        written = int(self._core.stats()["rows_written"])
        if self._gave_up_at == written:
            return True
        self._gave_up_at = None
        wait = RETRY_FIRST_S
        for attempt in range(STOP_ATTEMPTS):
            if self._try_flush():
                return True
            if attempt + 1 < STOP_ATTEMPTS:
                time.sleep(wait)
                wait *= 2
        self._gave_up_at = written
        return False

    def _run(self) -> None:
        poll = min(self._seconds / 2, 0.25)
        longest = min(RETRY_MAX_S, max(self._seconds, RETRY_FIRST_S))
        last = time.monotonic()
        retry_in = 0.0  # > 0 while the latest write failed
        while not self._stop.wait(retry_in or poll):
            self.append_events()
            try:
                stats = self._core.stats()
                pending = int(stats["rows_written"]) - self._cursor
                self._publish(stats)
            except Exception:  # the sampler closing under us: nothing to decide this round
                continue
            if retry_in or time.monotonic() - last >= self._seconds or pending >= self._rows:
                if self._try_flush():
                    retry_in = 0.0
                    last = time.monotonic()
                else:
                    retry_in = min(max(2 * retry_in, RETRY_FIRST_S), longest)

    def append_events(self) -> None:
        """Append the scope events recorded since the last append to ``PATH.events``; a failure
        is counted (``events_errors``) and logged, and the events are tried again next time."""
        if self._events is None:
            return
        with self._lock:
            try:
                self._events.append()
            except Exception as exc:
                self.events_errors += 1
                self._log(
                    logging.WARNING,
                    "scope events of %s not written to %s (%s: %s); retrying",
                    self._spool,
                    self._events.path,
                    type(exc).__name__,
                    exc,
                )

    def _publish(self, stats: dict[str, object]) -> None:
        """The sampler's figures and :attr:`rows_lost` into the spool's header, for a view that
        follows the spool (:mod:`stroboscope.formats.spool_stats`); a failure stops publishing."""
        if self._stats_out is None:
            return
        try:
            self._stats_out.publish(stats, self.rows_lost)
        except OSError:
            self._stats_out.close()
            self._stats_out = None

    def _publish_last(self) -> None:
        """The stopped sampler's last figures (after the last segment), then no more."""
        # A sampler closing under us: the figures of the last poll stay.
        with contextlib.suppress(Exception):
            self._publish(self._core.stats())
        if self._stats_out is not None:
            self._stats_out.close()
            self._stats_out = None

    def _try_flush(self) -> bool:
        try:
            self.flush()
        except Exception:  # counted and logged by flush(); the rows stay in the spool
            return False
        return True

    def _failed(self, exc: BaseException, rows: int) -> None:
        self.errors += 1
        self.rows_unwritten = rows
        self.last_error = f"{type(exc).__name__}: {exc}"
        self._log(
            logging.WARNING,
            "segment of %s not written (%s); %d rows wait in the spool, retrying",
            self._spool,
            self.last_error,
            rows,
        )

    def flush(self) -> None:
        """Write the rows not yet in a segment as a new segment (nothing when there are none).

        Raises whatever the write raised, after counting it (:meth:`status`); the rows stay in
        the ring and the spool, and the next flush tries them again.
        """
        with self._lock:
            frame = Frame(self._core.copy_since(self._cursor))
            self.rows_lost += frame.rows_lost
            if len(frame) == 0:
                self.rows_unwritten = 0
                return
            try:
                table = frame.to_arrow()
                if self._pieces is not None:  # the output's form: the output is the pieces
                    table = table.cast(stored_schema(table.schema))
                meta = dict(table.schema.metadata or {})
                meta[FIRST_ROW_KEY] = str(frame.first_row).encode()
                table = table.replace_schema_metadata(meta)
                seq = self._seq + 1
                if self._pieces is not None:
                    final = self._pieces
                else:  # A name nobody holds: a file planted at the next name is never replaced.
                    while os.path.lexists(final := segment_path(self._spool, seq)):
                        seq += 1
                _write_segment(table, final)
            except Exception as exc:
                # The cursor moves to the frame's first row only: its rows are copied again (from
                # the ring) by the next try, and the rows before it, already counted in rows_lost,
                # are not counted again.
                self._cursor = frame.first_row
                self._failed(exc, len(frame))
                raise
            self._seq = seq
            self._cursor = frame.first_row + len(frame)
            self._written.append(Written(final, frame.first_row, len(frame)))
            self.segments_written += 1
            self.rows_unwritten = 0
            del frame, table
            # Arrow's allocator keeps what a segment freed for the next one: a recorder that
            # wakes once a segment would hold it for the whole run (bench/bench_recorder_rss.py).
            pa.default_memory_pool().release_unused()
