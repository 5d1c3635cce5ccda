"""The rows of a finished recording, into its output: from its segments and the ring's rest
(a clean end), or from the spool and its segments read back (the recovery path).

A clean end writes each row once. The segment writer leaves the rows since its last segment in
the ring, and the output is made of the segments it wrote (the rows the ring could not hold) and
those rows, taken from the ring through the extension; nothing is read back from the spool. When
the segments are pieces of one file (a recording prepared for this end before its first segment,
:mod:`stroboscope.formats.pieces`), a Parquet output *is* that file: the rest is appended as the
last piece, then one footer joining every piece's row groups with the output's schema and
metadata (:func:`stroboscope.formats.parquet_footer.joined_footer`), and the file is renamed to
the output, so no segmented row is written again. Where it cannot be (a CSV output, the spool
kept, the output on another filesystem than the spool, segment files of their own), the
segments are read back and written into the output with the rest, which gives the same rows.
Should a segment not be what its writer wrote, the output is written the way a crash is
recovered instead (:func:`write_output`: the spool and its segments, as ``stroboscope
recover`` reads them), which gives the same rows too.

:func:`write_output` and :func:`spool_column_stats` are that recovery path: the spool's parts
(:func:`stroboscope.formats.spool_read.recover_parts`) streamed into the output, one segment in
memory at a time, and read again a segment at a time for the column statistics
(:func:`stroboscope.analysis.column_stats.column_stats_streamed`).
"""

from __future__ import annotations

import contextlib
import logging
import os
import secrets
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from typing import TYPE_CHECKING, Any

import pyarrow as pa

from stroboscope._base.files import check_replaceable
from stroboscope.formats import events_file
from stroboscope.formats.parquet_footer import (
    FooterError,
    FooterJoin,
    footer_bytes,
    footer_bytes_of,
    footer_of_schema,
)
from stroboscope.formats.pieces import (
    Piece,
    append_piece,
    append_tail,
    encode_piece,
    read_index,
    read_piece_range,
)
from stroboscope.formats.provenance import PROVENANCE_KEY, dumps, from_schema
from stroboscope.formats.segments import (
    FIRST_ROW_KEY,
    Segment,
    read_segment,
    segment_extent,
    stored_schema,
)
from stroboscope.formats.spool_header import SpoolError
from stroboscope.formats.spool_read import ROWS_LOST_KEY, recover_parts
from stroboscope.formats.writers import output_format, write_parts

if TYPE_CHECKING:
    from stroboscope.recording.segments import SegmentWriter
    from stroboscope.sampling import Frame

_LOG = logging.getLogger("stroboscope.recording")

_CLOCK = ["time", "mono_ns"]


