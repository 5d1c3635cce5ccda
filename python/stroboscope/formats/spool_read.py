"""Reading spool files back: the ring's file and the Parquet segments beside it, as one table.

pyarrow, numpy and the standard library only, never the extension: the watchdog child reads a
spool with this module after the process it guards has died, and ``recover`` (in
:mod:`stroboscope.recording.spool`) wraps what it returns into a frame.

A spool is the sampler's ring kept in a file mapped ``MAP_SHARED`` (``Sampler(spool=PATH)``):
every row is in the file the moment the sampler writes it, so it survives any death of the
process. Its layout is documented in ``cpp/include/stroboscope/spool.hpp``. For runs longer than
the ring holds, a background writer drains the ring into complete Parquet segment files beside
the spool (``PATH.seg-000001.parquet``, ...), each written whole and renamed into place, so a
segment on disk is always readable; a recording whose end writes one output appends its segments
as pieces of one file instead (:mod:`stroboscope.formats.pieces`), each read by its byte range.
:func:`recover_table` returns every row once, in order: the segments first, then the rows of
the spool that no segment holds.

Scope events recorded while the sampler ran are in a sidecar, ``PATH.events``, appended by the
segment writer at each wake-up: :func:`recover_events` reads them (see there what a SIGKILL loses).
"""

from __future__ import annotations

import dataclasses
import functools
import glob
import logging
import os
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pyarrow as pa

from stroboscope._base.checks import check_path, describe
from stroboscope.formats import events_file
from stroboscope.formats.pieces import Piece, index_path, pieces_path, read_index
from stroboscope.formats.provenance import PROVENANCE_KEY, dumps, recovered, time_cell_ns
from stroboscope.formats.segments import (
    FIRST_ROW_KEY,
    Segment,
    check_clock,
    check_order,
    claimed_rows,
    first_row,
    header_from_segments,
    read_segment,
    scan_pieces,
    segment_extent,
    segment_paths,
    segment_temp_glob,
)
from stroboscope.formats.spool_columns import fields_from_segments, names_from_segments
from stroboscope.formats.spool_header import MAGIC, VERSION, SchemaError, SpoolError, counted_rows
from stroboscope.formats.spool_ring import read_ring, read_spool
from stroboscope.formats.stacks_sidecar import remove_sidecar

__all__ = [
    "FIRST_ROW_KEY",
    "LOST_CAUSES",
    "LOST_TO_KEY",
    "MAGIC",
    "NOTES_KEY",
    "ROWS_LOST_KEY",
    "ROWS_LOST_UNKNOWN_KEY",
    "SKIPPED_KEY",
    "VERSION",
    "Recovered",
    "SpoolError",
    "read_spool",
    "recover_events",
    "recover_parts",
    "recover_table",
    "remove_spool",
]

ROWS_LOST_KEY = "stroboscope.rows_lost"
"""Metadata of recovered rows: how many rows recorded are not in them (by cause:
:data:`LOST_TO_KEY`; most often overwritten in the ring before a segment took them)."""
ROWS_LOST_UNKNOWN_KEY = "stroboscope.rows_lost_unknown"
"""Metadata of recovered rows, ``"true"`` when rows were lost that nothing counts (the spool's
header is damaged: the rows only its ring held): :data:`ROWS_LOST_KEY` is then absent, never a
0 that no one counted (the provenance's ``rows_lost`` is null, ``rows_lost_unknown`` true)."""
SKIPPED_KEY = "stroboscope.segments_skipped"
"""Metadata of recovered rows: why segment files were left out (see :class:`Recovered`)."""
NOTES_KEY = "stroboscope.recovery_notes"
"""Metadata of recovered rows: damage read around with no row lost to it (:class:`Recovered`)."""
LOST_TO_KEY = "stroboscope.rows_lost_to"
"""Metadata of recovered rows: how many rows each cause lost (:data:`LOST_CAUSES`' words)."""
LOST_CAUSES = {
    "overwritten": "overwritten in the ring before a segment took them",
    "segments": "in segments left out (damaged or not of this recording)",
    "unplaced": "overwritten in the ring or in segments left out whose rows cannot be told",
    "spool": "held only by the ring of the damaged spool",
}
"""Why rows were lost (:attr:`Recovered.lost_to`'s keys), in words."""
_LOG = logging.getLogger("stroboscope.recording")


def _skip(skipped: list[str], spool: str, why: str) -> None:
    skipped.append(why)
    _LOG.warning("recovering %s, left out: %s (every other row is recovered)", spool, why)


