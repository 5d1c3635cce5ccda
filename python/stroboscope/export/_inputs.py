"""The inputs of a report: recordings read back as series of rows, each checked to be one.

An input is a Parquet recording (``stroboscope record -o x.parquet``, ``Frame.to_parquet``), a
spool (``Sampler(spool=...)``: read with its segments through
:func:`stroboscope.formats.spool_read.recover_table`), a folder of segments
(``*.seg-NNNNNN.parquet``, or the pieces file and index a killed ``record`` leaves, with or
without their spool), or a hive-partitioned directory of
recordings (``key=value/.../part-*.parquet``, e.g. ``job=…/host=…/rank=…``: one series per
combination of partition values). Each gives one or more :class:`Recording`; a scope-intervals
table beside a recording (``<stem>.scopes.parquet``) or given by the caller is attached to it.
"""

from __future__ import annotations

import fnmatch
import logging
import os
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from stroboscope._base.files import regular_source, why_unreachable
from stroboscope.export._recording import FileColumns, open_lazy, read_columns
from stroboscope.export._recording import Recording as Recording  # its home before
from stroboscope.formats.pieces import pieces_spool, read_index, read_piece
from stroboscope.formats.segments import parse_segment_name
from stroboscope.formats.spool_header import SpoolError
from stroboscope.formats.spool_layout import MAGIC
from stroboscope.formats.writers import is_companion, output_format, scopes_path

_LOG = logging.getLogger("stroboscope.report")

SCOPE_COLUMNS = ("name", "begin_ns", "end_ns")
"""The scope-intervals columns a report needs (see the contract's full schema)."""


def _decode(metadata: dict[bytes, bytes] | None) -> dict[str, str]:
    return {
        k.decode(errors="replace"): v.decode(errors="replace") for k, v in (metadata or {}).items()
    }


def check_schema(schema: pa.Schema, what: str) -> None:
    """A recording's columns: ``time`` (a timestamp) and ``mono_ns`` (integers); a ValueError
    naming ``what`` and what is wrong otherwise."""
    names = schema.names
    missing = [c for c in ("time", "mono_ns") if c not in names]
    if missing:
        shown = ", ".join(names[:8]) + (", …" if len(names) > 8 else "")
        raise ValueError(
            f"{what} is not a stroboscope recording: it has no {' and no '.join(missing)} column "
            f"(its columns: {shown or 'none'})"
        )
    if not pa.types.is_integer(schema.field("mono_ns").type) or not pa.types.is_timestamp(
        schema.field("time").type
    ):
        raise ValueError(
            f"{what} is not a stroboscope recording: mono_ns must be integers and time a "
            f"timestamp, got {schema.field('mono_ns').type} and {schema.field('time').type}"
        )


def check_recording(table: pa.Table, what: str) -> pa.Table:
    """``table`` if it is a non-empty recording (:func:`check_schema`, rows with both a
    ``mono_ns`` and a ``time``), sorted by ``mono_ns``; a ValueError naming ``what`` and what
    is wrong otherwise."""
    check_schema(table.schema, what)
    rows = _recording_rows(table, what)
    return table if rows is None else table.take(pa.array(rows))


def _recording_rows(table: pa.Table, what: str) -> np.ndarray[Any, Any] | None:
    """The rows of ``table`` (its ``time`` and ``mono_ns``) that make a recording, in
    ``mono_ns`` order: None when that is every row as it is; a ValueError when none is."""
    if table.num_rows == 0:
        raise ValueError(f"{what} is an empty recording: it has its columns but no rows")
    rows = table.num_rows
    picked = None
    if table.column("mono_ns").null_count or table.column("time").null_count:
        # A row without its time cannot be placed: left out (a recording never has one).
        valid = pc.and_(table.column("mono_ns").is_valid(), table.column("time").is_valid())
        picked = np.flatnonzero(valid.to_numpy(zero_copy_only=False))
        if len(picked) == 0:
            raise ValueError(
                f"{what} is not a readable recording: none of its {rows} rows has both a "
                f"mono_ns and a time (they are null)"
            )
        table = table.take(pa.array(picked))
    mono = table.column("mono_ns").to_numpy(zero_copy_only=False)
    steps = np.diff(mono)
    back = int(np.count_nonzero(steps < 0))
    if back:
        order = np.argsort(mono, kind="stable")
        picked = order if picked is None else picked[order]
        steps = np.diff(mono[order])
    repeated = int(np.count_nonzero(steps == 0))
    untimed = rows - len(mono)
    if back or repeated or untimed:  # a recorder writes none of these: said, with the counts
        said = [
            f"{back} times mono_ns goes back (the rows are sorted)" if back else "",
            f"{repeated} row(s) repeat the mono_ns of the row before (kept)" if repeated else "",
            f"{untimed} row(s) have no mono_ns or time (left out)" if untimed else "",
        ]
        _LOG.warning(
            "%s: of its %d rows, %s: not as a recorder writes them",
            what,
            rows,
            "; ".join(t for t in said if t),
        )
    return picked


