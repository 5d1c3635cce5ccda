"""Crash safety composed on a sampler: a spool, rolling Parquet segments and a watchdog.

:class:`Sampler` is :class:`stroboscope.sampling.CoreSampler` plus the keywords that make a
recording survive the death of the process: ``spool`` keeps the ring in a file and drains it
into Parquet segments beside it; ``crash_safe`` adds a watchdog process that dumps every
recorded row if this process dies. This is the ``stroboscope.Sampler`` of the package face.
"""

from __future__ import annotations

import contextlib
import math
import os
import shutil
import stat
import tempfile
import weakref
from typing import TYPE_CHECKING, Any

from stroboscope._base.checks import check_bool, check_choice, check_file_dir, check_path
from stroboscope._base.files import file_kind, unlink_if_same
from stroboscope._base.files import identity as file_identity
from stroboscope.formats.dataset import PART_SECONDS
from stroboscope.formats.pieces import index_path, pieces_path
from stroboscope.formats.segments import segment_paths, segment_rows, segment_seconds
from stroboscope.formats.spool_header import spool_in_use
from stroboscope.formats.spool_layout import MAGIC
from stroboscope.formats.spool_read import remove_spool
from stroboscope.formats.stacks_sidecar import StacksSidecar
from stroboscope.formats.writers import FORMATS
from stroboscope.recording._dataset_writer import DatasetWriter, check_identity
from stroboscope.recording.segments import SegmentStatus, SegmentWriter
from stroboscope.recording.watchdog import DumpJob, Watchdog
from stroboscope.sampling import MAX_INTERVAL_S, CoreSampler, check_capacity, check_interval

if TYPE_CHECKING:
    from typing_extensions import Unpack  # typing.Unpack from Python 3.11; only for mypy here

    from stroboscope._base.identity import Identity
    from stroboscope.sampling import SamplerOptions


DUMP_FORMATS = tuple(sorted(FORMATS))
"""The formats a recording can be written in (``dump_format``, the watchdog's dump and
:func:`stroboscope.recording.finish`'s output): the writers' (listed alphabetically)."""


def ring_segment_seconds(capacity: int, interval: float) -> float:
    """The segment length a ring of ``capacity`` rows taken every ``interval`` seconds asks for
    (:func:`stroboscope.formats.segments.segment_seconds`), at most the longest
    ``segment_seconds`` a Sampler takes: a large ring at 1 Hz would ask for hours."""
    return segment_seconds(capacity, interval, most=MAX_INTERVAL_S)


def _not_a_spool(path: str) -> str | None:
    """What the existing ``path`` is when it is no spool (None: absent, or it starts like one)."""
    try:
        st = os.lstat(path)
    except OSError:
        return None
    if stat.S_ISLNK(st.st_mode):
        return "is a symbolic link"
    if not stat.S_ISREG(st.st_mode):
        return f"is {file_kind(st.st_mode)}"
    try:
        with open(path, "rb") as f:
            head = f.read(len(MAGIC))
    except OSError:
        return None
    # a start of the magic only: a spool whose first write was cut short (recover says so)
    return None if MAGIC.startswith(head) else "is not a spool"


def check_spool_dir(spool: str | os.PathLike[str]) -> str:
    """The directory of a new spool, if only this user can replace files in it (the rule of
    :func:`stroboscope._base.checks.check_file_dir`)."""
    return check_file_dir("spool", os.path.dirname(os.path.abspath(os.fspath(spool))))


def check_spool(spool: str | os.PathLike[str]) -> str:
    """A spool path that may be created: absent, its segments absent, in a directory where only
    this user can replace files (:func:`check_spool_dir`)."""
    spool = check_path("spool", spool)  # bytes, "" (the working directory) or a NUL: refused
    path = os.path.abspath(spool)
    check_spool_dir(path)
    if os.path.isdir(path):
        raise ValueError(f"spool {os.fspath(spool)!r} is a directory; give a file path")
    pid = spool_in_use(path)
    if pid is not None:
        raise ValueError(
            f"spool {os.fspath(spool)!r} is in use by a running recording (pid {pid}): give "
            f"another path, or recover it once that recording ends"
        )
    segments = segment_paths(path) or any(
        map(os.path.lexists, (pieces_path(path), index_path(path)))
    )
    if not os.path.lexists(path) and (segments or os.path.lexists(path + ".events")):
        raise ValueError(  # no spool: recover cannot read them, so it is no advice
            f"spool {os.fspath(spool)!r} does not exist, but segments or an events sidecar of "
            f"one do ({path}.seg-*.parquet, {path}.events): remove them, or give another path"
        )
    other = None if segments else _not_a_spool(path)
    if other is not None:  # recover is no advice for a file that is no spool
        raise ValueError(
            f"spool {os.fspath(spool)!r} exists and {other}: a spool is a new file; give "
            f"another path"
        )
    if os.path.lexists(path) or segments or os.path.lexists(path + ".events"):
        # Starting over would truncate a recording nobody has recovered yet, and its segments
        # would be read back as if they belonged to the new one. (The C++ side creates the file
        # with O_EXCL too, so a spool made after this check is never truncated either.)
        raise ValueError(
            f"spool {os.fspath(spool)!r} (or its segments or events) already exists: recover it "
            f"with `stroboscope recover {os.fspath(spool)} -o FILE`, or remove it, then start again"
        )
    return path


