"""Shared events: the names a recorded command's processes and their recorder agree on (the
environment variables and the files' suffix), with nothing heavier than the standard library:
a process that only annotates reads them without loading the tables' libraries. The files and
their reader: :mod:`stroboscope.formats.shared_events` (which exports these names too)."""

from __future__ import annotations

import os
import re
import shutil
import stat
import tempfile
from collections.abc import Callable

__all__ = [
    "EDGE_COUNTERS",
    "EDGE_COUNTERS_ENV",
    "EVENTS_CAPACITY_ENV",
    "EVENTS_DIR_ENV",
    "FILE_SUFFIX",
    "NVTX_INJECTION_ENV",
    "PRIVATE_DIR_PREFIX",
    "remove_private_dirs",
]

EVENTS_DIR_ENV = "STROBOSCOPE_EVENTS_DIR"
"""The environment variable that names the directory of a recorded command's events."""
EVENTS_CAPACITY_ENV = "STROBOSCOPE_EVENTS_CAPACITY"
"""Optional: the ring size (records, a power of two in [2, 2**24]: :data:`MAX_CAPACITY`) of
each events file; a ring that laps overwrites its oldest records (counted ``overwritten``).
Default 2**20 (a 40 MiB file, its blocks reserved as it fills). A writer ignores any other value
(its default then); ``stroboscope record`` refuses it (:func:`check_events_capacity`)."""
EDGE_COUNTERS_ENV = "STROBOSCOPE_EDGE_COUNTERS"
"""Optional: edge counters in a recorded command (each edge followed by its thread's own
counters): one of :data:`EDGE_COUNTERS` other than ``"off"``. The writer reads it when it makes
its file and treats any other value as ``"off"`` (the recorder checks its own option)."""
EDGE_COUNTERS = ("off", "cpu", "rusage")
"""Edge-counter modes: none; the thread's CPU clock; that and its ``getrusage(RUSAGE_THREAD)``
faults and context switches."""
NVTX_INJECTION_ENV = "NVTX_INJECTION64_PATH"
"""The environment variable through which NVTX loads an injection library."""
FILE_SUFFIX = ".sev"

PRIVATE_DIR_PREFIX = "stroboscope-events-"
"""How the private events directory of a recording process is named in the temporary
directory: ``stroboscope-events-<pid of its maker>-<random>`` (``stroboscope record``'s own carry
no pid: ``stroboscope-events-<random>``, named by its spool's note)."""
_PRIVATE = re.compile(re.escape(PRIVATE_DIR_PREFIX) + r"(\d+)-[A-Za-z0-9_]+")


def remove_private_dirs(dead: Callable[[int], bool]) -> list[str]:
    """Remove the private events directories of the temporary directory whose maker's pid
    ``dead`` says is dead (the maker died without removing it: a SIGKILL); only this user's,
    open to nobody else (0700), never through a link. Returns the paths removed."""
    tmp = tempfile.gettempdir()
    try:
        names = os.listdir(tmp)
    except OSError:
        return []
    removed = []
    for name in names:
        m = _PRIVATE.fullmatch(name)
        if m is None or not dead(int(m.group(1))):
            continue
        path = os.path.join(tmp, name)
        try:
            st = os.lstat(path)
        except OSError:
            continue
        if stat.S_ISDIR(st.st_mode) and st.st_uid == os.geteuid() and not st.st_mode & 0o077:
            shutil.rmtree(path, ignore_errors=True)
            removed.append(path)
    return removed
