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

import pyarrow as pa

from stroboscope._base.checks import check_path, describe
from stroboscope.formats import events_file
from stroboscope.formats.pieces import index_path, pieces_path, read_index
from stroboscope.formats.provenance import PROVENANCE_KEY, dumps, recovered, time_cell_ns
from stroboscope.formats.segments import (
    FIRST_ROW_KEY,
    Segment,
    check_clock,
    check_order,
    first_row,
    header_from_segments,
    read_segment,
    segment_extent,
    segment_paths,
    segment_temp_glob,
)
from stroboscope.formats.spool_header import MAGIC, VERSION, SpoolError
from stroboscope.formats.spool_ring import read_ring, read_spool

__all__ = [
    "FIRST_ROW_KEY",
    "MAGIC",
    "ROWS_LOST_KEY",
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
"""Metadata of recovered rows: how many rows the ring overwrote before a segment took them."""
SKIPPED_KEY = "stroboscope.segments_skipped"
"""Metadata of recovered rows: why segment files were left out (see :class:`Recovered`)."""
_LOG = logging.getLogger("stroboscope.recording")


def _skip(skipped: list[str], spool: str, why: str) -> None:
    skipped.append(why)
    _LOG.warning("recovering %s, left out: %s (every other row is recovered)", spool, why)


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
        Rows overwritten in the ring before a segment could take them.
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
    segments: list[Segment] = [str(seg) for seg in segment_paths(p)]
    segments += _pieces(p, skipped)
    try:
        spool, first_spool_row, h = read_ring(p, 0)
    except SpoolError as exc:
        if not segments or not os.path.lexists(p):
            raise
        # A damaged header loses the ring's rows, not the segments' (which hold the columns).
        h = header_from_segments(p, segments, str(exc))
        spool, first_spool_row = h.pop("schema").empty_table(), 0
        _skip(
            skipped,
            p,
            f"{exc}: its segments' rows are recovered, those only its ring held are lost "
            "(how many is unknown)",
        )
    want = [(f.name, f.type) for f in spool.schema]
    plan: list[tuple[Segment, int, int]] = []  # (segment, first row, rows to skip)
    next_row = 0
    lost = 0
    rows = 0
    last_mono = -1
    for seg in segments:  # a segment's footer and clock only: its rows are read later
        try:
            first, n = segment_extent(seg, h, want)
            skip = max(0, next_row - first)
            if skip < n:
                clock = read_segment(seg, h["uid"], want, ["time", "mono_ns"]).slice(skip)
                check_clock(seg, clock, h["anchor_ns"])
                last_mono = check_order(seg, clock, last_mono)
        except SpoolError as exc:
            _skip(skipped, p, str(exc))
            continue
        if first > next_row:
            lost += first - next_row
        if skip < n:
            plan.append((seg, first, skip))
            rows += n - skip
        next_row = max(next_row, first + n)
    spool_from = max(next_row, first_spool_row)
    lost += max(0, first_spool_row - next_row)
    rest = spool.slice(spool_from - first_spool_row)
    rows += rest.num_rows
    # What the spool's header tells of the run (the rest is listed as missing in it).
    prov = recovered(
        h,
        rows=rows,
        rows_lost=lost,
        segments=[s for s, _, _ in plan],
        rest=rest,
        segment_time=functools.partial(_segment_time, uid=h["uid"], want=want),
    )
    meta = {ROWS_LOST_KEY: str(lost), PROVENANCE_KEY: dumps(prov)}
    # The events are read when asked for (Recovered.events); a damaged sidecar is said now and
    # never stops the rows.
    error = events_file.damage_beside(p, h["uid"])
    if error is not None:
        meta[events_file.ERROR_KEY.decode()] = error
    if skipped:
        meta[SKIPPED_KEY] = "; ".join(skipped)
    schema = spool.schema.with_metadata(meta)
    keep = None
    if columns is not None:
        unknown = [c for c in columns if c not in schema.names]
        if unknown:
            raise ValueError(
                f"columns {unknown} are not columns of the spool {p}; its columns: "
                f"{', '.join(schema.names)}"
            )
        keep = [f.name for f in schema if f.name in {"time", "mono_ns", *columns}]
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
            yield part.cast(schema)
        check_order(p, rest, last_mono)
        yield rest.cast(schema)

    events = functools.partial(events_file.read_beside, p, h["anchor_ns"], h["uid"], strict=False)
    return Recovered(schema, rows, lost, parts(), events, skipped)


def _pieces(spool: str, skipped: list[str]) -> list[Segment]:
    """The pieces the spool's index names (owned by this process's user, as the spool is
    checked to be later: a piece of another owner is refused when it is read)."""
    try:
        uid = os.lstat(index_path(spool)).st_uid
    except OSError:
        return []
    try:
        pieces, damage = read_index(spool, uid)
    except SpoolError as exc:
        _skip(skipped, spool, str(exc))
        return []
    if damage is not None:
        _skip(skipped, spool, damage)
    return list(pieces)


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
    (:data:`ROWS_LOST_KEY`) counts rows overwritten in the ring before a segment could take
    them, and ``stroboscope.provenance`` says what the spool's header tells of the run.

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
    """Delete a spool, its segments (files, or pieces and their index) and events sidecar (once
    their rows are written elsewhere), and the temporary file of a segment whose writer died
    half-way (``.NAME.seg-*.tmp``)."""
    for p in [*segment_paths(path), *map(Path, glob.glob(segment_temp_glob(path)))]:
        p.unlink(missing_ok=True)
    Path(pieces_path(path)).unlink(missing_ok=True)
    Path(index_path(path)).unlink(missing_ok=True)
    Path(events_file.events_path(os.fspath(path))).unlink(missing_ok=True)
    Path(path).unlink(missing_ok=True)
