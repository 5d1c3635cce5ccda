"""The end of a spooled recording: its rows written to the output with their provenance, their
column statistics, its scope intervals beside it, the spool removed. :func:`finish` is that end,
for ``stroboscope record`` and the training callbacks alike.

The scope intervals are those of the sampler's own process (``Sampler.scope_intervals()``) and,
for a recorder that ran a command, those every process of the command wrote into the recorder's
events directory (:func:`read_shared_intervals`, with a ``pid`` column); they go beside the output
as ``<stem>.scopes.parquet`` (:func:`stroboscope.formats.writers.scopes_path`, which ``report``
reads) with the recording's provenance, and into the sampler's dataset as its rank's scopes file;
then the events directory is removed.

A clean end writes each row once. The segment writer leaves the rows since its last segment in
the ring (:func:`prepare`, before the sampler stops), and :func:`finish` writes the output from
the segments it wrote (the rows the ring could not hold) and those rows, taken from the ring
through the extension; nothing is read back from the spool. A run the ring holds whole writes
no segment at all. Should a segment not be what its writer wrote, the output is written the way
a crash is recovered instead (:func:`write_output`: the spool and its segments, as
``stroboscope recover`` reads them), which gives the same rows.

:func:`write_output` and :func:`spool_column_stats` are that recovery path: the spool's parts
(:func:`stroboscope.formats.spool_read.recover_parts`) streamed into the output, one segment in
memory at a time, and the metric columns read a few at a time for
:func:`stroboscope.analysis.column_stats.column_stats_text`.
"""

from __future__ import annotations

import contextlib
import logging
import os
import shutil
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import pyarrow as pa

from stroboscope.formats import events_file
from stroboscope.formats.provenance import PROVENANCE_KEY, attach, dumps, from_schema
from stroboscope.formats.segments import FIRST_ROW_KEY, first_row, read_segment
from stroboscope.formats.spool_header import SpoolError
from stroboscope.formats.spool_read import ROWS_LOST_KEY, recover_parts, remove_spool
from stroboscope.formats.writers import FORMATS, scopes_path, write_parquet, write_parts

if TYPE_CHECKING:
    from stroboscope.recording.sampler import Sampler
    from stroboscope.recording.segments import SegmentWriter, Written
    from stroboscope.recording.watchdog import Watchdog
    from stroboscope.sampling import Frame

_LOG = logging.getLogger("stroboscope.recording")

DUMP_FORMATS = tuple(sorted(FORMATS))
"""The formats a recording can be written in: the writers' (listed alphabetically)."""
SUMMARY_COLUMNS = 8
"""Metric columns read at once for the column statistics (memory: their cells of every row)."""
_STORED_FIELD_KEYS = (b"unit", b"kind")
"""The field metadata a recording's file keeps (the spool's header holds no more)."""


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
    """

    path: str | None
    rows: int
    columns: int
    column_stats: str | None = None
    span_s: float | None = None
    scopes: str | None = None
    scope_calls: int = 0


def prepare(sampler: Sampler) -> None:
    """Make ``sampler``'s end the one :func:`finish` writes: stopping it writes no last segment,
    its rows since the last segment stay in the ring (and the spool, where a crash before the
    finish still recovers them) for :func:`finish` to write once. Call it before the sampler
    stops; nothing changes for a sampler without a spool."""
    writer = _writer(sampler)
    if writer is not None:
        writer.keep_rest()


def _writer(sampler: Sampler) -> SegmentWriter | None:
    # The recording room's own sampler: its segment writer is the finish's business.
    return sampler._segments


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
    if writer is None or spool is None or sampler._temp_spool_dir is not None:
        # A private spool (crash_safe without spool=) goes with the sampler's close.
        raise ValueError("finish needs a sampler with a spool (Sampler(spool=PATH))")
    writer.keep_rest()
    sampler.close()
    rest = writer.take_rest()  # before the provenance, which counts the rows the ring lost
    prov = sampler.provenance(command=None if command is None else list(command))
    units = {c.name: c.unit for c in sampler.columns}
    shared = None if events_dir is None else _read_events(events_dir)
    intervals = with_shared(sampler.scope_intervals(), shared)
    try:
        clean = _Clean(writer, spool, rest)
        rows, columns, full = _write(clean, output, prov)
        figures = _column_stats(clean.read, clean.names, units) if column_stats else None
    except SpoolError:  # a segment is not what its writer wrote: read the spool as a crash is
        rows, columns = write_output(spool, output, prov)
        full = dict(prov)
        figures = spool_column_stats(spool, units) if column_stats else None
    scopes = None if output is None else write_scopes_beside(intervals, output, full)
    dataset = sampler._dataset
    if dataset is not None and shared is not None and shared.num_rows:
        dataset.write_scope_intervals(intervals)  # its rank's scopes file, the command's too
    if watchdog is not None:
        watchdog.stop()
    if not keep_spool:
        remove_spool(spool)
    if events_dir is not None and remove_events:
        shutil.rmtree(events_dir, ignore_errors=True)
    path = None if output is None else os.fspath(output)
    text, span = (None, None) if figures is None else figures
    return Finished(path, rows, columns, text, span, scopes, intervals.num_rows)


def read_shared_intervals(events_dir: str | os.PathLike[str]) -> pa.Table:
    """The scope intervals every process wrote into ``events_dir`` (the shared events'
    reader), with a ``pid`` column."""
    from stroboscope.analysis.scope_edges import shared_intervals

    return shared_intervals(events_dir)


def _read_events(events_dir: str | os.PathLike[str]) -> pa.Table | None:
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
    """The scope intervals of this process (``own``) and of the processes that wrote shared
    events (``shared``, with a ``pid`` column) as one table, in ``begin_ns`` order: ``own``
    gets this process's ``pid`` when both hold calls; ``own`` alone when ``shared`` has none."""
    if shared is None or shared.num_rows == 0:
        return own
    if own.num_rows == 0:
        return shared
    own = own.append_column("pid", pa.array([os.getpid()] * own.num_rows, pa.int64()))
    both = pa.concat_tables(
        [own.replace_schema_metadata(None), shared.replace_schema_metadata(None)],
        promote_options="default",
    )
    return both.sort_by([("begin_ns", "ascending")])


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


