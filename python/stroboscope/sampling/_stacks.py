"""A sampler's Python stacks: a part of the Sampler that owns its C++ reader and what it drained.

The reader (``_core.StackSampler``, cpp/src/py_stacks_sampler.cpp) runs on a C++ thread of its
own at absolute CLOCK_MONOTONIC deadlines, reads every Python thread's stack of the sampled
process and of its descendants from outside (``process_vm_readv``: the target is never paused),
and buffers interned samples in a bounded single-producer buffer. This part drains that buffer
a few times a second on a small Python thread into Arrow record batches kept in memory (at most
:data:`MAX_KEPT_SAMPLES` samples; the oldest batches are dropped past it, and counted), and
returns them as the two tables of :mod:`stroboscope.formats.stacks`.

Sampling its own process, it leaves out the package's own threads (this drain thread, the
publisher, the segment and events writers, ...) unless asked to keep them: a thread is the
package's when the first function it runs (the first frame under :mod:`threading`'s bootstrap)
is in the package, whichever part started it. Their samples are dropped at each drain, and
their thread ids handed to the reader, which reads them no more (``skip_thread``).
"""

from __future__ import annotations

import functools
import math
import os
import threading
from collections.abc import Callable
from dataclasses import asdict, dataclass
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

import stroboscope._core as _core
from stroboscope._base.checks import describe
from stroboscope.formats.stacks import FRAMES_SCHEMA, SAMPLES_SCHEMA

#: Samples kept in Python memory (about 30 bytes each: 8,388,608 is about 250 MB, some 17
#: minutes of 8 threads at 1 kHz); past it the oldest drained batches are dropped and counted
#: in ``StackStats.samples_discarded``. A recording's sidecar (``on_batch``) keeps every batch.
MAX_KEPT_SAMPLES = 8_388_608
#: Samples the C++ buffer holds between drains (32 s of 8 threads at 1 kHz; 8 MiB).
BUFFER_SAMPLES = 1 << 18
#: How often (seconds) the drain thread empties the C++ buffer.
DRAIN_EVERY_S = 0.25
#: The fastest stacks are read when asked with ``stacks=True`` (seconds): 1 kHz.
DEFAULT_FLOOR_S = 0.001

#: Called with each drained (samples, frames) pair of batches (the frames: stacks new in it).
BatchListener = Callable[[pa.RecordBatch, pa.RecordBatch], None]


def check_stacks(value: object, interval: float) -> float | None:
    """``stacks=``: None when off, else the stacks interval in seconds.

    ``False``/``None`` = off; ``True`` = the sampler's interval, but no faster than 1 ms (then
    the first multiple of ``interval`` at or above 1 ms); a number of seconds = that interval,
    a whole multiple of ``interval``.
    """
    if value is None or value is False:
        return None
    if value is True:
        if interval >= DEFAULT_FLOOR_S:
            return interval
        return math.ceil(DEFAULT_FLOOR_S / interval - 1e-9) * interval
    accepted = (
        "False (off), True (the sampler's interval, at least 0.001 s) or a number of seconds "
        f"that is a whole multiple of interval={interval:g}"
    )
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise TypeError(f"stacks must be {accepted}, got {describe(value)}")
    seconds = float(value)
    ratio = seconds / interval if math.isfinite(seconds) and seconds > 0 else 0.0
    if ratio < 1 - 1e-9 or abs(ratio - round(ratio)) > 1e-6 * ratio or seconds > 3600:
        raise ValueError(f"stacks must be {accepted} (at most 3600), got {describe(value)}")
    return round(ratio) * interval


_PACKAGE_DIR = os.path.dirname(os.path.dirname(os.path.realpath(__file__)))
"""The package's directory: a thread whose first function lives under it is the package's."""


@functools.lru_cache(maxsize=4096)
def _where(file: str) -> str:
    """``"threading"`` for the standard threading module's file, ``"own"`` for a file of the
    package, else ``""``."""
    real = os.path.realpath(file)
    if real == os.path.realpath(threading.__file__):
        return "threading"
    return "own" if real.startswith(_PACKAGE_DIR + os.sep) else ""


def own_stacks(frames: pa.RecordBatch | pa.Table) -> set[int]:
    """The stack ids of ``frames`` (:data:`~stroboscope.formats.stacks.FRAMES_SCHEMA`) that are
    the package's own threads': the first frame from the root that is not :mod:`threading`'s
    bootstrap is a function of the package."""
    stacks: dict[int, list[tuple[int, str]]] = {}
    for sid, depth, file in zip(
        frames.column("stack_id").to_pylist(),
        frames.column("depth").to_pylist(),
        frames.column("file").to_pylist(),
    ):
        stacks.setdefault(sid, []).append((depth, file))
    own = set()
    for sid, rows in stacks.items():
        for _, file in sorted(rows):
            kind = _where(file)
            if kind != "threading":
                if kind == "own":
                    own.add(sid)
                break
    return own