def check_lazy(s: Recording, what: str) -> Recording:
    """:func:`check_recording` of a recording whose metric columns are left in its file."""
    check_schema(s.schema, what)
    rows = _recording_rows(s.held, what)
    return s if rows is None else s.take_rows(rows)


def _wanted(schema: pa.Schema, patterns: list[str] | None) -> list[str] | None:
    """The columns to read for ``patterns`` (``--columns``), or None for all of them: also
    when a pattern matches nothing, so that the selection's error can list every column."""
    if not patterns:
        return None
    names = [n for n in schema.names if n not in ("time", "mono_ns")]
    if not all(fnmatch.filter(names, p) for p in patterns):
        return None
    keep = [n for n in names if any(fnmatch.fnmatchcase(n, p) for p in patterns)]
    return [n for n in ("time", "mono_ns") if n in schema.names] + keep


def _read_file(path: Path, patterns: list[str] | None = None) -> pa.Table:
    """The rows of a Parquet file or a spool, every column asked for in memory."""
    return _open_file(path, patterns)[0]


def _open_file(
    path: Path, patterns: list[str] | None = None, lazy: bool = False
) -> tuple[pa.Table, FileColumns | None]:
    """The rows of a Parquet file or a spool; with ``lazy``, a Parquet file's ``time`` and
    ``mono_ns`` only, its other columns left there (:class:`FileColumns`)."""
    with regular_source(path, "recording") as src:  # a FIFO or a device: refused, not awaited
        try:
            with open(src, "rb") as f:
                head = f.read(8)
        except OSError as exc:  # /proc/self/mem: a regular file that no read succeeds on
            raise ValueError(f"{path} cannot be read: {exc.strerror or exc}") from None
        if head[: len(MAGIC)] == MAGIC:
            from stroboscope.formats.spool_read import recover_table

            return recover_table(path)[0], None
        if not head:
            raise ValueError(f"{path} is empty (0 bytes): not a recording")
        if head[:4] != b"PAR1":
            if output_format(path, default="parquet") == "csv":
                raise ValueError(
                    f"{path} is a CSV file: report reads Parquet recordings and spools, not CSV "
                    f"(its columns' units and kinds are not in it); record with -o RUN.parquet"
                )
            raise ValueError(
                f"{path} is not a recording: neither a Parquet file nor a stroboscope spool "
                f"(it starts with {head!r}); give a .parquet recording, a spool, a segment "
                f"folder or a partitioned dataset directory"
            )
        try:  # only the columns asked for: a 1-hour 1 kHz run is read in a fraction of the time
            pf = pq.ParquetFile(src)  # pyarrow's own file (fd_source), never a Python one
            names = _wanted(pf.schema_arrow, patterns)
            if lazy and len(set(pf.schema_arrow.names)) == len(pf.schema_arrow.names):
                return open_lazy(path, pf, names)
            return read_columns(pf, names), None
        except (pa.ArrowException, OSError) as exc:
            raise ValueError(f"{path} is not a readable Parquet file: {exc}") from None


def scopes_beside(path: Path) -> Path | None:
    """``<stem>.scopes.parquet`` beside a recording ``<stem>.parquet`` when it exists (the
    name :func:`stroboscope.formats.writers.scopes_path` gives)."""
    if not path.name.lower().endswith((".parquet", ".pq")) or is_companion(path.name):
        return None
    candidate = Path(scopes_path(path))
    return candidate if candidate.is_file() else None


def read_scopes(path: str | os.PathLike[str]) -> pa.Table:
    """A scope-intervals table from a Parquet file, checked to have the columns a report uses."""
    p = Path(path)
    if not p.exists():
        why = why_unreachable(p)
        raise ValueError(
            f"--scopes {os.fspath(path)!r} {why}"
            if why
            else f"--scopes {os.fspath(path)!r}: no such file"
        )
    try:
        with regular_source(p, "--scopes") as src:
            table = pq.ParquetFile(src).read()
    except (pa.ArrowException, OSError) as exc:
        raise ValueError(
            f"--scopes {os.fspath(path)!r} is not a readable Parquet file: {exc}"
        ) from None
    missing = [c for c in SCOPE_COLUMNS if c not in table.column_names]
    if missing:
        raise ValueError(
            f"{p} is not a scope-intervals table: it has no {', '.join(missing)} column(s) "
            f"(expected name, path, thread_id, stack_id, depth, begin_ns, end_ns)"
        )
    check_scope_rows(table, str(p))
    return table


