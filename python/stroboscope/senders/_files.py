"""Helpers for the senders that write files: private text files, part names, time formatting."""

from __future__ import annotations

import io
import os
from datetime import datetime, timezone
from pathlib import Path
from typing import TextIO

from stroboscope._base.files import open_private


def open_private_text(path: str | os.PathLike[str]) -> TextIO:
    """Open ``path`` for writing text (UTF-8, no newline translation), created with mode 0600."""
    return io.TextIOWrapper(open_private(path), encoding="utf-8", newline="")


def part_path(path: str | os.PathLike[str], index: int) -> Path:
    """The ``index``-th part of a rolling file: ``metrics.csv`` → ``metrics.csv`` for 0,
    ``metrics.1.csv`` for 1, and so on."""
    p = Path(path)
    if index == 0:
        return p
    return p.with_name(f"{p.stem}.{index}{p.suffix}")


def seconds_iso_utc(timestamp: float) -> str:
    """UTC seconds since the epoch (a float, as :func:`time.time`) → ISO-8601 with microseconds
    and a ``Z`` (``2026-12-03T10:00:00.250000Z``). Not the provenance's ``iso_utc``, which
    takes integer ns and writes all nine digits."""
    dt = datetime.fromtimestamp(timestamp, tz=timezone.utc)
    return dt.strftime("%Y-%m-%dT%H:%M:%S.%fZ")
