"""The receiver's journal: JSON Lines rows appended with ``os.write``, read back as Arrow.

The file is here (:class:`Journal`); rows become lines in
:mod:`stroboscope.formats.journal_encode` and lines become Arrow in
:mod:`stroboscope.formats.journal_read` (the journal codec, both re-exported here). Standard
library and pyarrow only, so the watchdog child can read a journal without pandas.

Journal format (version 1)
--------------------------
A journal is a UTF-8 text file in JSON Lines form:

- one row per line: a JSON object (``json.dumps`` with ASCII output, so a line holds no raw
  newline), terminated by ``\\n``; the file has no header and no footer;
- keys are the row's keys as JSON writes them (``1`` → ``"1"``, ``True`` → ``"true"``, ``None``
  → ``"null"``; a key JSON cannot hold, such as a tuple, as ``str(key)``); when two keys of one
  object have the same text (``{1: …, "1": …}``), the first keeps it and each other takes the
  first of ``NAME~2``, ``NAME~3``, … that no key of the object has, so no value is lost;
- values are JSON numbers, strings, booleans, ``null``, arrays or objects; NaN and infinities
  are written as Python's ``json`` writes them (``NaN``, ``Infinity``, ``-Infinity``); numpy
  scalars are written as their Python value (``.item()``), dates and times in ISO 8601, anything
  else (a tensor of several elements, whose ``.item()`` raises) as ``str(value)``; nothing is
  ever pickled;
- a row is refused (counted in ``Receiver.stats()["rows_refused"]``, with a warning at most
  once a minute) when it is not a mapping, nests deeper than ``MAX_DEPTH`` (64) levels, or holds
  a key or value whose ``str()`` fails; a refused row never stops the receiver;
- rows are appended with ``os.write`` on an ``O_APPEND`` descriptor, one write per batch of rows
  taken from the queue, before the receiver blocks on the queue again (no fsync: a journal
  survives the death of the process, not of the machine); a write that fails part way (a full
  disk) is cut back to its last complete line, and the rows it could not write are counted as
  ``rows_lost``; if even the cut fails, the next write starts with ``\\n`` so that the torn line
  is one damaged line on reading and the next row stays whole;
- on reading, a last line without its ``\\n`` (a write torn by the process's death) is skipped, as
  is any line that is not a JSON object (counted as damaged);
- ``snapshot(path, reset_metrics=True)`` removes the rows the snapshot wrote: the journal is
  truncated to zero bytes, or, when rows arrived while the snapshot was written, a copy of those
  rows (a new file, mode 0600, in the same directory) is renamed over it; it then holds only the
  rows taken since.

Reading a journal into a table: nested objects are flattened with dotted keys (``{"network":
{"sent": 1}}`` → column ``network.sent``; names that come out equal, as ``{"x.y": 1, "x": {"y":
2}}`` does, are made unique the same way as keys: ``x.y`` and ``x.y~2``, in the row's order, depth
first), the columns are the union of all rows' keys in order of first appearance, a key missing from
a row is null, a column of integers and floats is float64, and a column whose values Arrow cannot
hold in one type (say numbers and strings), or holds only as lists, is written as text (a number as
JSON writes it, but NaN and the infinities as ``nan``, ``inf`` and ``-inf``, as a float column's
cells are written to CSV). The journal is read a block of about 256 KiB at a time
(each block's rows become Arrow arrays before the next is read), so ``snapshot``, ``get_metrics``
and the crash dump hold the Arrow form of the rows, not the whole journal as Python objects; and
they hold the receiver's lock only to take the journal's size, so rows keep being received
meanwhile.

The journal file is created with mode 0600, by default in a private directory made with
:func:`tempfile.mkdtemp` (mode 0700), and removed when the receiver is garbage-collected or the
interpreter exits (after a crash, by the watchdog once its dump is written).
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import logging
import os
import tempfile
import threading

from stroboscope.formats.journal_encode import (
    MAX_DEPTH,
    EncodedBatch,
    Refused,
    encode_batch,
    encode_rows,
)
from stroboscope.formats.journal_read import (
    parse_journal,
    read_journal,
    read_journal_fd,
    read_journal_rows,
    read_journal_table,
    rows_to_table,
    unique_names,
)

__all__ = [
    "MAX_DEPTH",
    "EncodedBatch",
    "Journal",
    "JournalWriteError",
    "Refused",
    "encode_batch",
    "encode_rows",
    "parse_journal",
    "read_journal",
    "read_journal_fd",
    "read_journal_rows",
    "read_journal_table",
    "rows_to_table",
    "unique_names",
]

logger = logging.getLogger("stroboscope.receiver")

JOURNAL_NAME = "journal.jsonl"
"""File name of a journal in its own private directory."""


class JournalWriteError(OSError):
    """A journal write that failed part way: ``rows_kept`` of its lines are in the journal."""

    def __init__(self, rows_kept: int, cause: OSError) -> None:
        super().__init__(cause.errno, cause.strerror or str(cause))
        self.rows_kept = rows_kept


class Journal:
    """The append-only journal file of one receiver (read and written through one descriptor)."""

    def __init__(self, journal_dir: str | None) -> None:
        self.dir_owned = journal_dir is None
        if journal_dir is None:
            self.dir = tempfile.mkdtemp(prefix="stroboscope-receiver-")  # mode 0700
            self.path = os.path.join(self.dir, JOURNAL_NAME)
            flags = os.O_RDWR | os.O_CREAT | os.O_EXCL | os.O_APPEND | os.O_CLOEXEC
            fd = os.open(self.path, flags, 0o600)
        else:
            self.dir = journal_dir
            # mkstemp: a new file (O_EXCL), mode 0600, close-on-exec
            fd, self.path = tempfile.mkstemp(
                prefix="stroboscope-receiver-", suffix=".jsonl", dir=journal_dir
            )
            fcntl.fcntl(fd, fcntl.F_SETFL, fcntl.fcntl(fd, fcntl.F_GETFL) | os.O_APPEND)
        self.fd: int | None = fd
        self.owner = os.getpid()
        self.torn = False
        """Whether the file ends in a torn line that a failed cut left (see :meth:`append`)."""

    def append(self, data: bytes) -> None:
        """Append ``data`` (whole lines). On a failed or short write the file is cut back to its
        last complete line, so no torn line is left for the next row to be glued to; when even
        that fails, the next append first ends the torn line (the reader then skips exactly it,
        as one damaged line).

        Raises
        ------
        JournalWriteError
            When not all of ``data`` could be written; ``rows_kept`` says how many of its lines
            are in the journal.
        """
        fd = self._fd()
        prefix = b"\n" if self.torn else b""
        data = prefix + data
        start = os.fstat(fd).st_size
        view = memoryview(data)
        done = 0
        try:
            while done < len(data):
                written = os.write(fd, view[done:])
                if written <= 0:  # pragma: no cover - a regular file writes or raises
                    raise OSError(errno.ENOSPC, "the journal write wrote nothing")
                done += written
        except OSError as exc:
            kept = data.rfind(b"\n", 0, done) + 1  # bytes up to the last complete line
            if kept < done:
                try:
                    os.ftruncate(fd, start + kept)
                except OSError:
                    self.torn = True
                else:
                    self.torn = bool(prefix) and kept == 0
            elif kept:
                self.torn = False
            lines = data.count(b"\n", 0, kept) - (1 if prefix and kept else 0)
            raise JournalWriteError(lines, exc) from exc
        self.torn = False

    def size(self) -> int:
        """The journal's size in bytes (its complete lines, unless :attr:`torn`)."""
        return os.fstat(self._fd()).st_size

    def truncate(self) -> None:
        """Empty the journal."""
        os.ftruncate(self._fd(), 0)
        self.torn = False

    def drop_prefix(self, end: int, lock: threading.Lock) -> None:
        """Remove the first ``end`` bytes (whole lines), keeping what was appended after them.

        ``lock`` is the one the writer appends under. When nothing was appended the file is
        truncated; otherwise the rest is copied to a new private file in the same directory that
        then replaces the journal (``rename``), so a reader of the path (the watchdog) sees either
        the old journal or the new one, never a journal without the rows appended since ``end``.
        The bulk of the copy is made without ``lock`` (the writer only appends past it); only the
        rows that arrived during that copy are copied under it, with the rename.
        """
        with lock:
            fd = self._fd()
            size = os.fstat(fd).st_size
            if size <= end:
                self.truncate()
                return
        new_fd, tmp = tempfile.mkstemp(
            prefix=".stroboscope-journal-", suffix=".tmp", dir=os.path.dirname(self.path)
        )
        try:
            self._copy(fd, new_fd, end, size)  # receiving goes on meanwhile
            with lock:
                self._copy(fd, new_fd, size, os.fstat(fd).st_size)  # what arrived meanwhile
                flags = fcntl.fcntl(new_fd, fcntl.F_GETFL)
                fcntl.fcntl(new_fd, fcntl.F_SETFL, flags | os.O_APPEND)
                os.replace(tmp, self.path)
                self.fd = new_fd
        except BaseException:
            os.close(new_fd)
            with contextlib.suppress(FileNotFoundError):
                os.unlink(tmp)
            raise
        os.close(fd)

    @staticmethod
    def _copy(src: int, dst: int, start: int, end: int) -> None:
        """Append bytes ``[start, end)`` of ``src`` to ``dst``, a block at a time."""
        offset = start
        while offset < end:
            chunk = os.pread(src, min(end - offset, 1 << 20), offset)
            if not chunk:
                break
            view = memoryview(chunk)
            while view:
                view = view[os.write(dst, view) :]
            offset += len(chunk)

    def _fd(self) -> int:
        if self.fd is None:
            raise RuntimeError("the receiver's journal is closed")
        return self.fd

    def close(self) -> None:
        """Close and delete the journal (only in the process that made it)."""
        fd, self.fd = self.fd, None
        if fd is None or os.getpid() != self.owner:
            return
        os.close(fd)
        for remove, path in ((os.unlink, self.path), (os.rmdir, self.dir)):
            if remove is os.rmdir and not self.dir_owned:
                continue
            try:
                remove(path)
            except FileNotFoundError:
                pass
            except OSError as exc:
                logger.warning("could not remove %s: %s", path, exc)
