"""Writing a spool's scope-events sidecar (``PATH.events``; its layout and chunk encoder are
:mod:`stroboscope.formats.events_file`'s): the sink the segment writer appends with. A write cut
short (a full disk) is cut back and tried again, the magic too, so the file recovers when space
returns."""

from __future__ import annotations

import contextlib
import errno
import os

from stroboscope.formats.events_file import MAGIC, MAX_CHUNK_EVENTS, events_chunk, strings_chunk


def open_for_append(path: str, made: tuple[int, int] | None) -> tuple[int, tuple[int, int]]:
    """An fd open for writing on the sidecar and its ``(device, inode)``.

    The first time (``made`` None) the file is created (0600, ``O_EXCL | O_NOFOLLOW``: never an
    existing file or a link); after that it is opened again only if it is still the file made
    then (``made``), so a file put at the name since is never written. Raises
    :class:`FileExistsError` when another file holds the name.
    """
    flags = os.O_WRONLY | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK
    if made is None:
        flags |= os.O_CREAT | os.O_EXCL
    try:
        fd = os.open(path, flags, 0o600)
    except FileExistsError:
        raise FileExistsError(
            errno.EEXIST,
            "another file holds the events file's name (not made by this recording): scope "
            "events are not kept, the rows are",
            path,
        ) from None
    try:
        st = os.fstat(fd)
        if made is not None and (st.st_dev, st.st_ino) != made:
            raise FileExistsError(
                errno.EEXIST, "the events file was replaced since it was made: not written", path
            )
    except BaseException:
        os.close(fd)
        raise
    return fd, (st.st_dev, st.st_ino)


def append(fd: int, offset: int, data: bytes, path: str) -> int:
    """Write ``data`` at ``offset`` whole (one ``pwrite``, finished if it came back short) and
    return the offset after it. On an error the file is cut back to ``offset`` (as far as it
    can be) and nothing after ``offset`` counts: the next append writes there again."""
    done = 0
    try:
        while done < len(data):
            n = os.pwrite(fd, data[done:], offset + done)
            if n <= 0:
                raise OSError(errno.ENOSPC, "no progress writing the events file", path)
            done += n
    except BaseException:
        with contextlib.suppress(OSError):
            os.ftruncate(fd, offset)  # no part of a chunk is left for a reader to meet
        raise
    return offset + done


class EventsSink:
    """Appends the events log's new events (and new interned strings) to a spool's sidecar.

    The file is made by the first :meth:`append`; events are those recorded from when the sink
    was made on. Each append writes whole chunks (:func:`append`), so a crash at any point
    leaves a file whose every complete chunk is intact.
    """

    def __init__(self, path: str) -> None:
        # Not at import: the watchdog child reads without the extension.
        from stroboscope.sampling import events_read, events_strings, events_written

        self._read, self._strings_from = events_read, events_strings
        self.path = path
        self._offset = 0  # 0 until the magic is written; then where the next chunk goes
        self._made: tuple[int, int] | None = None  # (device, inode) of the file once made
        self._next = events_written()
        self._strings = 0
        self.events_written = 0
        self.events_lost = 0

    def append(self) -> None:
        """Write what was recorded since the last append; raises what the write raised (the
        same events, and the magic while it is not written, are tried again by the next
        append, while the log still holds them: a full disk that frees space loses nothing)."""
        batch = self._read(self._next)
        # Read after the events: every id they hold was interned before they were pushed.
        strings = self._strings_from(self._strings)
        data = MAGIC if self._offset == 0 else b""
        if strings:
            data += strings_chunk(self._strings, strings)
        table = batch.to_arrow()
        for start in range(0, max(table.num_rows, 1), MAX_CHUNK_EVENTS):
            if table.num_rows == 0 and batch.lost == 0:
                break
            part = table.slice(start, MAX_CHUNK_EVENTS)
            data += events_chunk(batch.first + start, batch.lost if start == 0 else 0, part)
        if data:
            # Opened for each append (a few times a second at most): no descriptor is held
            # between them, so the sink needs no closing.
            fd, self._made = open_for_append(self.path, self._made)
            try:
                self._offset = append(fd, self._offset, data, self.path)
            finally:
                os.close(fd)
        self._strings += len(strings)
        self._next = batch.next
        self.events_written += table.num_rows
        self.events_lost += batch.lost