def _stored(schema: pa.Schema) -> pa.Schema:
    """``schema`` as a recording's file keeps it: each field's unit and kind, no table
    metadata (the columns a spool's header holds, which :func:`stroboscope.recover` gives)."""
    fields = []
    for f in schema:
        meta = {k: v for k, v in (f.metadata or {}).items() if k in _STORED_FIELD_KEYS}
        fields.append(pa.field(f.name, f.type, nullable=True, metadata=meta))
    return pa.schema(fields)


class _Clean:
    """The rows of a cleanly stopped recording: the segments its writer wrote, then the rows
    it left in the ring (``rest``, taken through the extension)."""

    def __init__(self, writer: SegmentWriter, spool: str, rest: Frame) -> None:
        import pyarrow.parquet as pq

        self.spool = spool
        self.rest = rest.to_arrow()
        self.schema = _stored(self.rest.schema)
        self.segments: list[Written] = writer.written
        for seg in self.segments:  # footers only: a file changed since it was written is refused
            try:
                meta = pq.read_metadata(seg.path)
            except (OSError, pa.ArrowException) as exc:
                raise SpoolError(f"segment {seg.path} cannot be read: {exc}") from None
            got = first_row(seg.path, meta.metadata, meta.num_rows, rest.first_row + len(rest))
            if (got, meta.num_rows) != (seg.first_row, seg.rows):
                raise SpoolError(f"segment {seg.path} changed since it was written")
        self.rows = sum(seg.rows for seg in self.segments) + self.rest.num_rows
        self.rows_lost = writer.rows_lost
        self.names = [n for n in self.schema.names if n not in ("time", "mono_ns")]

    def parts(self, columns: Sequence[str] | None = None) -> Iterator[pa.Table]:
        """The rows in order, one segment at a time, as :attr:`schema` (only ``time``,
        ``mono_ns`` and ``columns`` when given)."""
        keep = (
            None
            if columns is None
            else [n for n in self.schema.names if n in {"time", "mono_ns", *columns}]
        )
        schema = self.schema if keep is None else pa.schema([self.schema.field(n) for n in keep])
        want = [(f.name, f.type) for f in self.schema]
        for seg in self.segments:
            table = read_segment(seg.path, os.geteuid(), want, keep)
            raw = (table.schema.metadata or {}).get(FIRST_ROW_KEY, b"")
            if table.num_rows != seg.rows or raw != str(seg.first_row).encode():
                raise SpoolError(f"segment {seg.path} changed since it was written")
            yield table.replace_schema_metadata(None).cast(schema)
        rest = self.rest if keep is None else self.rest.select(keep)
        yield rest.replace_schema_metadata(None).cast(schema)

    def read(self, columns: Sequence[str]) -> pa.Table:
        """Every row of ``time``, ``mono_ns`` and ``columns``, as one table."""
        return _whole(self.parts(columns))

    def ends(self) -> pa.Table:
        """The first and the last row's ``time`` and ``mono_ns`` (no row when there is none)."""
        import pyarrow.parquet as pq

        def clock(seg: Written) -> pa.Table:
            try:
                return pq.read_table(seg.path, columns=["time", "mono_ns"])
            except (OSError, pa.ArrowException) as exc:
                raise SpoolError(f"segment {seg.path} cannot be read: {exc}") from None

        first = clock(self.segments[0]) if self.segments else self.rest
        last = self.rest if self.rest.num_rows or not self.segments else clock(self.segments[-1])
        rows = [t.slice(at, 1) for t, at in ((first, 0), (last, last.num_rows - 1)) if t.num_rows]
        if not rows:
            return pa.table({})
        return pa.concat_tables(
            [t.select(["time", "mono_ns"]).replace_schema_metadata(None) for t in rows]
        )