def _note(notes: list[str], spool: str, what: str) -> None:
    notes.append(what)
    _LOG.warning("recovering %s: %s", spool, what)


@dataclass(frozen=True)
class Recovered:
    """A spool's rows, planned from the files' headers and read one part at a time
    (:func:`recover_parts`): memory holds the ring's rows and one segment, whatever the run's
    length.

    Attributes
    ----------
    schema : pyarrow.Schema
        The columns, with ``stroboscope.rows_lost`` in the schema metadata.
    rows : int
        Rows the parts hold in all.
    rows_lost : int
        Rows the spool's counters count that are not in the parts: ``rows + rows_lost`` is
        every row recorded (when the counters can be read).
    parts : iterator of pyarrow.Table
        The rows in order, each part cast to ``schema``: the segments' new rows, then the
        spool's. Reading a part checks it again (a segment that changed since the plan, or rows
        out of order, raise :class:`SpoolError`).
    events : pyarrow.Table
        The recording's scope events (:func:`recover_events`; no rows when it has none), read
        from the sidecar when first asked for (``read_events``), one chunk at a time. A damaged
        sidecar never stops the rows: its events are missing, a warning says why and so does
        the metadata ``stroboscope.events_error`` (of the events and of ``schema``).
    skipped : list of str
        Why each segment file left out was (one naming the file and what is wrong with it; also
        the metadata ``stroboscope.segments_skipped`` of ``schema``, and a warning). A damaged,
        truncated, foreign or planted segment never stops the other rows: the rows it should
        have held are counted in ``rows_lost`` unless the ring still holds them. A segment
        damaged between the plan and its reading is added here when the parts reach it (its
        rows are then in ``rows`` but not in the parts).
    """

    schema: pa.Schema
    rows: int
    rows_lost: int
    parts: Iterator[pa.Table]
    read_events: Callable[[], pa.Table] = events_file.SCHEMA.empty_table
    skipped: list[str] = dataclasses.field(default_factory=list)
    lost_to: dict[str, int] = dataclasses.field(default_factory=dict)
    """``rows_lost`` by cause (:data:`LOST_CAUSES`: the ring overwrote them, a segment left out
    held them, the damaged spool's ring held them); also the metadata
    ``stroboscope.rows_lost_to``."""
    notes: list[str] = dataclasses.field(default_factory=list)
    """Damage read around with no row lost to it (a pieces index missing, a schema text
    damaged); also the metadata ``stroboscope.recovery_notes``, and a warning."""
    rows_lost_unknown: bool = False
    """Rows were lost that nothing counts (the spool's header damaged: the rows only its ring
    held); ``rows_lost`` counts only the others. The metadata then holds
    :data:`ROWS_LOST_UNKNOWN_KEY`, not :data:`ROWS_LOST_KEY`."""

    def lost_words(self) -> str:
        """``rows_lost`` said with its causes (``"12 rows were lost (12 overwritten in the ring
        before a segment took them)"``); empty when none was."""
        more = (
            "rows held only by the ring of the damaged spool were lost (how many is unknown)"
            if self.rows_lost_unknown
            else ""
        )
        if not self.rows_lost:
            return more
        causes = "; ".join(f"{n} {LOST_CAUSES[cause]}" for cause, n in self.lost_to.items())
        return f"{self.rows_lost} rows were lost ({causes})" + (f"; and {more}" if more else "")

    @functools.cached_property
    def events(self) -> pa.Table:
        """The recording's scope events (see the class)."""
        return self.read_events()


