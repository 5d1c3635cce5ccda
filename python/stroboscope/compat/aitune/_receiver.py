"""aitune's receiver, ``ParentReceiver(queue)``: collects metric rows from a queue into a
crash-safe journal (the journal: :mod:`._journal`; the queue's intake: :mod:`._intake`).

Compatible with the pure-Python receiver design: a thread takes dict rows from a ``queue.Queue``
or a ``multiprocessing`` queue, ``get_metrics()`` returns them as a pandas DataFrame,
``snapshot(path)`` writes them to CSV or Parquet, and when the main process dies a watchdog
process writes every row taken from the queue to a CSV dump. Unlike that design, rows are not
kept in a Python list nor pickled to a helper process: they are appended to a journal file, so
memory stays flat on long runs and a SIGKILL loses nothing already taken.

The journal's format and how it reads back as a table: :mod:`stroboscope.compat.aitune._journal`.
"""

from __future__ import annotations

import os
import queue as _queue
import threading
import time
import weakref
from typing import TYPE_CHECKING, Any, Protocol

from stroboscope._base import lifecycle as _lifecycle
from stroboscope._base.checks import check_bool, check_file_dir, check_file_path, check_path
from stroboscope._base.extras import require
from stroboscope.compat.aitune._intake import Intake
from stroboscope.compat.aitune._journal import (
    Journal,
    read_journal,
    read_journal_fd,
    read_journal_rows,
    rows_to_table,
)
from stroboscope.formats.writers import write_table
from stroboscope.recording.watchdog import FORMATS, DumpJob, Watchdog

if TYPE_CHECKING:
    import pandas
    import pyarrow as pa

__all__ = ["ParentReceiver", "Receiver", "read_journal", "read_journal_rows", "rows_to_table"]


GET_TIMEOUT_S = 0.1
"""How long one blocking ``queue.get`` waits before ``keep_running`` is checked again (seconds)."""
MAX_BATCH_ROWS = 4096
"""At most this many rows are taken from the queue between two journal writes."""
FINAL_DRAIN_S = 1.0
"""On stop, rows already waiting in the queue are taken for at most this long (seconds)."""


class RowQueue(Protocol):
    """What the receiver needs of a queue: ``queue.Queue`` and ``multiprocessing`` queues."""

    def get(self, block: bool = ..., timeout: float | None = ...) -> Any: ...

    def get_nowait(self) -> Any: ...


# -- the receiver ------------------------------------------------------------------------------


