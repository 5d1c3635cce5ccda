"""The stored form of a recording's Python stacks: two Parquet tables beside the recording.

A recording ``<stem>.parquet`` (or ``.pq``, ``.csv``: the stem as
:func:`stroboscope.formats.writers.beside` gives it) recorded with stacks has

``<stem>.stacks.parquet`` (:data:`SAMPLES_SCHEMA`), one row per thread per sample:
    ``mono_ns`` int64, CLOCK_MONOTONIC ns of the read, the clock of the recording's ``mono_ns``
    column; ``pid`` int32; ``tid`` int32, the Linux thread id; ``stack_id`` int32, the key of the
    stack in the frames table; ``cpu_ns`` int64, the thread's CPU time (ns) since its previous
    sample, null at a thread's first sample; ``thread`` string, the thread's name (null when not
    known).

``<stem>.stack_frames.parquet`` (:data:`FRAMES_SCHEMA`), the interned stacks, one row per frame:
    ``stack_id`` int32; ``depth`` int32, 0 for the outermost frame (the root), increasing toward
    the leaf; ``function`` string, the qualified name; ``file`` string; ``line`` int32, the
    function's first line.

Both are written whole and created 0600 (:func:`stroboscope.formats.writers.write_parquet`), with
the recording's provenance in the schema metadata when one is given, and read back by pyarrow and
DuckDB like any Parquet file. :func:`read_stacks` checks what it reads: a file of another shape,
a stack whose depths are not ``0..n-1``, or a sample naming a stack the frames table lacks is
refused with a message naming the file and the first bad row.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterable, Mapping
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from stroboscope._base.checks import check_path
from stroboscope._base.files import regular_source, replace_private, why_unreachable
from stroboscope.formats.provenance import attach
from stroboscope.formats.writers import STACK_FRAMES_SUFFIX as STACK_FRAMES_SUFFIX
from stroboscope.formats.writers import STACKS_SUFFIX as STACKS_SUFFIX
from stroboscope.formats.writers import stack_frames_path as stack_frames_path
from stroboscope.formats.writers import stacks_path as stacks_path
from stroboscope.formats.writers import write_parquet

# The two files' names sit with the other files a recording is written as (writers.companions);
# they are imported here so that this module is the one to import for stacks.

SAMPLES_SCHEMA = pa.schema(
    [
        pa.field("mono_ns", pa.int64(), nullable=False),
        pa.field("pid", pa.int32(), nullable=False),
        pa.field("tid", pa.int32(), nullable=False),
        pa.field("stack_id", pa.int32(), nullable=False),
        pa.field("cpu_ns", pa.int64()),
        pa.field("thread", pa.string()),
    ]
)
"""One row per thread per sample (see the module's text for each column's meaning and unit)."""
FRAMES_SCHEMA = pa.schema(
    [
        pa.field("stack_id", pa.int32(), nullable=False),
        pa.field("depth", pa.int32(), nullable=False),
        pa.field("function", pa.string(), nullable=False),
        pa.field("file", pa.string(), nullable=False),
        pa.field("line", pa.int32(), nullable=False),
    ]
)
"""One row per frame of each interned stack; depth 0 is the root."""


class NoStacksError(ValueError):
    """The recording has no stacks beside it (it was recorded without ``--stacks``)."""


def _check_recording_path(path: str) -> str:
    """``path``, refused when it names one of the stacks files instead of their recording."""
    for suffix in (STACKS_SUFFIX, STACK_FRAMES_SUFFIX):
        if path.endswith(suffix):
            raise ValueError(
                f"{path} is a stacks file; give the recording it belongs to (the same name "
                f"without {suffix}, ending in .parquet, .pq or .csv)"
            )
    return path


def _conform(table: pa.Table, schema: pa.Schema, what: str) -> pa.Table:
    """``table``'s columns of ``schema`` in its order and types; a ValueError naming ``what``
    when a column is missing, of another kind (an integer column must hold integers, a text
    column text), out of its type's range, or null where the schema allows none."""
    if not isinstance(table, pa.Table):
        raise TypeError(f"{what} must be a pyarrow.Table, got {type(table).__name__}")
    missing = [f.name for f in schema if f.name not in table.column_names]
    if missing:
        raise ValueError(
            f"{what} is not a stacks table of its kind: it has no {', '.join(missing)} column(s) "
            f"(expected {', '.join(schema.names)})"
        )
    columns = []
    for field in schema:
        column = table.column(field.name)
        kind = column.type
        same_kind = (
            pa.types.is_integer(kind)
            if pa.types.is_integer(field.type)
            else pa.types.is_string(kind) or pa.types.is_large_string(kind)
        )
        if not same_kind and not pa.types.is_null(kind):
            raise ValueError(
                f"{what}: column {field.name} must be {field.type}, got {kind} "
                f"(expected {', '.join(f'{f.name} {f.type}' for f in schema)})"
            )
        try:
            column = column.cast(field.type)  # safe cast: an out-of-range integer raises
        except (pa.ArrowInvalid, pa.ArrowNotImplementedError) as exc:
            raise ValueError(
                f"{what}: column {field.name} does not fit {field.type}: {exc}"
            ) from None
        if not field.nullable and column.null_count:
            row = int(pc.index(column.is_null(), True).as_py())
            raise ValueError(
                f"{what}: column {field.name} has no value in row {row} "
                f"({column.null_count} of {len(column)} rows are null; it must have one)"
            )
        columns.append(column)
    return pa.Table.from_arrays(columns, schema=schema)


