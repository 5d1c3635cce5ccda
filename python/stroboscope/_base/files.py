"""Files the package writes: created with mode 0600 (only the owner can read them), never through a
symbolic link, and outputs written whole before they replace anything; and files it reads from a
path a user gave: regular files only, opened without ever blocking.

:func:`open_private` opens a file that is written as it goes (a sender's CSV or JSON lines);
:func:`replace_private` writes a finished output (a Parquet or CSV export, a segment) into a
temporary file with an unpredictable name beside it and renames it into place only once the
whole file is written, so a failure half-way (a bad argument, a full disk) leaves what was at
the path before intact.
"""

from __future__ import annotations

import contextlib
import errno
import os
import stat
import tempfile
from collections.abc import Iterator
from typing import BinaryIO


def file_kind(mode: int) -> str:
    """What a file that is not a regular one is, for a message (``"a FIFO"``, ...)."""
    if stat.S_ISDIR(mode):
        return "a directory"
    if stat.S_ISFIFO(mode):
        return "a FIFO"
    if stat.S_ISCHR(mode):
        return "a character device"
    if stat.S_ISBLK(mode):
        return "a block device"
    if stat.S_ISSOCK(mode):
        return "a socket"
    return "not a regular file"


def why_unreachable(path: str | os.PathLike[str]) -> str | None:
    """Why ``path``, which a user named and which ``os.path.exists`` calls absent, is so when it
    is not plain absence: ``"is a symbolic link loop"``, ``"is a dangling symbolic link (to
    'x')"``; None when nothing is there at all (the caller says "no such file")."""
    try:
        os.stat(path)
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            return "is a symbolic link loop"
        if os.path.islink(path):
            return f"is a dangling symbolic link (to {os.readlink(path)!r})"
        if exc.errno != errno.ENOENT:
            return f"cannot be reached: {exc.strerror}"
    return None


def open_regular(
    path: str | os.PathLike[str],
    what: str,
    *,
    follow: bool = True,
    error: type[Exception] = ValueError,
) -> tuple[int, os.stat_result]:
    """An fd open for reading on ``path`` and its stat, when it is a regular file.

    Every reader of a path a user gave (a recording, a dataset's files, a spool, its segments
    and sidecars, a provenance sidecar, a trace) opens it here: ``O_NONBLOCK`` (a FIFO is
    refused, never waited on), then ``fstat``; a FIFO, device, socket or directory is closed
    and refused. ``follow=False`` adds ``O_NOFOLLOW`` (a symbolic link is refused). The fd is
    blocking again when returned.

    Raises
    ------
    error
        (ValueError by default) ``"{what} {path} does not exist"``, ``"... is a FIFO, not a
        regular file"``, ``"... cannot be opened: {reason}"``.
    """
    p = os.fspath(path)
    flags = os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC | (0 if follow else os.O_NOFOLLOW)
    try:
        fd = os.open(p, flags)
    except FileNotFoundError:
        raise error(f"{what} {p} {why_unreachable(p) or 'does not exist'}") from None
    except OSError as exc:
        if exc.errno == errno.ELOOP and follow:
            raise error(f"{what} {p} {why_unreachable(p) or 'cannot be opened'}") from None
        if exc.errno == errno.ELOOP and not follow and os.path.islink(p):
            raise error(
                f"{what} {p} is a symbolic link: stroboscope writes segments as regular files"
            ) from None
        raise error(f"{what} {p} cannot be opened: {exc.strerror or exc}") from None
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise error(f"{what} {p} is {file_kind(st.st_mode)}, not a regular file")
        os.set_blocking(fd, True)
    except BaseException:
        os.close(fd)
        raise
    return fd, st


def fd_source(fd: int) -> str:
    """The path of an open descriptor, ``/proc/self/fd/N``, for a reader written in C++
    (pyarrow): it opens the very file checked through ``fd`` and reads it with its own native
    file. Never hand pyarrow a Python file object: it is released on pyarrow's I/O threads, which
    can abort the interpreter at exit (apache/arrow issue 49942)."""
    return f"/proc/self/fd/{fd}"


@contextlib.contextmanager
def regular_source(
    path: str | os.PathLike[str], what: str, *, error: type[Exception] = ValueError
) -> Iterator[str]:
    """:func:`open_regular`, then :func:`fd_source` of it for pyarrow; closed on exit."""
    fd, _st = open_regular(path, what, error=error)
    try:
        yield fd_source(fd)
    finally:
        os.close(fd)


def open_regular_file(
    path: str | os.PathLike[str], what: str, *, error: type[Exception] = ValueError
) -> BinaryIO:
    """:func:`open_regular` as a binary file object (for pyarrow readers, ``json.load``)."""
    fd, _st = open_regular(path, what, error=error)
    return os.fdopen(fd, "rb")


def read_regular(
    path: str | os.PathLike[str],
    what: str,
    *,
    limit: int | None = None,
    error: type[Exception] = ValueError,
) -> bytes:
    """The bytes of a small file a user named (a marker, an owner record, a sidecar), read
    through :func:`open_regular`; with ``limit``, a larger file is refused (``error``)."""
    with open_regular_file(path, what, error=error) as f:
        data = f.read() if limit is None else f.read(limit + 1)
    if limit is not None and len(data) > limit:
        raise error(f"{what} {os.fspath(path)} is larger than {limit} bytes: not such a file")
    return data


def _refuse_symlink(path: str, exc: OSError) -> OSError:
    """The error for an ``O_NOFOLLOW`` open that met a symlink (ELOOP), naming the path."""
    if exc.errno == errno.ELOOP and os.path.islink(path):
        return OSError(
            errno.ELOOP,
            "refusing to write through a symbolic link (remove it or give another path)",
            path,
        )
    return exc