def recover_parts(
    path: str | os.PathLike[str], *, columns: Sequence[str] | None = None
) -> Recovered:
    """Every row recorded in a spool and its segments, in order and without duplicates, as
    parts to write one at a time (``stroboscope recover`` and ``record`` stream them to their
    output). :func:`recover_table` is the same rows as one frame. With ``columns``, the parts hold
    only those (and ``time`` and ``mono_ns``, always), read alone from each segment.

    Every row the spool's counters count is either recovered or counted in ``rows_lost``, by
    cause (:attr:`Recovered.lost_to`): a segment is decoded (the columns the parts hold) when
    the rows are planned, so one whose footer reads but whose data does not is left out then,
    never counted as recovered; a pieces file whose index is missing, empty or damaged is read
    by its own bytes; a spool whose schema text is damaged has its columns taken from its
    segments; a spool whose ring cannot be read has the rows only it held counted by its
    header's counters, when they can be read.

    Raises
    ------
    SpoolError
        When the spool is missing, empty, truncated, corrupt, or not a spool: the message names
        the file and what is wrong. A bad segment file is left out instead (``skipped``).
    """
    p = check_path("path", path)
    if columns is not None and (
        isinstance(columns, str)
        or not isinstance(columns, Sequence)
        or not all(isinstance(c, str) for c in columns)
    ):
        raise TypeError(f"columns must be None or a list of column names, got {describe(columns)}")
    # Segments listed before the spool's counters are read: on a live recording, every segment
    # listed then holds rows the counters already count.
    skipped: list[str] = []  # why each file left out was (a damaged file never stops the rest)
    notes: list[str] = []  # damage read around, no row lost to it
    segments: list[Segment] = [str(seg) for seg in segment_paths(p)]
    segments += _pieces(p, skipped, notes)
    spool, first_spool_row, h, damage = _ring(p, segments, notes)
    want = [(f.name, f.type) for f in spool.schema]
    named = names_from_segments(segments, h["uid"], want)
    if named is not None:  # the spool's column names are not its segments': its text changed
        differ = next(f"{w[0]!r} where they name {n[0]!r}" for w, n in zip(want, named) if w != n)
        _note(
            notes,
            p,
            f"{p} names a column {differ} (same types; its schema text is damaged): the "
            "segments' names are used, and every row is kept",
        )
        spool = spool.rename_columns([n for n, _ in named])
        want = named
    keep = None
    if columns is not None:
        unknown = [c for c in columns if c not in spool.schema.names]
        if unknown:
            raise ValueError(
                f"columns {unknown} are not columns of the spool {p}; its columns: "
                f"{', '.join(spool.schema.names)}"
            )
        keep = [f.name for f in spool.schema if f.name in {"time", "mono_ns", *columns}]
    plan, next_row, rows, gaps, left_out = _plan(p, segments, h, want, keep, skipped)
    lost_to: dict[str, int] = {}
    lost_unknown = False  # rows were lost that nothing counts
    if damage is not None:  # the ring's rows are lost: those after the segments' are counted
        ring_error, counted = damage
        if counted is None:
            lost_unknown = True
            why = "how many is unknown: its header's counters cannot be read either"
        else:
            only_ring = max(0, counted - next_row)
            if only_ring:
                lost_to["spool"] = only_ring
            why = f"{only_ring} rows, by the {counted} its header's counters count"
        _skip(
            skipped,
            p,
            f"{ring_error}: its segments' rows are recovered, those only its ring held are "
            f"lost ({why})",
        )
    elif first_spool_row > next_row:
        gaps.append((next_row, first_spool_row))
    spool_from = max(next_row, first_spool_row)
    rest = spool.slice(spool_from - first_spool_row)
    rows += rest.num_rows
    gap = sum(b - a for a, b in gaps)
    in_left_out = _overlap(gaps, [e for e in left_out if e is not None])
    for cause, n in (
        ("segments", in_left_out),
        ("unplaced" if None in left_out else "overwritten", gap - in_left_out),
    ):
        if n:
            lost_to[cause] = n
    lost = sum(lost_to.values())
    # What the spool's header tells of the run (the rest is listed as missing in it).
    prov = recovered(
        h,
        rows=rows,
        rows_lost=None if lost_unknown else lost,
        segments=[s for s, _, _ in plan],
        rest=rest,
        segment_time=functools.partial(_segment_time, uid=h["uid"], want=want),
    )
    meta = {PROVENANCE_KEY: dumps(prov)}
    if lost_unknown:  # never a number nobody counted: the key is absent, and this says why
        meta[ROWS_LOST_UNKNOWN_KEY] = "true"
    else:
        meta[ROWS_LOST_KEY] = str(lost)
    if lost_to:
        meta[LOST_TO_KEY] = "; ".join(f"{n} {LOST_CAUSES[c]}" for c, n in lost_to.items())
    # The events are read when asked for (Recovered.events); a damaged sidecar is said now and
    # never stops the rows.
    error = events_file.damage_beside(p, h["uid"])
    if error is not None:
        meta[events_file.ERROR_KEY.decode()] = error
    if skipped:
        meta[SKIPPED_KEY] = "; ".join(skipped)
    if notes:
        meta[NOTES_KEY] = "; ".join(notes)
    schema = spool.schema.with_metadata(meta)
    if keep is not None:
        schema = pa.schema([schema.field(n) for n in keep], metadata=schema.metadata)
        rest = rest.select(keep)

    def parts() -> Iterator[pa.Table]:
        last_mono = -1
        for seg, first, skip in plan:
            try:
                table = read_segment(seg, h["uid"], want, keep)
                if first_row(seg, table.schema.metadata, table.num_rows, h["head"]) != first:
                    raise SpoolError(f"segment {seg} changed while it was being recovered")
                part = table.slice(skip).replace_schema_metadata(None)
                last_mono = check_order(seg, part, last_mono)
            except SpoolError as exc:  # damaged since the plan: its rows are lost, not the rest
                _skip(skipped, p, f"{exc} (after the rows were counted)")
                continue
            yield part.rename_columns(schema.names).cast(schema)
        check_order(p, rest, last_mono)
        yield rest.cast(schema)

    events = functools.partial(events_file.read_beside, p, h["anchor_ns"], h["uid"], strict=False)
    return Recovered(schema, rows, lost, parts(), events, skipped, lost_to, notes, lost_unknown)