def _whole(parts: Iterator[pa.Table]) -> pa.Table:
    tables = list(parts)
    return pa.concat_tables(tables) if tables else pa.table({})


def _write(
    clean: _Clean, output: str | os.PathLike[str] | None, prov: Mapping[str, Any]
) -> tuple[int, int, dict[str, Any]]:
    """Write ``clean``'s rows to ``output`` (nothing when None) with ``prov`` completed from
    them as :func:`write_output` completes it; return the rows, columns and that provenance."""
    if output is None:
        return clean.rows, len(clean.schema), dict(prov)
    full = _provenance(prov, clean.ends(), clean.rows)
    meta = {ROWS_LOST_KEY: str(clean.rows_lost), PROVENANCE_KEY: dumps(full)}
    error = events_file.damage_beside(clean.spool, os.geteuid())
    if error is not None:
        meta[events_file.ERROR_KEY.decode()] = error
    schema = clean.schema.with_metadata(meta)
    write_parts(
        schema, (part.replace_schema_metadata(schema.metadata) for part in clean.parts()), output
    )
    return clean.rows, len(schema), full


def _provenance(
    prov: Mapping[str, Any],
    ends: pa.Table,
    rows: int,
    recovered: Mapping[str, Any] | None = None,
) -> dict[str, Any]:
    """``prov`` completed as ``for_table`` completes it for the whole table: the first row's
    time and clock anchor and the last row's time from ``ends`` (the first and last row, or
    the first alone with the last row's time from the spool's own provenance, ``recovered``),
    and the row count."""
    from stroboscope.sampling._provenance import for_table

    out = for_table(prov, ends)
    out["rows"] = rows
    for key in ("end_ns", "end_time"):
        if recovered is not None and recovered.get(key) is not None:
            out[key] = recovered[key]
    return out


def _first_nonempty(parts: Iterator[pa.Table]) -> tuple[pa.Table | None, Iterator[pa.Table]]:
    """The first part with a row (None when none has) and the parts from it on."""
    for part in parts:
        if part.num_rows:

            def again(first: pa.Table = part) -> Iterator[pa.Table]:
                yield first
                yield from parts

            return part, again()
    return None, iter(())


def write_output(
    spool: str | os.PathLike[str], output: str | os.PathLike[str] | None, prov: Mapping[str, Any]
) -> tuple[int, int]:
    """Write every row of ``spool`` to ``output`` (Parquet or CSV by its suffix; nothing when
    None) with ``prov`` completed from the rows, one part in memory at a time; return the
    rows and columns. The recovery path: the spool and its segments read back."""
    got = recover_parts(spool)
    if output is None:
        return got.rows, len(got.schema)
    first, parts = _first_nonempty(got.parts)
    ends = first.slice(0, 1) if first is not None else pa.table({})
    full = _provenance(prov, ends, got.rows, from_schema(got.schema) or {})
    schema = got.schema.with_metadata(
        {**(got.schema.metadata or {}), PROVENANCE_KEY.encode(): dumps(full).encode()}
    )
    write_parts(schema, (part.replace_schema_metadata(schema.metadata) for part in parts), output)
    return got.rows, len(schema)


def _column_stats(
    read: Callable[[Sequence[str]], pa.Table], names: Sequence[str], units: Mapping[str, str]
) -> tuple[str, float]:
    """The column statistics of every row, ``read`` giving ``time``, ``mono_ns`` and a few metric
    ``names`` at a time, and the seconds from the first to the last row."""
    from stroboscope.analysis.column_stats import column_stats, column_stats_text, data_span_s

    base = read([])
    figures = []
    for at in range(0, len(names), SUMMARY_COLUMNS):
        table = read(names[at : at + SUMMARY_COLUMNS])
        figures += column_stats(table, units)
        del table
    return column_stats_text(base, units, stats=figures), data_span_s(base)


def spool_column_stats(
    spool: str | os.PathLike[str], units: Mapping[str, str]
) -> tuple[str, float]:
    """The text of :func:`stroboscope.analysis.column_stats.column_stats_text` for every row of
    ``spool``, read :data:`SUMMARY_COLUMNS` metric columns at a time, and the seconds from its
    first to its last row."""

    def read(columns: Sequence[str]) -> pa.Table:
        got = recover_parts(spool, columns=list(columns))
        return pa.Table.from_batches(
            [b for part in got.parts for b in part.to_batches()], schema=got.schema
        )

    clock = {"time", "mono_ns"}
    names = [f.name for f in recover_parts(spool).schema if f.name not in clock]
    return _column_stats(read, names, units)