def _check_frames(frames: pa.Table, what: str) -> pa.Table:
    """``frames`` in :data:`FRAMES_SCHEMA`, each stack's depths ``0..n-1`` once (see
    :func:`check_stacks`)."""
    frames = _conform(frames, FRAMES_SCHEMA, what)
    if frames.num_rows:
        shape = frames.group_by("stack_id").aggregate(
            [
                ("depth", "min"),
                ("depth", "max"),
                ("depth", "count"),
                ("depth", "count_distinct"),
            ]
        )
        n = shape.column("depth_count")
        bad = pc.or_(
            pc.or_(
                pc.not_equal(shape.column("depth_min"), 0),
                pc.not_equal(shape.column("depth_max"), pc.subtract(n, 1)),
            ),
            pc.not_equal(shape.column("depth_count_distinct"), n),
        )
        if pc.any(bad).as_py():
            row = int(pc.index(bad, True).as_py())
            raise ValueError(
                f"{what}: stack {shape.column('stack_id')[row].as_py()} has depths that are "
                f"not 0..n-1 each once ({n[row].as_py()} frames, depths "
                f"{shape.column('depth_min')[row].as_py()} to "
                f"{shape.column('depth_max')[row].as_py()})"
            )
    return frames


def _check_samples(
    samples: pa.Table, known: pa.Array, what: tuple[str, str], first_row: int = 0
) -> pa.Table:
    """``samples`` in :data:`SAMPLES_SCHEMA`, ``cpu_ns`` >= 0 and every ``stack_id`` in
    ``known`` (the frames' stack ids); messages count rows from ``first_row``."""
    samples = _conform(samples, SAMPLES_SCHEMA, what[0])
    negative = pc.fill_null(pc.less(samples.column("cpu_ns"), 0), False)
    if pc.any(negative).as_py():
        row = int(pc.index(negative, True).as_py())
        raise ValueError(
            f"{what[0]}: row {first_row + row} has cpu_ns "
            f"{samples.column('cpu_ns')[row].as_py()}, below zero (a thread's CPU time since "
            "its previous sample is >= 0 ns)"
        )
    unknown = pc.invert(pc.is_in(samples.column("stack_id"), value_set=known))
    if pc.any(unknown).as_py():
        row = int(pc.index(unknown, True).as_py())
        raise ValueError(
            f"{what[0]}: row {first_row + row} names stack_id "
            f"{samples.column('stack_id')[row].as_py()}, which {what[1]} does not define"
        )
    return samples


def check_stacks(
    samples: pa.Table, frames: pa.Table, *, what: tuple[str, str] = ("samples", "frames")
) -> tuple[pa.Table, pa.Table]:
    """The two tables in :data:`SAMPLES_SCHEMA` and :data:`FRAMES_SCHEMA` (columns selected,
    integers cast), checked to be one set of stacks.

    Parameters
    ----------
    samples, frames : pyarrow.Table
        The stack samples and the interned stacks.
    what : (str, str)
        How messages name the two (a file's path when read from one).

    Raises
    ------
    TypeError
        A table that is no ``pyarrow.Table``.
    ValueError
        Naming the table and the first bad row: a missing column, one of another type or out of
        its type's range, a null where none may be, a ``cpu_ns`` below zero, a stack whose
        depths are not ``0, 1, ..., n-1`` each once, or a sample whose ``stack_id`` no frame
        row has.
    """
    frames = _check_frames(frames, what[1])
    samples = _check_samples(samples, pc.unique(frames.column("stack_id")), what)
    return samples, frames