def check_scope_rows(table: pa.Table, what: str) -> None:
    """Scope calls the report can place: each has a ``begin_ns``, and an ``end_ns`` that is
    null (still open) or not before it; a ValueError naming ``what`` and the first bad row
    otherwise (a null or far-negative time would give steps of -9e15 µs, or stop a summary)."""
    begin, end = table.column("begin_ns"), table.column("end_ns")
    if begin.null_count:
        row = int(pc.index(begin.is_null(), True).as_py())
        raise ValueError(
            f"{what} is not a readable scope-intervals table: row {row} has no begin_ns "
            f"({begin.null_count} of {table.num_rows} rows are null there)"
        )
    before = pc.fill_null(pc.less(end, begin), False)
    if pc.any(before).as_py():
        row = int(pc.index(before, True).as_py())
        raise ValueError(
            f"{what} is not a readable scope-intervals table: row {row} ends before it begins "
            f"(begin_ns {begin[row].as_py()}, end_ns {end[row].as_py()})"
        )


def _segment_groups(directory: Path) -> dict[str, list[Path]]:
    """The spools whose segments the folder holds, each with its segment files in order (a
    spool whose segments are pieces of one file is named with no file: its index names them)."""
    groups: dict[str, list[tuple[int, Path]]] = {}
    for entry in directory.iterdir():
        parsed = parse_segment_name(entry.name)
        if parsed and entry.is_file():
            groups.setdefault(parsed[0], []).append((parsed[1], entry))
        spool = pieces_spool(entry.name)
        if spool is not None and entry.is_file():
            groups.setdefault(spool, [])
    return {base: [p for _, p in sorted(found)] for base, found in sorted(groups.items())}


def _read_segments(directory: Path, base: str, segments: list[Path]) -> pa.Table:
    spool = directory / base
    if spool.is_file():  # the spool holds the rows no segment took yet
        return _read_file(spool)
    tables = [check_recording(_read_file(seg), str(seg)) for seg in segments]
    uid = os.geteuid()
    try:
        pieces, _damage = read_index(spool, uid)  # what a damaged record left out: not read
        for piece in pieces:
            table = pq.read_table(pa.BufferReader(read_piece(piece, uid)))
            tables.append(check_recording(table, str(piece)))
    except (SpoolError, pa.ArrowException) as exc:
        raise ValueError(f"{spool}: its pieces cannot be read: {exc}") from None
    if not tables:
        raise ValueError(f"{spool}: its pieces file has no complete piece (and no spool)")
    tables.sort(key=lambda t: t.column("mono_ns")[0].as_py() if t.num_rows else -1)
    schema = tables[0].schema
    parts = [t.select(schema.names).cast(schema) for t in tables]
    table = pa.concat_tables(parts)
    # Consecutive segments of one spool do not overlap, but a retried write may repeat rows.
    mono = table.column("mono_ns").to_numpy(zero_copy_only=False)
    keep = np.ones(len(mono), dtype=bool)
    keep[1:] = mono[1:] > np.maximum.accumulate(mono)[:-1]
    return table.filter(pa.array(keep)).replace_schema_metadata(schema.metadata)


def _read_dataset(directory: Path) -> list[tuple[str, pa.Table, dict[bytes, bytes] | None]]:
    import pyarrow.dataset as ds

    # Recordings only: not the files kept beside them (scopes, stacks), nor hidden or temporary
    # files.
    files = sorted(
        str(f)
        for f in directory.rglob("*.parquet")
        if f.is_file()
        and not is_companion(f.name)
        and not any(part.startswith((".", "_")) for part in f.relative_to(directory).parts)
    )
    if not files:
        raise ValueError(
            f"{directory} holds no recording: no .parquet file in it or below it (give a "
            f"recording, a spool, a segment folder or a partitioned dataset directory)"
        )
    if not all(_utf8(f) for f in files):  # pyarrow's dataset takes UTF-8 names only
        table, first = _read_files(directory, files)
        return _by_partition(directory, table, first)
    try:
        dataset = ds.dataset(
            files,
            format="parquet",
            partitioning=ds.HivePartitioning.discover(),
            partition_base_dir=str(directory),
        )
    except (pa.ArrowException, OSError) as exc:
        raise ValueError(
            f"{directory} is not a readable dataset of Parquet recordings: {exc}"
        ) from None
    with regular_source(dataset.files[0], "recording") as src:
        first = pq.read_schema(src)
    return _by_partition(directory, dataset.to_table(), first)


