"""The receiving thread's accounting: each batch of rows taken from the queue is encoded,
counted and appended to the journal; a bad row or a full disk is counted and logged (at most once
a minute), never fatal to the thread. Used by :class:`stroboscope.compat.aitune._receiver.Receiver`.
"""

from __future__ import annotations

import logging
import threading
from typing import Any, Callable

from stroboscope._base.ratelimit import RateLimitedLog
from stroboscope.compat.aitune._journal import Journal, JournalWriteError, encode_batch

logger = logging.getLogger("stroboscope.receiver")


class Intake:
    """Journals batches of rows and counts what became of them (see :meth:`stats`).

    Parameters
    ----------
    lock : threading.Lock
        The receiver's lock, held while the journal is appended to.
    journal : callable
        Returns the open journal (raises when there is none).
    """

    def __init__(self, lock: threading.Lock, journal: Callable[[], Journal]) -> None:
        self.lock = lock
        self._journal = journal
        self.rows = 0
        self.refused = 0
        self.with_text = 0
        self.renamed = 0
        self.lost = 0
        self.errors = 0
        self._bad_row_log = RateLimitedLog(logger)
        self._write_log = RateLimitedLog(logger)

    def stats(self) -> dict[str, int]:
        """The counts, under the names ``Receiver.stats`` documents."""
        return {
            "rows_received": self.rows,
            "rows_refused": self.refused,
            "rows_with_text": self.with_text,
            "rows_renamed": self.renamed,
            "rows_lost": self.lost,
            "queue_errors": self.errors,
        }

    def journal_batch(self, batch: list[Any]) -> None:
        """Encode, count and append one batch of rows."""
        if not batch:
            return
        try:
            encoded = encode_batch(batch)
        except Exception as exc:  # pragma: no cover - encode_batch refuses rows, never raises
            self.refused += len(batch)
            self._bad_row_log(
                logging.WARNING, "ParentReceiver: %d rows refused: %s", len(batch), exc
            )
            return
        self.with_text += encoded.with_text
        self.renamed += encoded.renamed
        if encoded.refused:
            self.refused += encoded.refused
            self._bad_row_log(
                logging.WARNING,
                "ParentReceiver: %d row(s) refused (%d so far; first: %s)",
                encoded.refused,
                self.refused,
                encoded.first_refusal,
            )
        if not encoded.data:
            return
        with self.lock:
            try:
                self._journal().append(encoded.data)
            except OSError as exc:
                kept = exc.rows_kept if isinstance(exc, JournalWriteError) else 0
                self.rows += kept
                self.lost += encoded.rows - kept
                self._write_log(
                    logging.ERROR,
                    "ParentReceiver: %d row(s) lost, the journal could not be written "
                    "(%d lost so far): %s",
                    encoded.rows - kept,
                    self.lost,
                    exc,
                )
                return
            self.rows += encoded.rows

    def journal_batch_safely(self, batch: list[Any]) -> None:
        """:meth:`journal_batch`, and whatever it raises is counted and logged: the receiving
        thread never dies of a row."""
        try:
            self.journal_batch(batch)
        except Exception as exc:  # pragma: no cover - _journal_batch handles what it expects
            self.lost += len(batch)
            self._write_log(
                logging.ERROR,
                "ParentReceiver: %d row(s) lost: %s: %s",
                len(batch),
                type(exc).__name__,
                exc,
            )

    def queue_error(self, exc: Exception) -> None:
        """Count (and log the first) failed read of the queue."""
        if not self.errors:
            logger.warning(
                "ParentReceiver: reading the queue failed: %s: %s", type(exc).__name__, exc
            )
        self.errors += 1
