"""The scopes of the processes a recording process starts: its private events directory.

A process that records its own scopes (a running :class:`stroboscope.Sampler`, the default
session, the training recorders) reads its own edges from the events log in memory. The
processes it starts (forked data-loader workers, ``multiprocessing`` workers of any start
method, subprocesses) have logs of their own. While scopes are recorded here, this process owns a
private events directory (0700) and names it in ``os.environ`` (``STROBOSCOPE_EVENTS_DIR``, which
children inherit), so every child writes its edges into files of its own there
(:mod:`stroboscope.formats.shared_events`: a forked child switches from its parent's memory to a
file at its first event, a spawned one makes its file at its first event), as they do for a
recorder outside the process. This process's own log stays in memory
(``_core.events_keep_in_memory``: the edges are read once, from there).

The directory is made when the first recorder starts and removed when the last one stops (each
reads its children's edges first, :func:`read`); a later recording makes it again under the same
name when that is free, so a process started during an earlier one (multiprocessing's
forkserver, a persistent worker that has not written yet) still reaches it. A variable that is
set already (by the user, or by ``stroboscope record`` running this process) is left as it is,
never replaced or removed: the children's scopes then go to that directory's recorder, and this
process reads only its own.

The directory's name carries the pid of the process that made it
(``stroboscope-events-<pid>-...``): one whose maker died without removing it (a SIGKILL) is
removed by the next recorder of this user that makes a directory here, once no process has that
pid (only this user's directories, 0700, by that name).
"""

from __future__ import annotations

import contextlib
import os
import shutil
import tempfile
import threading
from collections.abc import Iterator
from typing import TYPE_CHECKING

import stroboscope._core as _core
from stroboscope._base import lifecycle as _lifecycle
from stroboscope.formats.shared_events_env import (
    EVENTS_DIR_ENV,
    FILE_SUFFIX,
    PRIVATE_DIR_PREFIX,
    remove_private_dirs,
)

if TYPE_CHECKING:
    import pyarrow as pa

__all__ = ["acquire", "declined_child_events", "owned_dir", "read", "release"]


class _Owner:
    """The private directory, who uses it, and the process that made it."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.dir: str | None = None  # ours, in os.environ, while users > 0
        self.users = 0
        self.pid = os.getpid()
        self.last: str | None = None  # the name of the latest directory (made again if free)
        self.declined = 0  # > 0: this process's children are not read (see declined_child_events())

    def _at_exit(self) -> None:
        # A recorder still running at exit: its directory goes with the process that made it.
        if self.dir is not None and os.getpid() == self.pid:
            self.users = 1
            release(self.dir)

    def _after_fork_in_child(self) -> None:
        # The directory is the parent's: the child writes into it (the variable stays) and
        # neither removes it nor takes the variable away.
        self.lock = threading.Lock()
        self.dir = None
        self.users = 0
        self.pid = os.getpid()
        self.last = None
        self.declined = 0


_owner = _Owner()
_lifecycle.register(_owner)


def _at_exit() -> None:
    """Remove the directory and the variable now, whoever still uses them (exit)."""
    _owner._at_exit()


def acquire() -> str | None:
    """A recorder starts: the directory this process's children write into (made and named in
    the environment by the first recorder), or None when the variable was set by someone else
    (or the directory cannot be made)."""
    with _owner.lock:
        if _owner.dir is None:
            if _owner.declined or os.environ.get(EVENTS_DIR_ENV):
                return None  # the user's, or an outside recorder's: not ours to take
            path = _make_dir(_owner.last)
            if path is None:
                return None
            _core.events_keep_in_memory(True)  # our own events stay where we read them
            os.environ[EVENTS_DIR_ENV] = path
            _owner.dir = _owner.last = path
        _owner.users += 1
        return _owner.dir


@contextlib.contextmanager
def declined_child_events() -> Iterator[None]:
    """While inside, a recorder that starts makes no directory for this process's children:
    ``stroboscope record``, whose only children are the command (its scopes have a directory
    of their own) and the watchdog. A directory made for nothing would outlive a SIGKILL."""
    with _owner.lock:
        _owner.declined += 1
    try:
        yield
    finally:
        with _owner.lock:
            _owner.declined -= 1


def _make_dir(last: str | None) -> str | None:
    """A new private directory (0700): the latest one's name again when it is free (a process
    started during an earlier recording, such as multiprocessing's forkserver or a persistent
    worker, still has that name in its environment), else a fresh name; None if none can be
    made. ``mkdir`` is exclusive: a name somebody else took meanwhile is never used."""
    if last is not None:
        try:
            os.mkdir(last, 0o700)
            return last
        except OSError:
            pass
    _remove_dead_dirs()
    try:  # 0700; the maker's pid in the name (see _remove_dead_dirs)
        return tempfile.mkdtemp(prefix=f"{_PREFIX}{os.getpid()}-")
    except OSError:
        return None


_PREFIX = PRIVATE_DIR_PREFIX


def _remove_dead_dirs() -> None:
    """Remove the private events directories of recording processes that died without removing
    theirs (a SIGKILL; their watchdog removes them too): in the temporary directory, named for a
    pid that no process has now, owned by this user and open to nobody else. (``stroboscope
    record``'s own directories carry no pid: their spool names them, and ``recover`` removes
    them.)"""
    remove_private_dirs(lambda pid: not _process_exists(pid))


def _process_exists(pid: int) -> bool:
    """Whether a process ``pid`` exists (any user's: a pid reused since is left alone)."""
    if pid <= 0:
        return True
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except OSError:
        return True
    return True


def release(path: str | None) -> None:
    """A recorder that :func:`acquire` gave ``path`` stopped (after it read its children's
    edges): the last one removes the directory and the variable (if it is still ours)."""
    if path is None:
        return
    with _owner.lock:
        if path != _owner.dir:
            return
        _owner.users -= 1
        if _owner.users > 0:
            return
        _owner.dir = None
        if os.environ.get(EVENTS_DIR_ENV) == path:
            del os.environ[EVENTS_DIR_ENV]
        _core.events_keep_in_memory(False)
        shutil.rmtree(path, ignore_errors=True)


def owned_dir() -> str | None:
    """The private directory while a recorder uses it (None otherwise)."""
    return _owner.dir


def read(path: str, windows: list[tuple[int, int]]) -> pa.Table | None:
    """The scope intervals the children wrote into ``path`` (a ``pid`` and a ``producer``
    column) whose edges fall in ``windows`` (``[start, stop)`` in mono ns); this process's own
    ``py`` file, if it made one, is left out (its edges are read from memory). None when
    nothing can be read."""
    try:
        if not any(name.endswith(FILE_SUFFIX) for name in os.listdir(path)):
            return None  # no child wrote (the common case): the reader is not even imported
        from stroboscope.analysis.scope_edges import shared_intervals

        return shared_intervals(path, skip_pid=os.getpid(), windows=windows)
    except (OSError, ValueError):  # gone already, or unreadable: the own scopes still count
        return None