def open_private(path: str | os.PathLike[str]) -> BinaryIO:
    """Open ``path`` for writing (truncating), creating it with mode 0600.

    A symbolic link at ``path`` is refused (``O_NOFOLLOW``: never written through), and so is
    anything that is not a regular file (a FIFO would block, a device is not an output). An
    existing regular file keeps its inode but has its mode narrowed to 0600 before anything is
    written.

    Raises
    ------
    OSError
        With ``filename`` set to ``path``: ELOOP for a symbolic link, EINVAL for a FIFO, device,
        socket or directory, or the error of the open itself.
    """
    p = os.fspath(path)
    flags = os.O_WRONLY | os.O_CREAT | os.O_CLOEXEC | os.O_NOFOLLOW | os.O_NONBLOCK
    try:
        # No O_TRUNC yet: nothing is truncated before the file is known to be a regular one.
        fd = os.open(p, flags, 0o600)
    except OSError as exc:
        if exc.errno == errno.ENXIO:  # a FIFO nobody reads (O_NONBLOCK instead of blocking)
            raise OSError(errno.EINVAL, "not a regular file (a FIFO)", p) from None
        raise _refuse_symlink(p, exc) from None
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise OSError(errno.EINVAL, "not a regular file (a FIFO, device or socket)", p)
        os.set_blocking(fd, True)
        os.ftruncate(fd, 0)
        os.fchmod(fd, 0o600)
        return os.fdopen(fd, "wb")
    except BaseException:
        os.close(fd)
        raise


def check_replaceable(path: str) -> None:
    """Refuse to replace anything at ``path`` but a regular file (see :func:`replace_private`)."""
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        return
    except OSError as exc:  # a path through a file, too long, ...: named
        raise OSError(exc.errno, exc.strerror, path) from None
    if stat.S_ISLNK(st.st_mode):
        raise OSError(
            errno.ELOOP,
            "is a symbolic link: refusing to replace it or write through it (remove it or give "
            "the path it points to)",
            path,
        )
    if stat.S_ISDIR(st.st_mode):
        raise IsADirectoryError(errno.EISDIR, "is a directory; give a file path", path)
    if not stat.S_ISREG(st.st_mode):
        raise OSError(
            errno.EINVAL,
            f"is {file_kind(st.st_mode)}, not a regular file: refusing to replace it",
            path,
        )


@contextlib.contextmanager
def replace_private(path: str | os.PathLike[str]) -> Iterator[BinaryIO]:
    """Write a new file at ``path`` whole, or not at all.

    Yields a binary file created with mode 0600 under an unpredictable name in the same
    directory (``O_EXCL | O_NOFOLLOW``: a planted file or symlink is never opened). When the
    ``with`` body finishes, the file is flushed to disk and renamed over ``path``; when the body
    raises, the temporary file is removed and whatever was at ``path`` is left as it was.

    Only a regular file (or nothing) at ``path`` is replaced: a symbolic link is refused (never
    followed, never silently swapped for a file: remove it or give the real path), and so is a
    FIFO, device, socket or directory (each is checked before anything is written, and again
    just before the rename).

    Raises
    ------
    IsADirectoryError
        When ``path`` is a directory.
    OSError
        With ``filename`` set to ``path``: ELOOP for a symbolic link, EINVAL for a FIFO,
        device or socket.
    """
    p = os.fspath(path)
    check_replaceable(p)
    directory, name = os.path.split(os.path.abspath(p))
    try:
        fd, tmp = tempfile.mkstemp(prefix=f".{name}.", suffix=".tmp", dir=directory)
    except OSError as exc:  # errors name the caller's path, never the temporary one
        raise OSError(exc.errno, exc.strerror, p) from None
    try:
        with os.fdopen(fd, "wb") as f:
            yield f
            f.flush()
            os.fsync(f.fileno())
        check_replaceable(p)  # still so: nothing was put there while the file was written
        os.replace(tmp, p)
    except BaseException as exc:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        if isinstance(exc, OSError) and exc.errno is not None:
            raise OSError(exc.errno, exc.strerror, p) from exc
        raise


def pread_full(fd: int, size: int, offset: int) -> bytes:
    """``size`` bytes of ``fd`` at ``offset`` (fewer only where the file ends): ``os.pread``
    until done, since one call may return less than asked (the first call's bytes as they
    are when it returns them all: no copy)."""
    first = os.pread(fd, size, offset)
    if len(first) == size or not first:
        return first
    out = bytearray(first)
    while len(out) < size:
        chunk = os.pread(fd, size - len(out), offset + len(out))
        if not chunk:
            break
        out += chunk
    return bytes(out)


def same_file(a: str | os.PathLike[str], b: str | os.PathLike[str]) -> bool:
    """Whether two paths name one file: equal once symlinks, ``..`` and relative parts are
    resolved (also for paths that do not exist yet), or hard links to one inode."""
    if os.path.realpath(a) == os.path.realpath(b):
        return True
    try:
        return os.path.samefile(a, b)
    except OSError:
        return False


def identity(path: str | os.PathLike[str]) -> tuple[int, int] | None:
    """``(device, inode)`` of the file at ``path`` (a link itself, not followed); None if none."""
    try:
        st = os.lstat(path)
    except OSError:
        return None
    return st.st_dev, st.st_ino


def unlink_if_same(path: str | os.PathLike[str], made: tuple[int, int] | None) -> None:
    """Remove ``path`` only if it still holds the file :func:`identity` saw (``made``): a file
    another process put at that name since is never removed. Errors are ignored."""
    if made is not None and identity(path) == made:
        with contextlib.suppress(OSError):
            os.unlink(path)