def write_stacks(
    samples: pa.Table,
    frames: pa.Table,
    path: str | os.PathLike[str],
    *,
    provenance: Mapping[str, Any] | None = None,
) -> tuple[str, str]:
    """Write the stacks of the recording ``path`` beside it, each file whole and 0600.

    Parameters
    ----------
    samples, frames : pyarrow.Table
        The stack samples and the interned stacks (columns as :data:`SAMPLES_SCHEMA` and
        :data:`FRAMES_SCHEMA`; other columns are dropped, integers of another width cast),
        checked by :func:`check_stacks` before anything is written.
    path : str or os.PathLike
        The recording (``run.parquet``): the files are :func:`stacks_path` and
        :func:`stack_frames_path` of it.
    provenance : mapping, optional
        The recording's provenance, stored in both files' schema metadata with ``rows`` set to
        each file's rows.

    Returns
    -------
    (str, str)
        The paths of the samples file and of the frames file.
    """
    if not isinstance(samples, pa.Table):
        raise TypeError(f"samples must be a pyarrow.Table, got {type(samples).__name__}")
    return write_stacks_parts([samples], frames, path, rows=samples.num_rows, provenance=provenance)


SAMPLES_PER_ROW_GROUP = 1 << 20
"""Samples per Parquet row group of the samples file (the most held in memory while written)."""
SAMPLES_DICTIONARY = ["pid", "tid", "stack_id", "thread"]
"""The samples file's dictionary-encoded columns (few distinct values each)."""
SAMPLES_ENCODING = {"mono_ns": "DELTA_BINARY_PACKED", "cpu_ns": "BYTE_STREAM_SPLIT"}
"""The samples file's other integer columns: ``mono_ns`` as the differences of neighbours (the
threads of a round share one time, rounds ~1 ms apart), ``cpu_ns`` (near the interval, with
tens of µs of jitter) with its bytes split into streams before zstd: 0.45 and 2.2 bytes a
sample against 0.87 and 2.5 in plain zstd (bench/bench_stacks.py ``--scale``). Integers split
into byte streams need pyarrow 17 to write and read; with an older pyarrow ``cpu_ns`` is plain
(:func:`_samples_encoding`)."""


def _samples_encoding() -> dict[str, str]:
    """:data:`SAMPLES_ENCODING`, less what this pyarrow cannot write."""
    if int(pa.__version__.split(".")[0]) >= 17:
        return SAMPLES_ENCODING
    return {k: v for k, v in SAMPLES_ENCODING.items() if v != "BYTE_STREAM_SPLIT"}


def write_stacks_parts(
    parts: Iterable[pa.Table | pa.RecordBatch],
    frames: pa.Table,
    path: str | os.PathLike[str],
    *,
    rows: int,
    provenance: Mapping[str, Any] | None = None,
) -> tuple[str, str]:
    """:func:`write_stacks` from samples given in parts, one row group in memory at a time
    (a long recording's stacks from its sidecar: memory bounded whatever the length).

    ``rows`` is the number of samples the parts hold (stored in the provenance); each part is
    checked as :func:`check_stacks` checks a whole table, the frames first, and a bad part
    leaves no file (the samples file is published only once whole).
    """
    text = check_path("path", path)
    frames = _check_frames(frames, "frames")
    known = pc.unique(frames.column("stack_id"))
    out = (stacks_path(text), stack_frames_path(text))
    schema = SAMPLES_SCHEMA
    if provenance is not None:
        frames = attach(frames, {**provenance, "rows": frames.num_rows})
        schema = attach(schema.empty_table(), {**provenance, "rows": rows}).schema
    import pyarrow.parquet as pq

    with (
        replace_private(out[0]) as f,
        pq.ParquetWriter(
            f,
            schema,
            compression="zstd",
            use_dictionary=SAMPLES_DICTIONARY,
            column_encoding=_samples_encoding(),
        ) as writer,
    ):
        pending: list[pa.Table] = []
        held = written = 0
        for part in parts:
            table = part if isinstance(part, pa.Table) else pa.Table.from_batches([part])
            checked = _check_samples(table, known, ("samples", "frames"), written + held)
            pending.append(checked)
            held += checked.num_rows
            if held >= SAMPLES_PER_ROW_GROUP:
                writer.write_table(pa.concat_tables(pending).cast(schema))
                written += held
                pending, held = [], 0
        if pending or not written:
            writer.write_table(pa.concat_tables(pending or [schema.empty_table()]).cast(schema))
        # The frames before the samples file is published: samples without them cannot be read.
        write_parquet(frames, out[1])
    return out


