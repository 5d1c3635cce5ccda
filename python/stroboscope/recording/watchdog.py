"""A watchdog child process that writes crash dumps when its parent process dies.

While the parent lives the watchdog only waits: there is no per-sample traffic between the two.
When the parent dies (SIGKILL, the OOM killer, a segfault in native code, ``os._exit``), the
watchdog turns each of its :class:`DumpJob` sources (a sampler's spool, a receiver's journal) into
a CSV or Parquet dump, logs one line per dump to stderr and exits. When the parent stops normally,
the watchdog exits without writing anything.

Protocol
--------
The parent starts ``sys.executable`` running the file ``_watchdog_child.py`` of this package as a
script (``python -P PATH/_watchdog_child.py --config …``): not through the package, so the idle
child has loaded the standard library only, neither pyarrow nor the C++ extension whose crash it
handles; it imports the readers (and pyarrow) only to write a dump. On its command line it gets a
JSON configuration (``--config``): the parent's pid, the jobs with every path made
absolute, and the numbers of the descriptors it inherits (``pass_fds``; all others are closed):

- ``control_fd``: the read end of a pipe whose write end only the parent holds (close-on-exec, and
  closed in children the parent forks). On :meth:`Watchdog.stop` or at interpreter exit the parent
  writes ``b"S"`` ("stopped") and closes it: the watchdog exits with status 0 and dumps nothing.
  End of file without ``b"S"`` means the parent died.
- ``pidfd``: a pidfd the parent opened on itself (``os.pidfd_open``, where the kernel has it; so
  no pid-reuse race). It becomes readable when the parent exits even if a forked child still holds
  the pipe; the watchdog then reads what is left in the pipe: ``b"S"`` there means a normal stop,
  anything else a death. Without a pidfd, the watchdog also checks ``os.getppid()`` once a second
  (a dead parent's children are reparented).
- ``ready_fd``: the watchdog writes ``b"R"`` to it and closes it once it ignores signals and is
  about to wait; :meth:`Watchdog.start` returns only then, so a watchdog that could not start is an
  error in the parent, not a silent gap.

The watchdog runs in its own session (``start_new_session=True``) and ignores SIGINT, SIGTERM and
SIGHUP, so Ctrl-C in a terminal or a signal to the parent's process group does not take it down
with the parent. Its environment holds only ``PATH``, ``PYTHONPATH`` (the parent's ``sys.path``,
so it imports the same stroboscope), ``TMPDIR``, ``TEMP`` and ``TMP`` where the parent has them
(its temporary directory: a dead parent's private events directory is removed from there) and
``LD_LIBRARY_PATH`` when the parent had one.

Dumps are written to a hidden temporary file in the destination directory (mode 0600) and renamed
into place, so a dump file that exists is complete. The destination is ``DumpJob.dump``, else the
parent's ``STROBOSCOPE_DUMP_PATH`` (a file, or an existing directory to put the default name in),
else ``stroboscope-dump-YYYYmmdd-HHMMSS-<parent pid>.csv`` (``.parquet``) in the parent's working
directory at :meth:`Watchdog.start`; a default name never replaces an existing file (``-1``,
``-2``, … are appended instead), and a named one replaces only a regular file (a symbolic link,
FIFO or directory there is refused, as by every writer of the package: the log line says so and
that the rows are still in the source, which is kept).
"""

from __future__ import annotations

import json
import logging
import os
import select
import subprocess
import sys
import threading
import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from types import TracebackType
from typing import Any

from stroboscope._base import lifecycle as _lifecycle
from stroboscope.recording import _watchdog_child
from stroboscope.recording._watchdog_child import (
    CONFIG_VERSION,
    READY,
    STOP,
    default_dump_name,
    main,
)

__all__ = ["DUMP_PATH_ENV", "DumpJob", "Watchdog", "default_dump_name", "main"]

CHILD_SCRIPT = os.path.abspath(_watchdog_child.__file__)
"""The watchdog child's file, run as a script."""

logger = logging.getLogger("stroboscope.watchdog")

DUMP_PATH_ENV = "STROBOSCOPE_DUMP_PATH"
"""Environment variable naming the dump file (or a directory for it) when a job names none."""
KINDS = ("spool", "journal")
FORMATS = ("csv", "parquet")
READY_TIMEOUT_S = 60.0
"""How long :meth:`Watchdog.start` waits for the child to be ready (seconds)."""
STOP_TIMEOUT_S = 5.0
"""How long :meth:`Watchdog.stop` waits for the child to exit (seconds)."""