def _ring(
    p: str, segments: list[Segment], notes: list[str]
) -> tuple[pa.Table, int, dict[str, Any], tuple[SpoolError, int | None] | None]:
    """The spool's ring read (its rows, the first one's index, its header), and None; or, for a
    spool whose ring cannot be read but whose segments can, no rows, a header taken from the
    segments, and the error with the rows its header's counters count (None: unknown). A
    spool whose schema text alone is damaged is read with its segments' columns."""
    try:
        spool, first, h = read_ring(p, 0)
        return spool, first, h, None
    except SchemaError as exc:
        error: SpoolError = exc
        fields = fields_from_segments(segments, p)
        if fields is not None:
            try:
                spool, first, h = read_ring(p, 0, fields)
            except SpoolError as again:
                error = again
            else:
                _note(
                    notes,
                    p,
                    f"{exc}: its columns are taken from its segments (every row its ring holds "
                    "is recovered)",
                )
                return spool, first, h, None
    except SpoolError as exc:
        error = exc
    if not segments or not os.path.lexists(p):
        raise error
    # A damaged header loses the ring's rows, not the segments' (which hold the columns).
    h = header_from_segments(p, segments, str(error))
    return h.pop("schema").empty_table(), 0, h, (error, counted_rows(p))


def _plan(
    p: str,
    segments: list[Segment],
    h: dict[str, Any],
    want: list[tuple[str, pa.DataType]],
    keep: list[str] | None,
    skipped: list[str],
) -> tuple[list[tuple[Segment, int, int]], int, int, list[tuple[int, int]], list[Any]]:
    """The segments to read, in order: ``(segment, first row, rows to skip)``; the row after
    the last one they hold; the rows they give; the ranges of rows no segment gives (before
    the ring's); and the rows each segment left out should have held (``(first, end)``, None
    when unknown)."""
    plan: list[tuple[Segment, int, int]] = []
    gaps: list[tuple[int, int]] = []
    left_out: list[tuple[int, int] | None] = []
    next_row = rows = 0
    last_mono = -1
    for seg in segments:
        try:
            first, n = segment_extent(seg, h, want)
            skip = max(0, next_row - first)
            if skip < n:
                # Decoded now (the columns the parts hold): a segment whose footer reads but
                # whose data does not is left out here, its rows counted lost, not recovered.
                table = read_segment(seg, h["uid"], want, keep).slice(skip)
                check_clock(seg, table, h["anchor_ns"])
                last_mono = check_order(seg, table, last_mono)
                del table
        except SpoolError as exc:
            _skip(skipped, p, str(exc))
            left_out.append(claimed_rows(seg, h["uid"]))
            continue
        if first > next_row:
            gaps.append((next_row, first))
        if skip < n:
            plan.append((seg, first, skip))
            rows += n - skip
        next_row = max(next_row, first + n)
    return plan, next_row, rows, gaps, left_out


def _overlap(gaps: list[tuple[int, int]], extents: list[tuple[int, int]]) -> int:
    """Rows of ``gaps`` that some of ``extents`` (row ranges ``[first, end)``) cover."""
    covered = 0
    for a, b in gaps:
        marks = sorted((max(a, x), min(b, y)) for x, y in extents if x < b and y > a)
        at = a
        for x, y in marks:
            x = max(x, at)
            if y > x:
                covered += y - x
                at = y
    return covered


