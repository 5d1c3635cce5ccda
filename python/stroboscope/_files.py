"""Files the package writes are created with mode 0600 (only the owner can read them)."""

from __future__ import annotations

import os
from typing import BinaryIO


def open_private(path: str | os.PathLike[str]) -> BinaryIO:
    """Open ``path`` for writing (truncating), creating it with mode 0600.

    An existing file keeps its inode but has its mode narrowed to 0600 before anything is written.
    """
    fd = os.open(os.fspath(path), os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC, 0o600)
    try:
        os.fchmod(fd, 0o600)
        return os.fdopen(fd, "wb")
    except BaseException:
        os.close(fd)
        raise