@dataclass(frozen=True)
class DumpJob:
    """What the watchdog writes when the parent dies.

    Parameters
    ----------
    kind : {"spool", "journal"}
        ``"spool"``: a sampler's spool file, read with
        ``stroboscope.formats.spool_read.recover_parts``.
        ``"journal"``: a receiver's journal (JSON lines, :mod:`stroboscope.compat.aitune._journal`).
    source : str or os.PathLike
        The spool or journal file.
    dump : str or os.PathLike, optional
        The dump file (a regular file there is replaced; a symbolic link, FIFO or directory
        put there is refused when the dump is written, the source kept), or an existing
        directory to put a default-named
        dump in. Default: ``$STROBOSCOPE_DUMP_PATH`` (the same choices), else a timestamped file
        in the working directory (see the module documentation). Its directory must exist.
    format : {"csv", "parquet"}
        The dump's format.
    remove_source : bool
        Delete ``source`` after a successful dump (for private temporary journals).
    remove_source_dir : bool
        Also remove the directory holding ``source`` when that leaves it empty.
    events_dir : str or os.PathLike, optional
        The shared-events directory of a command recorded from outside: after the dump, the
        scope intervals its processes wrote there go beside the dump (``<stem>.scopes.parquet``,
        written by a helper process, :mod:`stroboscope.recording._crash_scopes`, so that the
        watchdog itself never loads more than the formats) and the directory is removed.
    """

    kind: str
    source: str | os.PathLike[str]
    dump: str | os.PathLike[str] | None = None
    format: str = "csv"
    remove_source: bool = False
    remove_source_dir: bool = False
    events_dir: str | os.PathLike[str] | None = None

    def __post_init__(self) -> None:
        if self.kind not in KINDS:
            raise ValueError(f"DumpJob kind must be one of {KINDS}, got {self.kind!r}")
        if self.format not in FORMATS:
            raise ValueError(f"DumpJob format must be one of {FORMATS}, got {self.format!r}")
        # Paths are kept as str (so the job is plain JSON for the child).
        object.__setattr__(self, "source", os.fspath(self.source))
        if not self.source:
            raise ValueError("DumpJob source must be a non-empty path")
        if self.events_dir is not None:
            object.__setattr__(self, "events_dir", os.path.abspath(self.events_dir))
        if self.dump is not None:
            object.__setattr__(self, "dump", os.fspath(self.dump))
            if not self.dump:
                raise ValueError("DumpJob dump must be a non-empty path or None")


def _resolve(job: DumpJob) -> dict[str, Any]:
    """The job as the child gets it: absolute paths, and where a default-named dump goes."""
    out: dict[str, Any] = asdict(job)
    out["source"] = os.path.abspath(job.source)
    dump: str | None = os.fspath(job.dump) if job.dump is not None else None
    dump = dump or os.environ.get(DUMP_PATH_ENV) or None
    dump_dir = os.getcwd()
    if dump is not None and os.path.isdir(dump):
        dump_dir, dump = dump, None
    out["dump"] = os.path.abspath(dump) if dump is not None else None
    out["dump_dir"] = os.path.abspath(dump_dir)
    directory = os.path.dirname(out["dump"]) if out["dump"] else out["dump_dir"]
    if not (os.path.isdir(directory) and os.access(directory, os.W_OK | os.X_OK)):
        raise ValueError(
            f"the dump of {job.kind} {job.source!r} would go to {directory!r}, which is not an "
            f"existing directory this user can write to; set DumpJob.dump or {DUMP_PATH_ENV}"
        )
    return out


def _child_env() -> dict[str, str]:
    path = [os.path.abspath(p or os.curdir) for p in sys.path]
    env = {
        "PATH": os.environ.get("PATH", os.defpath),
        "PYTHONPATH": os.pathsep.join(dict.fromkeys(p for p in path if os.path.exists(p))),
    }
    # the parent's temporary directory, as tempfile finds it (no file made to look for it)
    env.update({k: os.environ[k] for k in ("TMPDIR", "TEMP", "TMP") if os.environ.get(k)})
    if os.environ.get("LD_LIBRARY_PATH"):
        env["LD_LIBRARY_PATH"] = os.environ["LD_LIBRARY_PATH"]
    return env


def _own_pidfd() -> int | None:
    pidfd_open = getattr(os, "pidfd_open", None)
    if pidfd_open is None:
        return None
    try:
        fd: int = pidfd_open(os.getpid())
    except OSError:  # an old kernel (ENOSYS) or a sandbox that forbids it
        return None
    return fd