def _pieces(spool: str, skipped: list[str], notes: list[str]) -> list[Segment]:
    """The pieces of the spool's pieces file (owned by this process's user, as the spool is
    checked to be later: a piece of another owner is refused when it is read): those its index
    names, then those after them found by reading the file itself (its index missing, empty,
    damaged, or a crash between a piece and its record), with a note."""
    index, pieces_file = index_path(spool), pieces_path(spool)
    try:
        uid = os.lstat(pieces_file if os.path.lexists(pieces_file) else index).st_uid
    except OSError:
        return []
    indexed: list[Piece] = []
    damage = None
    try:
        indexed, damage = read_index(spool, uid)
    except SpoolError as exc:
        damage = str(exc)
    found: list[Piece] = []
    if os.path.lexists(pieces_file):
        start = max((p.offset + p.length for p in indexed), default=0)
        try:
            found = scan_pieces(spool, uid, start, len(indexed))
        except SpoolError as exc:
            _skip(skipped, spool, str(exc))
    if damage is not None and not found:
        _skip(skipped, spool, damage)
    if found:
        if damage is not None:
            why = damage
        elif not os.path.lexists(index):
            why = f"{index} is missing"
        elif not indexed:
            why = f"{index} names no piece"
        else:
            why = f"{index} names fewer pieces than its file holds (a crash before a record)"
        rows = sum(p.rows for p in found)
        _note(
            notes,
            spool,
            f"{why}: {len(found)} piece(s) with {rows} rows found by reading {pieces_file} itself",
        )
    return [*indexed, *found]


def _segment_time(
    seg: Segment, last: bool, *, uid: int, want: list[tuple[str, pa.DataType]]
) -> int | None:
    """The first (or last) ``time`` of a segment, for the provenance."""
    times = read_segment(seg, uid, want, ["time"]).column("time")
    return time_cell_ns(times[-1 if last else 0]) if len(times) else None


def recover_events(path: str | os.PathLike[str]) -> pa.Table:
    """The scope events recorded while a spooled sampler ran (sidecar ``PATH.events``), in order.

    Columns (:data:`.events_file.SCHEMA`): ``mono_ns`` (int64, CLOCK_MONOTONIC ns, the rows'
    clock), ``kind`` (uint8, 1 = begin, 2 = end), ``thread_id`` (int64), ``scope_id`` (uint32),
    ``depth`` (uint16), ``labels_id`` (uint32), ``stack_id`` (uint64), ``scope`` and ``labels``
    (the ids' strings). Metadata ``stroboscope.events_lost``, ``stroboscope.events_cut_bytes``
    (a torn tail left out), ``stroboscope.anchor_realtime_ns``. No rows without a sidecar. A
    SIGKILL loses at most the events since the segment writer's last wake-up (<= 0.25 s).
    Raises :class:`SpoolError` as :func:`recover_table` does, or for a sidecar that is not an events
    file, or not a regular file of the spool's owner.
    """
    _, _, h = read_ring(p := os.fspath(path), 0)
    return events_file.read_beside(p, h["anchor_ns"], h["uid"])


def recover_table(path: str | os.PathLike[str]) -> tuple[pa.Table, int]:
    """Every row recorded in a spool and its segments, in order and without duplicates, as one
    table (:func:`recover_parts` read whole), and the rows lost.

    :func:`stroboscope.recording.spool.recover` is the same rows as a frame. Columns ``time``,
    ``mono_ns`` and the metrics; the schema metadata ``stroboscope.rows_lost``
    (:data:`ROWS_LOST_KEY`) counts the rows recorded that are not in the table (by cause:
    :data:`LOST_TO_KEY`), and ``stroboscope.provenance`` says what the spool's header tells
    of the run.

    Raises
    ------
    SpoolError
        When the file is missing, empty, truncated, corrupt, or not a spool (wrong magic or
        format version): the message says which.
    """
    got = recover_parts(path)
    table = pa.Table.from_batches(
        [batch for part in got.parts for batch in part.to_batches()], schema=got.schema
    )
    return table, got.rows_lost


def remove_spool(path: str | os.PathLike[str]) -> None:
    """Delete a spool, its segments (files, or pieces and their index), events sidecar, the
    note naming a command's events directory and the stacks streams (once their rows are
    written elsewhere), and the temporary file of a segment whose writer died
    half-way (``.NAME.seg-*.tmp``)."""
    for p in [*segment_paths(path), *map(Path, glob.glob(segment_temp_glob(path)))]:
        p.unlink(missing_ok=True)
    Path(pieces_path(path)).unlink(missing_ok=True)
    Path(index_path(path)).unlink(missing_ok=True)
    Path(events_file.events_path(os.fspath(path))).unlink(missing_ok=True)
    events_file.remove_events_dir_note(os.fspath(path))  # a recorded command's directory, named
    remove_sidecar(path)  # the stacks a --stacks recording drained beside it
    Path(path).unlink(missing_ok=True)