def _by_partition(
    directory: Path, table: pa.Table, first: pa.Schema
) -> list[tuple[str, pa.Table, dict[bytes, bytes] | None]]:
    """The rows of a dataset (its files' columns and the partition keys, ``first`` the first
    file's schema), one table per combination of partition values."""
    keys = [n for n in table.schema.names if n not in first.names]
    if not keys:
        return [(directory.name or str(directory), table, first.metadata)]
    out = []
    combos = table.select(keys).group_by(keys).aggregate([]).to_pylist()
    for combo in sorted(combos, key=lambda c: [str(c[k]) for k in keys]):
        mask = None
        for k in keys:
            eq = pc.equal(table.column(k), pa.scalar(combo[k], table.schema.field(k).type))
            mask = eq if mask is None else pc.and_(mask, eq)
        part = table.filter(mask).drop_columns(keys)
        if part.schema.names == first.names:  # keep each field's unit and kind
            part = part.cast(first)
        out.append((" ".join(f"{k}={combo[k]}" for k in keys), part, first.metadata))
    return out


def _utf8(name: str) -> bool:
    """Whether ``name`` (a path as Python decodes it) is UTF-8, as pyarrow needs its paths."""
    try:
        name.encode()
    except UnicodeEncodeError:  # a byte that is not UTF-8, held as a lone surrogate
        return False
    return True


def _read_files(directory: Path, files: list[str]) -> tuple[pa.Table, pa.Schema]:
    """The rows of a dataset whose file names are not all UTF-8, read a file at a time through
    its descriptor, with its partition keys (``key=value`` folders, values %-decoded and whole
    numbers as int32, as pyarrow's hive partitioning reads them; a byte that is not UTF-8
    shown as ``\\xff``), and the first file's schema. A ValueError naming a file that cannot
    be read."""
    import urllib.parse

    tables: list[pa.Table] = []
    found: list[dict[str, str]] = []
    for name in files:
        try:
            with regular_source(name, "recording") as src:
                tables.append(pq.read_table(src))
        except (pa.ArrowException, OSError) as exc:
            raise ValueError(f"{name!r} is not a readable Parquet file: {exc}") from None
        folders = Path(name).relative_to(directory).parts[:-1]
        found.append(dict(f.split("=", 1) for f in folders if "=" in f))
    first = tables[0].schema
    keys = [k for k in dict.fromkeys(k for f in found for k in f) if k not in first.names]
    for k in keys:
        values = [urllib.parse.unquote(f.get(k, ""), errors="surrogateescape") for f in found]
        whole = all(v.isascii() and v.lstrip("-").isdigit() for v in values)
        for i, v in enumerate(values):
            cell: object = int(v) if whole else os.fsencode(v).decode(errors="backslashreplace")
            typ = pa.int32() if whole else pa.string()
            tables[i] = tables[i].append_column(k, pa.array([cell] * tables[i].num_rows, typ))
    try:
        return pa.concat_tables(tables, promote_options="default"), first
    except pa.ArrowException as exc:
        raise ValueError(
            f"{directory} is not a readable dataset of Parquet recordings: {exc}"
        ) from None


def read_input(path: str | os.PathLike[str], patterns: list[str] | None = None) -> list[Recording]:
    """The series of one input (see the module's docstring); ValueError naming what is wrong."""
    p = Path(path)
    if not p.exists():
        why = why_unreachable(p)
        raise ValueError(
            f"{os.fspath(path)!r} {why}"
            if why
            else f"{os.fspath(path)!r}: no such file or directory"
        )
    if p.is_dir():
        segments = _segment_groups(p)
        if segments:
            found = [(base, _read_segments(p, base, segs)) for base, segs in segments.items()]
            return [
                Recording(
                    base,
                    str(p / base),
                    check_recording(t, f"{p / base}"),
                    _decode(t.schema.metadata),
                )
                for base, t in found
            ]
        return [
            Recording(label, str(p), check_recording(t, f"{p} ({label})"), _decode(md))
            for label, t, md in _read_dataset(p)
        ]
    table, lazy = _open_file(p, patterns, lazy=True)
    beside = scopes_beside(p)
    scopes = read_scopes(beside) if beside is not None else None
    if lazy is None:
        table = check_recording(table, str(p))
        return [Recording(p.stem, str(p), table, _decode(table.schema.metadata), scopes)]
    kept = Recording(p.stem, str(p), table, _decode(lazy.schema.metadata), scopes, lazy)
    return [check_lazy(kept, str(p))]


def read_inputs(
    paths: list[str],
    scopes: str | os.PathLike[str] | None = None,
    patterns: list[str] | None = None,
) -> list[Recording]:
    """Every series of every input, in order; ``scopes`` (a scope-intervals Parquet file) is
    attached to each, replacing one found beside it. ``patterns`` (column names or patterns)
    lets a Parquet file be read for those columns only."""
    if not paths:
        raise ValueError("give at least one recording (RUN.parquet, a spool or a directory)")
    series = [s for path in paths for s in read_input(path, patterns)]
    if scopes is not None:
        table = read_scopes(scopes)
        series = [replace(s, scopes=table) for s in series]
    labels = [s.label for s in series]
    if len(set(labels)) < len(labels):  # two files of one name in different folders
        series = [replace(s, label=f"{s.label} ({s.source})") for s in series]
    return series