class Clean:
    """The rows of a cleanly stopped recording: the segments its writer wrote (files, or
    pieces of its pieces file), then the rows it left in the ring (``rest``, taken through the
    extension). SpoolError when a segment is not what the writer wrote."""

    def __init__(self, writer: SegmentWriter, spool: str, rest: Frame) -> None:
        self.spool = spool
        self.uid = os.geteuid()
        self.rest = rest.to_arrow()
        self.rest_first = rest.first_row
        self.schema = stored_schema(self.rest.schema)
        self.want = [(f.name, f.type) for f in self.schema]
        self.pieces_file = writer.pieces
        written = writer.written
        head = rest.first_row + len(rest)
        h = {"uid": self.uid, "head": head}
        self.segments: list[Segment] = [w.path for w in written]
        # The pieces' row groups, moved into the joined footer as each footer is read: all
        # that is kept of the footers (a footer parsed whole is ~200 kB of objects a piece).
        self.footers = FooterJoin()
        if self.pieces_file is not None and written:
            pieces, damage = read_index(spool, self.uid)
            if damage is not None or len(pieces) != len(written):
                raise SpoolError(f"the index of {self.pieces_file} changed since it was written")
            self.segments = list(pieces)
        for seg, w in zip(self.segments, written):  # footers only: a changed segment is refused
            if isinstance(seg, Piece):  # its schema is checked when the footers are joined
                try:
                    rows, meta = self.footers.add(self._footer(seg), seg.offset)
                    first = meta.get(FIRST_ROW_KEY)
                    extent = (None if first is None else int(first), rows)
                except (FooterError, KeyError, AttributeError, ValueError) as exc:
                    raise SpoolError(f"segment {seg} cannot be read: {exc}") from None
            else:
                extent = segment_extent(seg, h, self.want)
            if extent != (w.first_row, w.rows):
                raise SpoolError(f"segment {seg} changed since it was written")
        self.extents = [(w.first_row, w.rows) for w in written]
        self.joined_to: str | None = None  # the output, once the pieces file became it
        self.rows = sum(w.rows for w in written) + self.rest.num_rows
        self.rows_lost = writer.rows_lost
        self.names = [n for n in self.schema.names if n not in _CLOCK]

    def parts(self, columns: Sequence[str] | None = None) -> Iterator[pa.Table]:
        """The rows in order, one segment at a time, as :attr:`schema` (only ``time``,
        ``mono_ns`` and ``columns`` when given)."""
        keep = (
            None if columns is None else [n for n in self.schema.names if n in {*_CLOCK, *columns}]
        )
        schema = self.schema if keep is None else pa.schema([self.schema.field(n) for n in keep])
        for seg, (first, n) in zip(self.segments, self.extents):
            table = read_segment(seg, self.uid, self.want, keep)
            raw = (table.schema.metadata or {}).get(FIRST_ROW_KEY, b"")
            if table.num_rows != n or raw != str(first).encode():
                raise SpoolError(f"segment {seg} changed since it was written")
            yield table.replace_schema_metadata(None).cast(schema)
        rest = self.rest if keep is None else self.rest.select(keep)
        yield rest.replace_schema_metadata(None).cast(schema)

    def read(self, columns: Sequence[str] | None) -> Iterator[pa.Table]:
        """Every row of ``time``, ``mono_ns`` and ``columns`` (every column for None), a part
        at a time: :meth:`parts`, or the output's row groups once the pieces were joined
        into it."""
        if self.joined_to is None:
            yield from self.parts(columns)
            return
        import pyarrow.parquet as pq

        keep = None
        if columns is not None:
            keep = [n for n in self.schema.names if n in {*_CLOCK, *columns}]
        with pq.ParquetFile(self.joined_to) as joined:
            for group in range(joined.num_row_groups):
                yield joined.read_row_group(group, columns=keep).replace_schema_metadata(None)

    def ends(self) -> pa.Table:
        """The first and the last row's ``time`` and ``mono_ns`` (no row when there is none)."""

        def clock(seg: Segment) -> pa.Table:
            return read_segment(seg, self.uid, self.want, _CLOCK)

        first = clock(self.segments[0]) if self.segments else self.rest
        last = self.rest if self.rest.num_rows or not self.segments else clock(self.segments[-1])
        rows = [t.slice(at, 1) for t, at in ((first, 0), (last, last.num_rows - 1)) if t.num_rows]
        if not rows:
            return pa.table({})
        return pa.concat_tables([t.select(_CLOCK).replace_schema_metadata(None) for t in rows])

    def joinable(self, output: str | os.PathLike[str], keep_spool: bool) -> bool:
        """Whether the output can be the pieces file itself (see the module)."""
        if self.pieces_file is None or not self.segments or keep_spool:
            return False
        if output_format(output) != "parquet":
            return False
        same = same_filesystem(os.path.dirname(os.path.abspath(output)), self.pieces_file)
        if not same:
            _LOG.info(
                "the spool's pieces are on another filesystem than %s: read back and written "
                "into it (a spool beside the output writes each row once)",
                os.fspath(output),
            )
        return same

    def join(self, schema: pa.Schema, output: str | os.PathLike[str]) -> None:
        """Make the pieces file the output: the rest appended as its last piece, then one
        footer of ``schema`` (its metadata the output's) joining every piece; renamed to
        ``output``. SpoolError when a piece's footer cannot be joined (nothing renamed)."""
        assert self.pieces_file is not None
        out = os.fspath(output)
        check_replaceable(out)
        try:
            if self.rest.num_rows:  # the last piece, its footer taken from the bytes appended
                meta = {FIRST_ROW_KEY: str(self.rest_first).encode()}
                rest = self.rest.replace_schema_metadata(None).cast(self.schema)
                data = encode_piece(rest.replace_schema_metadata(meta))
                at = append_piece(data, self.pieces_file, self.rest_first, rest.num_rows)
                self.footers.add(footer_bytes(data), at)
                del data, rest
            tail = self.footers.footer(footer_of_schema(schema))
        except FooterError as exc:
            raise SpoolError(f"the pieces of {self.pieces_file} cannot be joined: {exc}") from None
        append_tail(self.pieces_file, tail)  # on disk (fsync) before it takes the name
        _publish(self.pieces_file, out)
        self.joined_to = out

    def _footer(self, piece: Piece) -> memoryview:
        """The footer of ``piece`` (its Thrift bytes), its tail alone read (FooterError when
        it is not one)."""

        def read(offset: int, n: int) -> bytes:
            return read_piece_range(piece, self.uid, offset, n)

        return footer_bytes_of(read, piece.length)