class Sampler(CoreSampler):
    """A :class:`stroboscope.sampling.CoreSampler` whose rows can survive the death of the process.

    Takes every argument of :class:`stroboscope.sampling.CoreSampler` (except ``ring_file``), and:

    Parameters
    ----------
    spool : path, optional
        Keep the ring in this file, mapped ``MAP_SHARED`` and created 0600 in a directory you
        own (or a sticky one such as ``/tmp``; never one others can write without the sticky
        bit). The file is created exclusively and locked (``flock``) while the sampler lives: a
        second recording on the same path is refused, naming it. Every row is in the file as
        soon as it is written and survives any death of the process; :func:`stroboscope.recover`
        reads it back. While running, the rows are also drained every ``segment_seconds`` into
        Parquet segments beside it (``PATH.seg-N.parquet``) so the ring never has to hold the
        whole run; a segment that cannot be written is retried and reported in
        :attr:`segments`, its rows staying in the spool.
    dataset : path, optional
        Also write the rows every ``segment_seconds`` as Parquet parts of a partitioned dataset
        at this root (``ROOT/job=J/host=H/rank=R/part-….parquet``, the scope intervals under
        ``ROOT/_scopes/`` at stop; see :mod:`stroboscope.formats.dataset` and
        :func:`stroboscope.open_dataset`), with or without ``spool``. The partition is claimed
        here: one another run holds, or a root that cannot be written, is refused (ValueError).
        A part that cannot be written later is retried and reported in :attr:`dataset_status`,
        its rows staying in the ring (and the spool).
    identity : stroboscope Identity, optional
        Job, host and rank of this process for ``dataset`` (default: detected from the
        environment, ``stroboscope.cluster.identity()``).
    segment_seconds : float
        Interval of the spool's segment writer and of the dataset's parts (default
        :data:`~stroboscope.formats.dataset.PART_SECONDS`, 10 s); the
        ring must hold at least twice that many rows.
    crash_safe : bool
        Start a watchdog process (:mod:`stroboscope.recording.watchdog`) that does nothing while
        this process lives and, if it dies (SIGKILL, OOM killer, a crash in native code), writes
        every recorded row from the spool to ``dump_path``. Without ``spool``, a private
        temporary spool is used (and removed by :meth:`close`).
    dump_path : path, optional
        Where the watchdog writes the dump: default ``$STROBOSCOPE_DUMP_PATH``, else a timestamped
        file in the working directory.
    dump_format : {"csv", "parquet"}
        Format of the dump.
    """

    def __init__(
        self,
        interval: float = 0.001,
        *,
        spool: str | os.PathLike[str] | None = None,
        dataset: str | os.PathLike[str] | None = None,
        identity: Identity | None = None,
        segment_seconds: float = PART_SECONDS,
        crash_safe: bool = False,
        dump_path: str | os.PathLike[str] | None = None,
        dump_format: str = "csv",
        capacity: int = 65536,
        **kwargs: Unpack[SamplerOptions],
    ) -> None:
        if "ring_file" in kwargs:
            raise TypeError("give spool= (the crash-safe ring file), not ring_file=")
        check_bool("crash_safe", crash_safe)  # "no" would turn crash safety on
        check_choice("dump_format", dump_format, DUMP_FORMATS)
        if dump_path is not None:
            dump_path = check_path("dump_path", dump_path)  # bytes, "" or a NUL: refused
        # checked even where nothing is written in parts: a bad value is a mistake either way
        seg_s = check_interval("segment_seconds", segment_seconds)
        spool_path = ""
        who = check_identity(identity, dataset)  # checked (and detected) before anything is made
        if dataset is not None:
            dataset = check_path("dataset", dataset)
        if spool is not None or crash_safe or dataset is not None:
            # Checked before anything is made, so a bad value leaves no file behind.
            every = check_interval("interval", interval)
            cap = check_capacity(capacity)
            if cap * every < 2 * seg_s:
                raise ValueError(
                    f"segment_seconds={segment_seconds!r} needs a ring of at least "
                    f"{math.ceil(2 * seg_s / every)} rows at interval {every:g} s (capacity is "
                    f"{capacity}): raise capacity or lower segment_seconds"
                )
            if spool is not None:
                spool_path = check_spool(spool)
        self._temp_spool_dir: str | None = None
        self._identity = who  # before the core sampler's set-up, which reads ``identity``
        if crash_safe and spool is None:
            self._temp_spool_dir = tempfile.mkdtemp(prefix="stroboscope-")  # 0700, ours
            spool_path = os.path.join(self._temp_spool_dir, "sampler.spool")
        try:
            super().__init__(interval, capacity=capacity, ring_file=spool_path or None, **kwargs)
        except BaseException:
            self._remove_temp_dir()
            raise
        self._spool = spool_path or None
        made = file_identity(spool_path) if spool_path else None  # the file C++ created (O_EXCL)
        try:
            self._segments: SegmentWriter | None = None
            cap_rows = segment_rows(int(self._core.stats()["capacity"]))
            if spool_path:
                self._segments = SegmentWriter(self._core, spool_path, seg_s, cap_rows)
            # Stacks (stacks=): each drained batch also goes beside the spool, for recover.
            self._stacks_sidecar: StacksSidecar | None = None
            if spool_path and self._temp_spool_dir is None and self._stacks is not None:
                self._stacks_sidecar = StacksSidecar(spool_path)
                self._stacks.on_batch = self._stacks_sidecar.write
            self._dataset: DatasetWriter | None = None
            if dataset is not None and who is not None:
                self._dataset = DatasetWriter(self._core, self, dataset, who, seg_s, cap_rows)
            self._watchdog: Watchdog | None = None
            if crash_safe:
                dump = None if dump_path is None else os.fspath(dump_path)
                private = (
                    self._temp_spool_dir is not None
                )  # nobody else knows it: remove once dumped
                job = DumpJob(
                    "spool",
                    spool_path,
                    dump=dump,
                    format=dump_format,
                    remove_source=private,
                    remove_source_dir=private,
                )
                self._watchdog = Watchdog([job])
        except BaseException:
            # Release the ring (its mapping, fd and lock go with the last reference), then remove
            # the spool this run created, only if the name still holds that very file.
            self._segments = None
            self._dataset = None
            self._release_core()
            unlink_if_same(spool_path, made)
            self._remove_temp_dir()
            raise
        # Runs at close(), at exit, or when this object is collected without close(): stops the
        # sampler, the segment writer and the watchdog (a normal end: no dump) and removes a
        # private spool. Only in the process that made it (a forked child inherits it too).
        self._cleanup = weakref.finalize(
            self,
            _cleanup_recording,
            self._owner_pid,
            self._core,
            self._segments,
            self._watchdog,
            spool_path,
            self._temp_spool_dir,
            self._dataset,
        )
        self._cleanup.atexit = False  # at exit, the lifecycle registry calls _at_exit

    @property
    def spool(self) -> str | None:
        """The spool file, when the ring lives in one."""
        return self._spool

    @property
    def segments(self) -> SegmentStatus | None:
        """What the segment writer of a spooled sampler has done: segments written, rows lost
        to the ring, failed writes (``errors``), rows waiting in the spool after a failed write
        (``rows_unwritten``) and the ``last_error``; None without a spool. See
        :class:`stroboscope.recording.segments.SegmentStatus`."""
        return None if self._segments is None else self._segments.status()

    @property
    def dataset(self) -> str | None:
        """The root of the dataset this sampler writes parts to (None without ``dataset``)."""
        return None if self._dataset is None else self._dataset.root

    @property
    def identity(self) -> Identity | None:
        """Job, host and rank this sampler records as (given, or detected for ``dataset``)."""
        return self._identity

    @property
    def dataset_status(self) -> SegmentStatus | None:
        """What the dataset writer has done: parts written (``segments_written``), rows lost
        to the ring, failed writes, rows waiting after a failed write; None without a dataset."""
        return None if self._dataset is None else self._dataset.status()

    @property
    def watchdog(self) -> Watchdog | None:
        """The watchdog of a ``crash_safe`` sampler (None otherwise)."""
        return self._watchdog

    # What the end of a recording (stroboscope.recording.finish) takes over from the sampler.
    # Documented internals: for the recording room's own end, not for users.

    @property
    def segment_writer(self) -> SegmentWriter | None:
        """The writer of the spool's segments (None without a spool, or in a forked child).

        For :func:`stroboscope.recording.finish`, which ends the recording through it."""
        return self._segments

    @property
    def dataset_writer(self) -> DatasetWriter | None:
        """The writer of the dataset's parts (None without ``dataset``, or in a forked child).

        For :func:`stroboscope.recording.finish`, which adds the command's scopes to it."""
        return self._dataset

    @property
    def spool_is_private(self) -> bool:
        """Whether the spool is this sampler's private temporary one (``crash_safe`` without
        ``spool``), removed by :meth:`close`: nothing else may end the recording in it."""
        return self._temp_spool_dir is not None

    def _start_locked(self) -> None:
        starts_watchdog = self._watchdog is not None and not self._watchdog.running
        if self._watchdog is not None and starts_watchdog:
            self._watchdog.start()  # before the first row: a death from now on is dumped
        try:
            super()._start_locked()
            if self._segments is not None:
                self._segments.start()
            if self._dataset is not None:
                self._dataset.start()
        except BaseException:
            # A start that fails half-way stops what it started: nothing runs after it raised
            # (close(), collection or the process's exit then remove a private spool).
            self._stop_locked()
            if self._watchdog is not None and starts_watchdog:
                self._watchdog.stop()  # a normal end: it dumps nothing
            raise

    def _stop_locked(self) -> None:
        super()._stop_locked()
        if self._segments is not None:
            self._segments.stop()
        if self._dataset is not None:
            self._dataset.stop()

    def _close_locked(self) -> None:
        if self._stacks_sidecar is not None:
            self._stacks_sidecar.close()  # after the last drain (stop)
        self._run_cleanup()  # a normal end: the watchdog dumps nothing; a private spool goes

    def _run_cleanup(self) -> None:
        """Run :func:`_cleanup_recording` once (a no-op when it ran or was detached). Called
        through ``detach()``, not the finalizer itself: at the process's exit ``weakref``'s own
        exit hook (registered after ours, so run before it) marks every finalizer shut down, and
        calling one then does nothing, which would leave the sampler running and its private
        spool behind."""
        cleanup = getattr(self, "_cleanup", None)  # absent when __init__ failed half-way
        detached = None if cleanup is None else cleanup.detach()
        if detached is not None:
            _, func, args, kwargs = detached
            func(*args, **kwargs)

    def _extra_stats(self) -> dict[str, Any]:
        extra = super()._extra_stats()
        if self._segments is not None:
            extra["segments_written"] = self._segments.segments_written
            extra["segment_rows_lost"] = self._segments.rows_lost
        return extra

    def _at_exit(self) -> None:
        if getattr(self, "_cleanup", None) is not None and os.getpid() == self._owner_pid:
            self._run_cleanup()
        else:
            super()._at_exit()

    def _after_fork_in_child(self) -> None:
        super()._after_fork_in_child()
        # The spool, its segments and the watchdog belong to the parent: the child must not
        # write segments into them or clean them up.
        self._segments = None
        self._dataset = None
        cleanup = getattr(self, "_cleanup", None)
        if cleanup is not None:
            cleanup.detach()

    def _remove_temp_dir(self) -> None:
        if self._temp_spool_dir is not None:
            shutil.rmtree(self._temp_spool_dir, ignore_errors=True)
            self._temp_spool_dir = None


def _cleanup_recording(
    owner_pid: int,
    core: Any,
    segments: SegmentWriter | None,
    watchdog: Watchdog | None,
    spool: str,
    temp_dir: str | None,
    dataset: DatasetWriter | None = None,
) -> None:
    if os.getpid() != owner_pid:
        return
    core.stop()
    if segments is not None:
        # The last segment; if the spool's directory is already gone there is nothing to keep.
        with contextlib.suppress(OSError):
            segments.stop()
    if dataset is not None:
        dataset.stop()  # counts and logs its failures; never raises
    if watchdog is not None:
        watchdog.stop()
    if temp_dir is not None:
        remove_spool(spool)
        with contextlib.suppress(OSError):
            os.rmdir(temp_dir)
