"""The end of a spooled recording: its rows written to the output with their provenance, their
column statistics, its scope intervals beside it, the spool removed. :func:`finish` is that end,
for ``stroboscope record`` and the training callbacks alike.

The scope intervals are those of the sampler's own process (``Sampler.scope_intervals()``) and,
for a recorder that ran a command, those every process of the command wrote into the recorder's
events directory (:func:`read_shared_intervals`, with a ``pid`` column); they go beside the output
as ``<stem>.scopes.parquet`` (:func:`stroboscope.formats.writers.scopes_path`, which ``report``
reads) with the recording's provenance, and into the sampler's dataset as its rank's scopes file;
then the events directory is removed.

The rows go to the output through :mod:`stroboscope.recording._output`: each row written once
on a clean end (the segments' rows too, when they are pieces of one file: that file becomes the
output), and the recovery path (:func:`write_output`, :func:`spool_column_stats`) when a
segment is not what its writer wrote.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import pyarrow as pa

from stroboscope.formats.provenance import attach
from stroboscope.formats.spool_header import SpoolError
from stroboscope.formats.spool_read import remove_spool
from stroboscope.formats.writers import scopes_path, write_parquet
from stroboscope.recording._output import (
    Clean,
    column_stats_of,
    spool_column_stats,
    write_clean,
    write_output,
)

if TYPE_CHECKING:
    from stroboscope.recording.sampler import Sampler
    from stroboscope.recording.segments import SegmentWriter
    from stroboscope.recording.watchdog import Watchdog

__all__ = [
    "Finished",
    "finish",
    "prepare",
    "read_events",
    "read_shared_intervals",
    "spool_column_stats",
    "with_shared",
    "write_output",
    "write_scopes_beside",
]

_LOG = logging.getLogger("stroboscope.recording")


@dataclass(frozen=True)
class Finished:
    """What :func:`finish` did.

    Attributes
    ----------
    path : str or None
        The output written (None when none was asked for).
    rows : int
        Rows recorded (written to ``path``).
    columns : int
        Columns of each row, ``time`` and ``mono_ns`` included.
    column_stats : str or None
        The text of :func:`stroboscope.analysis.column_stats.column_stats_text` for every row
        (None unless asked for).
    span_s : float or None
        Seconds from the first to the last row (None unless the statistics were asked for).
    scopes : str or None
        The scope intervals written beside ``path`` (``<stem>.scopes.parquet``; None when no
        scope was called, or there is no ``path``).
    scope_calls : int
        Scope calls recorded (rows of the scope intervals), in every process.
    scope_edges_lost : int
        Edges the shared events' reader counted lost (overwritten when a process's events ring
        lapped before the end read it, dropped, or never published).
    scope_files_damaged : tuple of str
        ``"FILE: why"`` for each events file the reader did not read whole or skipped (and a
        directory removed), those of processes that could not make theirs left out.
    """

    path: str | None
    rows: int
    columns: int
    column_stats: str | None = None
    span_s: float | None = None
    scopes: str | None = None
    scope_calls: int = 0
    scope_edges_lost: int = 0
    scope_files_damaged: tuple[str, ...] = ()


def prepare(sampler: Sampler) -> None:
    """Make ``sampler``'s end the one :func:`finish` writes: stopping it writes no last segment,
    its rows since the last segment stay in the ring (and the spool, where a crash before the
    finish still recovers them) for :func:`finish` to write once. Called before the first
    segment, its segments are pieces of one file that the finish makes the output (none of
    their rows written again). Call it before the sampler stops; nothing changes for a sampler
    without a spool."""
    writer = _writer(sampler)
    if writer is not None:
        writer.keep_rest()
        writer.use_pieces()


def _writer(sampler: Sampler) -> SegmentWriter | None:
    # The recording room's own sampler: its segment writer is the finish's business.
    return sampler.segment_writer


def finish(
    sampler: Sampler,
    output: str | os.PathLike[str] | None,
    *,
    command: Sequence[str] | None = None,
    keep_spool: bool = False,
    column_stats: bool = False,
    watchdog: Watchdog | None = None,
    events_dir: str | os.PathLike[str] | None = None,
    remove_events: bool = True,
) -> Finished:
    """End a spooled recording: close ``sampler``, write every row to ``output`` (Parquet or CSV
    by its suffix; nothing when None) with the sampler's provenance completed from the rows,
    and the scope intervals beside it (``<stem>.scopes.parquet``) and in the sampler's dataset;
    stop ``watchdog`` (once the output is whole, so it never writes it again), and remove the
    spool, its segments and events (unless ``keep_spool``) and ``events_dir``.

    Parameters
    ----------
    sampler : stroboscope.recording.Sampler
        A sampler with a spool (running or not; closed here). Call :func:`prepare` before it
        stops, or its last segment is written and read back.
    output : path or None
        Where the rows go.
    command : sequence of str, optional
        The command line recorded, for the provenance.
    keep_spool : bool
        Leave the spool and its segments on disk.
    column_stats : bool
        Also the column statistics of every row (:attr:`Finished.column_stats`), before the
        spool goes.
    watchdog : Watchdog, optional
        A watchdog that dumps this spool if the process dies: stopped once the output is
        written.
    events_dir : path, optional
        The events directory of a command recorded from outside (``STROBOSCOPE_EVENTS_DIR`` in
        its environment): the scope edges its processes wrote are read from it and recorded
        with the sampler's own.
    remove_events : bool
        Remove ``events_dir`` once it was read (the recorder's private directory; False for a
        directory the recorder did not make, such as the one of a ``--pid`` process).

    Raises
    ------
    ValueError
        When ``sampler`` has no spool.
    OSError
        When the output cannot be written: nothing is removed and the watchdog is not stopped
        (the rows are safe in the spool).
    """
    writer = _writer(sampler)
    spool = sampler.spool
    if writer is None or spool is None or sampler.spool_is_private:
        # A private spool (crash_safe without spool=) goes with the sampler's close.
        raise ValueError("finish needs a sampler with a spool (Sampler(spool=PATH))")
    writer.keep_rest()
    sampler.close()
    rest = writer.take_rest()  # before the provenance, which counts the rows the ring lost
    prov = sampler.provenance(command=None if command is None else list(command))
    units = {c.name: c.unit for c in sampler.columns}
    shared = None if events_dir is None else read_events(events_dir)
    if shared is not None and _events_counts(shared).get("unmade"):
        # processes whose scopes could not be written at all: the recording says so too
        prov = {**prov, "events": _events_counts(shared)}
    intervals = with_shared(sampler.scope_intervals(), shared)
    try:
        clean = Clean(writer, spool, rest)
        rows, columns, full = write_clean(clean, output, prov, keep_spool=keep_spool)
        figures = column_stats_of(clean.read, clean.names, units) if column_stats else None
    except SpoolError:  # a segment is not what its writer wrote: read the spool as a crash is
        rows, columns = write_output(spool, output, prov)
        full = dict(prov)
        figures = spool_column_stats(spool, units) if column_stats else None
    scopes = None if output is None else write_scopes_beside(intervals, output, full)
    dataset = sampler.dataset_writer
    if dataset is not None and shared is not None and shared.num_rows:
        dataset.write_scope_intervals(intervals)  # its rank's scopes file, the command's too
    if watchdog is not None:
        watchdog.stop()
    if not keep_spool:
        remove_spool(spool)
    if events_dir is not None and remove_events:
        from stroboscope.formats.shared_events import remove_events_dir

        remove_events_dir(events_dir)  # with what its drain kept beside it
    path = None if output is None else os.fspath(output)
    text, span = (None, None) if figures is None else figures
    counts = _events_counts(intervals)
    lost = counts.get("lost", 0)
    lost = lost if isinstance(lost, int) else 0
    damaged = _damaged_files(counts.get("files"))
    return Finished(path, rows, columns, text, span, scopes, intervals.num_rows, lost, damaged)


def _damaged_files(files: object) -> tuple[str, ...]:
    """``"FILE: why"`` for each file the shared events' ``events_files`` JSON says was damaged
    or skipped (not those whose process could not make one: said on their own)."""
    from stroboscope.formats.shared_events import UNMADE

    try:
        listed = json.loads(files) if isinstance(files, str) else []
    except ValueError:
        return ()
    return tuple(
        f"{c.get('file')}: {c['damaged']}"
        for c in listed
        if isinstance(c, dict) and c.get("damaged") and c["damaged"] != UNMADE
    )


def read_shared_intervals(events_dir: str | os.PathLike[str]) -> pa.Table:
    """The scope intervals every process wrote into ``events_dir`` (the shared events'
    reader), with a ``pid`` column."""
    from stroboscope.analysis.scope_edges import shared_intervals

    return shared_intervals(events_dir)


def read_events(events_dir: str | os.PathLike[str]) -> pa.Table | None:
    """:func:`read_shared_intervals`, or None (with a warning naming the directory and why)
    when they cannot be read: the rows are written all the same."""
    try:
        return read_shared_intervals(events_dir)
    except ImportError:  # a build without the shared events' reader
        _LOG.debug("no shared events reader: %s not read", os.fspath(events_dir))
        return None
    except Exception as exc:  # a damaged events file must never cost the rows
        _LOG.warning(
            "the scope events in %s could not be read (%s: %s): the recording has no scopes "
            "of the command",
            os.fspath(events_dir),
            type(exc).__name__,
            exc,
        )
        return None


def with_shared(own: pa.Table, shared: pa.Table | None) -> pa.Table:
    """:func:`stroboscope.analysis.scope_edges.with_shared` for this process."""
    from stroboscope.analysis.scope_edges import with_shared as both

    return both(own, shared, os.getpid())


def _events_counts(intervals: pa.Table) -> dict[str, Any]:
    """What the shared events' reader counted (``events_lost``, ``events_damaged``, ... in the
    table's metadata), for the provenance: ``{"lost": 0, ...}`` (empty when it says nothing)."""
    out: dict[str, Any] = {}
    for key, value in (intervals.schema.metadata or {}).items():
        name = key.decode(errors="replace")
        if name.startswith("events_"):
            text = value.decode(errors="replace")
            out[name[len("events_") :]] = int(text) if text.isdigit() else text
    return out


def write_scopes_beside(
    intervals: pa.Table, output: str | os.PathLike[str], prov: Mapping[str, Any]
) -> str | None:
    """Write ``intervals`` as ``<stem>.scopes.parquet`` beside the recording ``output`` with
    ``prov`` (the recording's provenance, ``rows`` the calls, ``events`` what the shared events'
    reader counted: edges lost, files damaged); return its path. Without a call,
    a file left at that name (by an earlier recording of ``output``, replaced now) is removed
    and None returned. A failed write is logged, never raised: the rows are written."""
    path = scopes_path(output)
    if intervals.num_rows == 0:
        with contextlib.suppress(FileNotFoundError, IsADirectoryError):
            if os.path.isfile(path) and not os.path.islink(path):
                os.unlink(path)
        return None
    full = {**prov, "rows": intervals.num_rows}
    events = _events_counts(intervals)
    if events:
        full["events"] = events
    try:
        write_parquet(attach(intervals, full), path)
    except (OSError, ValueError, pa.ArrowException) as exc:
        _LOG.warning("the scope intervals were not written to %s (%s)", path, exc)
        return None
    return path