class Receiver:
    """Collects dict rows from ``queue`` on a thread, journaled to a crash-safe file.

    Parameters
    ----------
    queue : queue.Queue or multiprocessing queue
        Where the rows (dicts; keys may differ between rows) arrive. A row that cannot be
        written (not a mapping, nested too deep) is refused and counted, a value JSON cannot
        hold is written as its ``str()``; see :meth:`stats`. A bad row never stops the receiver.
    journal_dir : str or os.PathLike, optional
        An existing directory owned by this user, for the journal file. Default: a new private
        temporary directory.
    crash_safe : bool
        Start a :class:`~stroboscope.recording.watchdog.Watchdog` with :meth:`start`, which
        dumps the rows taken so far when this process dies and then removes the journal
        (default True).
        Without it, a crash leaves the journal behind (see :attr:`journal_path`).
    dump_path : str or os.PathLike, optional
        The crash dump's path. Default: ``$STROBOSCOPE_DUMP_PATH``, else
        ``stroboscope-dump-YYYYmmdd-HHMMSS-<pid>.csv`` in the working directory.
    dump_format : {"csv", "parquet"}
        The crash dump's format (default CSV).

    Attributes
    ----------
    keep_running : threading.Event
        Set while the thread runs; :meth:`stop` clears it.
    lock : threading.Lock
        Held while the journal is written or reset, and while a reader takes its size (not
        while the rows are read and converted).
    """

    def __init__(
        self,
        queue: RowQueue,
        *,
        journal_dir: str | os.PathLike[str] | None = None,
        crash_safe: bool = True,
        dump_path: str | os.PathLike[str] | None = None,
        dump_format: str = "csv",
    ) -> None:
        if not all(callable(getattr(queue, m, None)) for m in ("get", "get_nowait")):
            raise TypeError(
                "queue must be a queue.Queue or a multiprocessing queue, "
                f"got {type(queue).__name__}"
            )
        if dump_format not in FORMATS:
            raise ValueError(f"dump_format must be one of {FORMATS}, got {dump_format!r}")
        # The journal is made with O_EXCL there, so the directory rule of spools applies.
        self._journal_dir = (
            None
            if journal_dir is None
            else check_file_dir(
                "journal_dir", os.path.abspath(check_path("journal_dir", journal_dir))
            )
        )
        self.queue = queue
        self.crash_safe = check_bool("crash_safe", crash_safe)
        self.dump_path = None if dump_path is None else check_file_path("dump_path", dump_path)
        self.dump_format = dump_format
        self.keep_running = threading.Event()
        self.lock = threading.Lock()
        self._read_lock = threading.Lock()  # one reader at a time: snapshot, get_metrics
        self._journal: Journal | None = None
        self._thread: threading.Thread | None = None
        self._watchdog: Watchdog | None = None
        self._intake = Intake(self.lock, self._open_journal)

    # -- lifecycle ---------------------------------------------------------------------------

    def start(self) -> None:
        """Open the journal, start the watchdog (when ``crash_safe``) and the receiving thread.

        Raises
        ------
        RuntimeError
            When the receiver is already running.
        """
        if self._thread is not None:
            raise RuntimeError("this ParentReceiver is already running; stop() it first")
        if self._journal is None:
            journal = Journal(self._journal_dir)
            self._journal = journal
            weakref.finalize(self, journal.close).atexit = False
            _lifecycle.register(self)
        if self.crash_safe and self._watchdog is None:
            job = DumpJob(
                "journal",
                self._journal.path,
                self.dump_path,
                self.dump_format,
                remove_source=True,
                remove_source_dir=self._journal.dir_owned,
            )
            self._watchdog = Watchdog([job]).start()
        self.keep_running.set()
        self._thread = threading.Thread(target=self.run, name="stroboscope-receiver", daemon=True)
        self._thread.start()

    def run(self) -> None:
        """The loop of the receiving thread: take rows (waiting ``GET_TIMEOUT_S`` at most), then
        every row already waiting, journal them, repeat while ``keep_running`` is set. Rows still
        waiting when it is cleared are taken too."""
        if self._journal is None:
            raise RuntimeError("run() is the thread of start(); call start() instead")
        get = self.queue.get
        while self.keep_running.is_set():
            try:
                first = get(timeout=GET_TIMEOUT_S)
            except _queue.Empty:
                continue
            except Exception as exc:  # a closed or broken multiprocessing queue
                self._intake.queue_error(exc)
                time.sleep(GET_TIMEOUT_S)
                continue
            self._intake.journal_batch_safely(self._drain([first]))
        # Take what is already waiting (for at most FINAL_DRAIN_S against an endless producer).
        deadline = time.monotonic() + FINAL_DRAIN_S
        while time.monotonic() < deadline:
            batch = self._drain([])
            self._intake.journal_batch_safely(batch)
            if len(batch) < MAX_BATCH_ROWS:
                break

    def stop(self) -> None:
        """Stop the thread (taking the rows already waiting) and the watchdog, which exits
        without dumping. The rows stay readable; a second call does nothing.

        Raises
        ------
        RuntimeError
            When called before :meth:`start`.
        """
        self._require_started("stop")
        self.keep_running.clear()
        thread, self._thread = self._thread, None
        if thread is not None and thread is not threading.current_thread():
            thread.join()
        watchdog, self._watchdog = self._watchdog, None
        if watchdog is not None:
            watchdog.stop()

    # -- data --------------------------------------------------------------------------------

    def snapshot(self, path: str | os.PathLike[str], reset_metrics: bool = True) -> None:
        """Write the rows collected so far to ``path``: Parquet when it ends in ``.parquet`` or
        ``.pq``, CSV for any other name (created with mode 0600). With ``reset_metrics`` the
        rows written are then cleared from the journal, so the next snapshot holds only newer
        rows (rows that arrive while the snapshot is written are kept for the next one).

        The journal is read a block at a time into Arrow, without holding the lock the
        receiving thread writes under: rows keep being received meanwhile.

        Raises
        ------
        RuntimeError
            When called before :meth:`start`.
        """
        check_bool("reset_metrics", reset_metrics)
        self._require_started("snapshot")
        with self._read_lock:
            journal = self._open_journal()
            table, end = self._read_table(journal)
            write_table(table, path, default="csv")
            if reset_metrics:
                journal.drop_prefix(end, self.lock)

    def get_metrics(self) -> pandas.DataFrame:
        """The rows collected so far (since the last reset) as a pandas DataFrame: one column per
        key of any row, NaN/None where a row lacks it. Rows keep being received meanwhile.

        Raises
        ------
        RuntimeError
            When called before :meth:`start`.
        """
        self._require_started("get_metrics")
        require("pandas", "get_metrics()", "pandas")
        with self._read_lock:
            table, _ = self._read_table(self._open_journal())
        df: pandas.DataFrame = table.to_pandas()
        return df

    def _read_table(self, journal: Journal) -> tuple[pa.Table, int]:
        """The journal's rows as a table and the journal size they were read up to. The lock is
        held only to take the size (the rows up to it are complete lines then); the reading is
        done under ``_read_lock`` alone, which the journal's descriptor only changes under."""
        with self.lock:
            end = journal.size()
            fd = journal.fd
        if fd is None:
            raise RuntimeError("the receiver's journal is closed")
        table, _damaged = read_journal_fd(fd, end)
        return table, end

    # -- introspection -----------------------------------------------------------------------

    @property
    def rows_received(self) -> int:
        """Rows taken from the queue and journaled since :meth:`start` (resets do not count)."""
        return self._intake.rows

    @property
    def rows_refused(self) -> int:
        """Rows taken from the queue and not journaled because they cannot be written: not a
        mapping, nested deeper than ``MAX_DEPTH`` levels, or holding a key or value that has no
        text form (see :meth:`stats`)."""
        return self._intake.refused

    def stats(self) -> dict[str, int]:
        """What happened to the rows taken from the queue since :meth:`start`.

        Returns
        -------
        dict
            ``rows_received``: rows journaled (resets do not count);
            ``rows_refused``: rows left out because they cannot be written (not a mapping,
            nested deeper than ``stroboscope.compat.aitune._journal.MAX_DEPTH`` levels, a key or
            value whose ``str()`` fails); each is logged, at most once a minute;
            ``rows_with_text``: rows journaled with a value written as its ``str()`` (an
            object JSON cannot hold, e.g. a tensor of several elements);
            ``rows_renamed``: rows journaled with keys renamed because two of them had the same
            JSON text (``1`` and ``"1"``: the second becomes ``"1~2"``);
            ``rows_lost``: rows the journal could not take (a full disk), logged as errors;
            ``queue_errors``: failed reads of the queue.
        """
        return self._intake.stats()

    @property
    def journal_path(self) -> str | None:
        """The journal file (``None`` before :meth:`start`)."""
        return None if self._journal is None else self._journal.path

    @property
    def watchdog(self) -> Watchdog | None:
        """The running watchdog (``None`` when not crash-safe or not running)."""
        return self._watchdog

    @property
    def running(self) -> bool:
        """Whether the receiving thread runs."""
        return self._thread is not None and self._thread.is_alive()

    def __repr__(self) -> str:
        state = "running" if self.running else "not running"
        return f"<stroboscope.Receiver rows={self._intake.rows} {state}>"

    # -- internals ---------------------------------------------------------------------------

    def _drain(self, batch: list[Any]) -> list[Any]:
        get_nowait = self.queue.get_nowait
        while len(batch) < MAX_BATCH_ROWS:
            try:
                batch.append(get_nowait())
            except _queue.Empty:
                break
            except Exception as exc:
                self._intake.queue_error(exc)
                break
        return batch

    def _open_journal(self) -> Journal:
        if self._journal is None:
            raise RuntimeError("the receiver has no journal; call start() first")
        return self._journal

    def _require_started(self, what: str) -> None:
        if self._journal is None:
            raise RuntimeError(f"{what}() called before start()")

    def _at_exit(self) -> None:
        if self._journal is None or os.getpid() != self._journal.owner:
            return
        if self._thread is not None:
            self.stop()
        elif self._watchdog is not None:
            self._watchdog.stop()
        with self.lock:
            self._journal.close()


class ParentReceiver(Receiver):
    """Collects dict rows from ``queue`` on a thread, journaled to a crash-safe file.

    The drop-in name of :class:`stroboscope.compat.aitune._receiver.Receiver`; see it for the
    parameters, the journal format and the crash dump.
    """

    def __repr__(self) -> str:
        state = "running" if self.running else "not running"
        return f"<stroboscope.compat.aitune.ParentReceiver rows={self.rows_received} {state}>"