def remove_stacks(path: str | os.PathLike[str]) -> list[str]:
    """Remove the stacks files left beside the recording ``path`` (a recording made again
    without stacks must not show another run's); return the paths removed. Links and anything
    not a regular file are left alone."""
    text = check_path("path", path)
    removed = []
    for p in (stacks_path(text), stack_frames_path(text)):
        with contextlib.suppress(FileNotFoundError, IsADirectoryError):
            if os.path.isfile(p) and not os.path.islink(p):
                os.unlink(p)
                removed.append(p)
    return removed


def _read_file(path: str, what: str) -> pa.Table:
    import pyarrow.parquet as pq

    try:
        with regular_source(path, what) as src:
            return pq.ParquetFile(src).read()
    except (pa.ArrowException, OSError) as exc:
        raise ValueError(f"{what} {path} is not a readable Parquet file: {exc}") from None


def stack_threads(samples_file: str | os.PathLike[str]) -> tuple[int, int]:
    """The distinct threads (pid, tid) and processes of the stack samples file
    ``samples_file``, read a row group at a time (memory bounded by the threads, not the
    samples)."""
    import pyarrow.parquet as pq

    threads: set[tuple[int, int]] = set()
    with regular_source(os.fspath(samples_file), "stack samples") as src:
        for batch in pq.ParquetFile(src).iter_batches(columns=["pid", "tid"]):
            pairs = pa.Table.from_batches([batch]).group_by(["pid", "tid"]).aggregate([])
            threads.update(zip(pairs["pid"].to_pylist(), pairs["tid"].to_pylist()))
    return len(threads), len({pid for pid, _ in threads})


def has_stacks(path: str | os.PathLike[str]) -> bool:
    """Whether a stack samples file lies beside the recording ``path`` (not checked further)."""
    return os.path.lexists(stacks_path(_check_recording_path(check_path("path", path))))


def read_stacks(path: str | os.PathLike[str]) -> tuple[pa.Table, pa.Table]:
    """The stacks of the recording ``path``, checked (the recording itself is not read).

    Returns
    -------
    (samples, frames) : (pyarrow.Table, pyarrow.Table)
        In :data:`SAMPLES_SCHEMA` and :data:`FRAMES_SCHEMA`, the samples file's schema metadata
        (the provenance) kept on ``samples``.

    Raises
    ------
    NoStacksError
        (a ValueError) No samples file beside the recording: it was recorded without stacks.
    ValueError
        A file that is missing (the frames), not a regular file, not Parquet, or not stacks
        (:func:`check_stacks`), naming the file; ``path`` naming a stacks file itself.
    """
    text = _check_recording_path(check_path("path", path))
    samples_file, frames_file = stacks_path(text), stack_frames_path(text)
    if not os.path.lexists(samples_file):
        if not os.path.lexists(text):
            raise ValueError(f"{text}: no such file (and no stacks beside it)")
        raise NoStacksError(
            f"{text} has no stacks: {samples_file} does not exist (it was recorded without "
            "--stacks, or moved without its stacks files)"
        )
    if not os.path.exists(frames_file):
        why = why_unreachable(frames_file) or "does not exist"
        raise ValueError(
            f"{text} has stack samples but no frames: {frames_file} {why} "
            f"(both files are needed: {STACKS_SUFFIX} and {STACK_FRAMES_SUFFIX})"
        )
    samples = _read_file(samples_file, "stack samples")
    frames = _read_file(frames_file, "stack frames")
    metadata = samples.schema.metadata
    samples, frames = check_stacks(
        samples, frames, what=(f"stack samples {samples_file}", f"stack frames {frames_file}")
    )
    return samples.replace_schema_metadata(metadata), frames