def py_stacks_support() -> tuple[bool, str]:
    """Whether this build reads Python stacks, and the CPython version it was built for."""
    info = _core.py_stacks_support()
    return bool(info["supported"]), str(info["version"])


@dataclass(frozen=True)
class StackStats:
    """What the stack reader measured of itself (times in nanoseconds).

    Attributes
    ----------
    interval_s : float
        Seconds between stack reads.
    ticks, missed_ticks : int
        Rounds taken (each reads every thread of every followed process); deadlines skipped
        because a round ran late.
    samples : int
        Thread stacks recorded (one sample per thread per round).
    threads_read : int
        Thread states read.
    reads_failed : int
        Reads of the target's memory that failed (a pointer gone stale under the read: EFAULT;
        a process that exited: ESRCH); the thread's sample of that round is left out.
    extra_frame_reads : int
        Frames read one by one (outside the copied data-stack chunk: generators, coroutines).
    truncated : int
        Stacks deeper than 1024 frames (the root side is cut).
    torn : int
        Stacks dropped because the thread moved on while they were read (frames read after
        the first copy, and the current frame changed meanwhile).
    threads_capped : int
        Thread lists cut at the reader's cap of threads per process (the rest not read).
    processes_capped : int
        Processes of the tree left out at the reader's cap of processes.
    dropped : int
        Samples lost because the C++ buffer was full (not drained in time).
    samples_discarded : int
        Drained samples dropped from Python memory past :data:`MAX_KEPT_SAMPLES`.
    own_left_out : int
        Samples of the package's own threads in this process left out (read before the reader
        was told to skip them; ``include_own_threads=False``).
    stacks, frames : int
        Distinct stacks and frames interned.
    processes : int
        Processes whose stacks are read now.
    busy_ns : int
        Wall time spent in rounds.
    thread_cpu_ns : int
        The reader thread's own CPU time.
    skipped : tuple of (int, str)
        Processes of the tree not read, and why (not CPython, another version, exited).
    """

    interval_s: float
    ticks: int
    missed_ticks: int
    samples: int
    threads_read: int
    reads_failed: int
    extra_frame_reads: int
    truncated: int
    torn: int
    threads_capped: int
    processes_capped: int
    dropped: int
    samples_discarded: int
    own_left_out: int
    stacks: int
    frames: int
    processes: int
    busy_ns: int
    thread_cpu_ns: int
    skipped: tuple[tuple[int, str], ...]

    def as_dict(self) -> dict[str, Any]:
        """Plain dicts and lists (for JSON, logging)."""
        return asdict(self)