def same_filesystem(a: str, b: str) -> bool:
    """Whether the paths ``a`` and ``b`` are on one filesystem (False when one is missing)."""
    try:
        return os.stat(a).st_dev == os.stat(b).st_dev
    except OSError:
        return False


def _publish(pieces: str, out: str) -> None:
    """Give the pieces file the name ``out``: a hard link under a name nobody holds, renamed
    over ``out``, so the pieces keep their own name (and a watchdog that dumps the spool before
    the finish stops it still reads every row) until the spool is removed; a rename where the
    filesystem has no hard links."""
    directory, name = os.path.split(out)
    tmp = os.path.join(directory, f".{name}.{secrets.token_hex(8)}.tmp")
    try:
        os.link(pieces, tmp)
    except OSError:
        check_replaceable(out)  # still so: nothing was put there meanwhile
        os.replace(pieces, out)
        return
    try:
        check_replaceable(out)
        os.replace(tmp, out)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise


def write_clean(
    clean: Clean,
    output: str | os.PathLike[str] | None,
    prov: Mapping[str, Any],
    *,
    keep_spool: bool = False,
) -> tuple[int, int, dict[str, Any]]:
    """Write ``clean``'s rows to ``output`` (nothing when None) with ``prov`` completed from
    them as :func:`write_output` completes it; return the rows, columns and that provenance."""
    if output is None:
        return clean.rows, len(clean.schema), dict(prov)
    full = _provenance(prov, clean.ends(), clean.rows)
    meta = {ROWS_LOST_KEY: str(clean.rows_lost), PROVENANCE_KEY: dumps(full)}
    error = events_file.damage_beside(clean.spool, clean.uid)
    if error is not None:
        meta[events_file.ERROR_KEY.decode()] = error
    schema = clean.schema.with_metadata(meta)
    if clean.joinable(output, keep_spool):
        clean.join(schema, output)
    else:
        parts = (part.replace_schema_metadata(schema.metadata) for part in clean.parts())
        write_parts(schema, parts, output)
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
    from stroboscope.sampling import for_table

    out = for_table(prov, ends)
    out["rows"] = rows
    for key in ("end_ns", "end_time"):
        if recovered is not None and recovered.get(key) is not None:
            out[key] = recovered[key]
    return out


def _first_nonempty(parts: Iterator[pa.Table]) -> tuple[pa.Table | None, Iterator[pa.Table]]:
    """The first part with a row (None when none has) and the parts from it on (which let go
    of each part once it is taken)."""

    def again(box: list[pa.Table]) -> Iterator[pa.Table]:
        yield box.pop()  # held by the box until taken, not after
        yield from parts

    for part in parts:
        if part.num_rows:
            return part, again([part])
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
    del first, ends  # the first part is let go once written, as every part is
    schema = got.schema.with_metadata(
        {**(got.schema.metadata or {}), PROVENANCE_KEY.encode(): dumps(full).encode()}
    )
    write_parts(schema, (part.replace_schema_metadata(schema.metadata) for part in parts), output)
    return got.rows, len(schema)


def column_stats_of(
    read: Callable[[Sequence[str] | None], Iterable[pa.Table]],
    names: Sequence[str],
    units: Mapping[str, str],
) -> tuple[str, float]:
    """The column statistics of every row of the metric columns ``names``, ``read`` giving
    ``time``, ``mono_ns`` and the columns asked a part at a time (a segment, a row group), and
    the seconds from the first to the last row. One part in memory at a time
    (:func:`stroboscope.analysis.column_stats.column_stats_streamed`)."""
    from stroboscope.analysis.column_stats import column_stats_streamed, stats_text

    def parts(columns: Sequence[str] | None) -> Iterator[pa.Table]:
        for part in read(names if columns is None else columns):
            yield part
            del part
            # What Arrow's allocator kept of this part would stay for the rest of the process.
            pa.default_memory_pool().release_unused()

    rows, figures = column_stats_streamed(parts, units)
    return stats_text(rows, figures), rows.span_s


def spool_column_stats(
    spool: str | os.PathLike[str], units: Mapping[str, str]
) -> tuple[str, float]:
    """The text of :func:`stroboscope.analysis.column_stats.column_stats_text` for every row of
    ``spool``, read a part (a segment) at a time, and the seconds from its first to its last
    row."""

    def read(columns: Sequence[str] | None) -> Iterator[pa.Table]:
        got = recover_parts(spool, columns=columns)
        empty = True
        for part in got.parts:
            empty = False
            yield part
        if empty:  # the columns all the same, with no row
            yield pa.Table.from_batches([], schema=got.schema)  # (empty_table loads pandas)

    names = [f.name for f in recover_parts(spool).schema if f.name not in _CLOCK]
    return column_stats_of(read, names, units)