class Watchdog:
    """A child process that writes dumps of ``jobs`` if, and only if, this process dies.

    Parameters
    ----------
    jobs : sequence of DumpJob
        What to dump. Paths are resolved (made absolute, ``STROBOSCOPE_DUMP_PATH`` read) at
        :meth:`start`.

    Notes
    -----
    Starting costs one Python interpreter start-up in the child (about 0.1 to 0.5 s, waited for by
    :meth:`start`); afterwards the watchdog sleeps in ``poll`` until the parent exits. Only the
    process that called :meth:`start` is watched: children it forks do not hold the pipe.
    """

    def __init__(self, jobs: Sequence[DumpJob]) -> None:
        jobs = list(jobs)
        for job in jobs:
            if not isinstance(job, DumpJob):
                raise TypeError(f"jobs must be DumpJob instances, got {type(job).__name__}")
        if not jobs:
            raise ValueError("jobs is empty: give the watchdog at least one DumpJob")
        self._jobs = jobs
        self._lock = threading.Lock()
        self._proc: subprocess.Popen[bytes] | None = None
        self._control: int | None = None
        self._owner = 0

    @property
    def jobs(self) -> list[DumpJob]:
        """The dump jobs (a copy)."""
        return list(self._jobs)

    @property
    def pid(self) -> int | None:
        """Process id of the watchdog child (``None`` before :meth:`start`)."""
        return None if self._proc is None else self._proc.pid

    @property
    def running(self) -> bool:
        """Whether the watchdog child is started and has not exited."""
        return self._proc is not None and self._proc.poll() is None

    def __repr__(self) -> str:
        state = "running" if self.running else "not running"
        return f"<stroboscope.recording.Watchdog pid={self.pid} jobs={len(self._jobs)} {state}>"

    def __enter__(self) -> Watchdog:
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()

    def start(self) -> Watchdog:
        """Start the child and wait until it watches this process. Returns ``self``.

        Raises
        ------
        RuntimeError
            When already started, or when the child exits or is not ready within
            ``READY_TIMEOUT_S`` seconds (its stderr says why).
        """
        with self._lock:
            if self._control is not None:
                raise RuntimeError("this Watchdog is already started; stop() it first")
            if not sys.executable:
                raise RuntimeError("cannot start a watchdog: sys.executable is unknown here")
            jobs = [_resolve(job) for job in self._jobs]
            control_r, control_w = os.pipe()  # non-inheritable: exec'd children never get them
            ready_r, ready_w = os.pipe()
            pidfd = _own_pidfd()
            passed = [control_r, ready_w] + ([] if pidfd is None else [pidfd])
            config = {
                "version": CONFIG_VERSION,
                "parent_pid": os.getpid(),
                "control_fd": control_r,
                "ready_fd": ready_w,
                "pidfd": pidfd,
                "jobs": jobs,
            }
            # A script, not -m or -c through the package: the child imports nothing of ours.
            flags = ["-P"] if sys.version_info >= (3, 11) else []
            try:
                proc = subprocess.Popen(
                    [sys.executable, *flags, CHILD_SCRIPT, "--config", json.dumps(config)],
                    env=_child_env(),
                    stdin=subprocess.DEVNULL,
                    stdout=subprocess.DEVNULL,
                    close_fds=True,
                    pass_fds=passed,
                    start_new_session=True,
                )
            except BaseException:
                for fd in (control_w, ready_r, *passed):
                    os.close(fd)
                raise
            for fd in passed:
                os.close(fd)
            try:
                _wait_ready(proc, ready_r)
            except BaseException:
                os.close(control_w)
                if proc.poll() is None:
                    proc.kill()
                proc.wait()
                raise
            finally:
                os.close(ready_r)
            self._proc = proc
            self._control = control_w
            self._owner = os.getpid()
            _lifecycle.register(self)
        return self

    def stop(self) -> None:
        """Tell the child this process stopped normally: it exits without dumping. Harmless when
        not started or already stopped. Waits up to ``STOP_TIMEOUT_S`` seconds for the child."""
        with self._lock:
            control, self._control = self._control, None
            if control is None:
                return
            _lifecycle.unregister(self)
            try:
                os.write(control, STOP)
            except OSError:  # the child is gone already (EPIPE)
                pass
            finally:
                os.close(control)
            proc = self._proc
            if proc is not None:
                try:
                    proc.wait(STOP_TIMEOUT_S)
                except subprocess.TimeoutExpired:
                    logger.warning("watchdog %d did not exit within %g s", proc.pid, STOP_TIMEOUT_S)

    def _at_exit(self) -> None:
        if os.getpid() == self._owner:
            self.stop()

    def _after_fork_in_child(self) -> None:
        # A forked child must neither hold the pipe (that would hide the parent's death) nor tell
        # the watchdog to stop when it exits.
        self._lock = threading.Lock()
        if self._control is not None:
            os.close(self._control)
            self._control = None
        self._proc = None


def _wait_ready(proc: subprocess.Popen[bytes], ready_r: int) -> None:
    """Wait for the child's ready message and then for its end of the ready pipe to close (so
    it holds nothing but the control pipe and the pidfd when this returns)."""
    deadline = time.monotonic() + READY_TIMEOUT_S
    poller = select.poll()
    poller.register(ready_r, select.POLLIN)
    got = b""
    while True:
        left = deadline - time.monotonic()
        if left <= 0:
            raise RuntimeError(f"watchdog {proc.pid} was not ready within {READY_TIMEOUT_S:g} s")
        if not poller.poll(left * 1000):
            continue
        chunk = os.read(ready_r, 16)
        if chunk:
            got += chunk
            continue
        if got == READY and proc.poll() is None:
            return
        proc.wait()
        raise RuntimeError(
            f"watchdog exited with status {proc.returncode} before it was ready "
            "(its error is on stderr)"
        )


if __name__ == "__main__":
    sys.exit(main())