class StackRecorder:
    """The stacks part of a Sampler: its C++ reader, its drain thread and the drained batches.

    Parameters
    ----------
    every_s : float
        Seconds between reads of every thread's stack.
    pid : int
        The process whose stacks are read, with its descendants (0 = this process).
    include_own_threads : bool
        Keep the samples of the package's own threads in this process (default False: left
        out; see the module's text).
    """

    def __init__(self, every_s: float, pid: int, include_own_threads: bool = False) -> None:
        supported, version = py_stacks_support()
        if not supported:
            raise ValueError(f"stacks need CPython 3.11 or 3.12; this is {version}")
        self._every_s = every_s
        self._core = _core.StackSampler(pid, True, round(every_s * 1e9), BUFFER_SAMPLES)
        self._lock = threading.Lock()  # the kept batches and the interning cursors
        self._samples: list[pa.RecordBatch] = []
        self._frames: list[pa.RecordBatch] = []
        self._kept = 0
        self._discarded = 0
        self._strings: list[str] = []
        self._string_array = pa.array([], pa.string())
        self._stacks_seen = 0
        self._include_own = include_own_threads
        self._own_stacks: set[int] = set()  # stacks of the package's threads (left out)
        self._skipped: set[int] = set()  # their threads, left out by the reader itself
        self._own_left_out = 0
        self._thread: threading.Thread | None = None
        self._stop = threading.Event()
        self.on_batch: BatchListener | None = None

    @property
    def interval(self) -> float:
        """Seconds between stack reads."""
        return self._every_s

    def start(self) -> None:
        """Start the reader thread and the drain thread (a no-op when running)."""
        if self._thread is not None:
            return
        self._core.start()
        self._stop.clear()
        self._thread = threading.Thread(
            target=self._drain_loop, name="stroboscope-stacks-drain", daemon=True
        )
        self._thread.start()

    def stop(self) -> None:
        """Stop both threads and drain what is left (harmless when not running)."""
        thread, self._thread = self._thread, None
        if thread is not None:
            self._stop.set()
            thread.join()
        self._core.stop()
        self.drain()

    def after_fork_in_child(self) -> None:
        """In a forked child: the parent's threads are gone; forget them."""
        self._lock = threading.Lock()
        self._thread = None
        self._core.forget_thread_after_fork()

    def _drain_loop(self) -> None:
        while not self._stop.wait(DRAIN_EVERY_S):
            self.drain()

    def drain(self) -> tuple[pa.RecordBatch, pa.RecordBatch]:
        """Move the buffered samples (and the stacks new since the last drain) into the kept
        batches; return them (the listener, ``on_batch``, gets them too)."""
        with self._lock:
            raw = self._core.drain(len(self._strings), self._stacks_seen)
            if raw["strings"]:
                self._strings.extend(raw["strings"])
                self._string_array = pa.array(self._strings, pa.string())
            self._stacks_seen = int(raw["stacks"])
            samples = self._samples_batch(raw)
            frames = self._frames_batch(raw)
            if not self._include_own:
                samples = self._without_own(samples, frames)
            if samples.num_rows or frames.num_rows:
                self._samples.append(samples)
                self._frames.append(frames)
                self._kept += samples.num_rows
                while self._kept > MAX_KEPT_SAMPLES and len(self._samples) > 1:
                    gone = self._samples.pop(0)  # the frames stay: later samples name them
                    self._kept -= gone.num_rows
                    self._discarded += gone.num_rows
            listener = self.on_batch
            if listener is not None and (samples.num_rows or frames.num_rows):
                listener(samples, frames)
        return samples, frames

    def _without_own(self, samples: pa.RecordBatch, frames: pa.RecordBatch) -> pa.RecordBatch:
        """``samples`` less those of the package's own threads in this process."""
        if frames.num_rows:
            self._own_stacks |= own_stacks(frames)
        if not self._own_stacks or not samples.num_rows:
            return samples
        own = pa.array(sorted(self._own_stacks), pa.int32())
        mine = pc.and_(
            pc.equal(samples.column("pid"), os.getpid()),
            pc.is_in(samples.column("stack_id"), value_set=own),
        )
        # The reader leaves these threads out from its next round on (it reads them no more);
        # a thread gone is given back (its id may name another thread later).
        alive = {t.native_id for t in threading.enumerate()}
        for tid in set(pc.unique(samples.column("tid").filter(mine)).to_pylist()) - self._skipped:
            if self._core.skip_thread(tid):
                self._skipped.add(tid)
        for tid in self._skipped - alive:
            self._core.unskip_thread(tid)
            self._skipped.discard(tid)
        kept = samples.filter(pc.invert(mine))
        self._own_left_out += samples.num_rows - kept.num_rows
        return kept

    def _names(self, ids: np.ndarray[Any, Any]) -> pa.Array:
        indices = pa.array(ids, pa.int32(), mask=ids < 0)
        return self._string_array.take(indices)

    def _samples_batch(self, raw: dict[str, Any]) -> pa.RecordBatch:
        cpu = raw["cpu_ns"]
        columns = [
            pa.array(raw["mono_ns"], pa.int64()),
            pa.array(raw["pid"], pa.int32()),
            pa.array(raw["tid"], pa.int32()),
            pa.array(raw["stack_id"], pa.int32()),
            pa.array(cpu, pa.int64(), mask=cpu < 0),
            self._names(raw["thread"]),
        ]
        return pa.RecordBatch.from_arrays(columns, schema=SAMPLES_SCHEMA)

    def _frames_batch(self, raw: dict[str, Any]) -> pa.RecordBatch:
        columns = [
            pa.array(raw["frame_stack_id"], pa.int32()),
            pa.array(raw["frame_depth"], pa.int32()),
            self._names(raw["frame_function"]),
            self._names(raw["frame_file"]),
            pa.array(raw["frame_line"], pa.int32()),
        ]
        return pa.RecordBatch.from_arrays(columns, schema=FRAMES_SCHEMA)

    def tables(self) -> tuple[pa.Table, pa.Table]:
        """Every sample kept so far and every stack, as (samples, frames) tables in
        :data:`~stroboscope.formats.stacks.SAMPLES_SCHEMA` and ``FRAMES_SCHEMA``."""
        self.drain()
        with self._lock:
            samples = pa.Table.from_batches(self._samples, schema=SAMPLES_SCHEMA)
            frames = pa.Table.from_batches(self._frames, schema=FRAMES_SCHEMA)
        return samples, frames

    def stats(self) -> StackStats:
        """The reader's measurement of itself (see :class:`StackStats`)."""
        raw = self._core.stats()
        skipped = tuple((int(pid), str(why)) for pid, why in raw.pop("skipped"))
        with self._lock:
            discarded = self._discarded
            own = self._own_left_out
        return StackStats(
            interval_s=self._every_s,
            samples_discarded=discarded,
            own_left_out=own,
            skipped=skipped,
            **{k: int(v) for k, v in raw.items()},
        )
