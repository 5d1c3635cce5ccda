"""Output formats: the one home of how tables become Parquet and CSV files.

Every file is created with mode 0600 and written whole: Parquet and CSV go to the path given,
the format chosen by its suffix (:func:`output_format`, the one rule for it). Each is written
to a temporary file with an unpredictable name in the same directory and renamed over the path
only once complete (:func:`stroboscope._base.files.replace_private`): a bad argument or a full disk
leaves an existing file at the path as it was, and a symlink there is replaced, never followed.

Provenance (:mod:`stroboscope.formats.provenance`) travels in the table's schema metadata
(``stroboscope.provenance``, JSON): Parquet keeps it in the file's schema; CSV, which has no
place for it, gets a sidecar ``FILE.meta.json`` holding the same JSON (0600, written whole the
same way, after the CSV). A CSV written without provenance removes a sidecar left at its name by
an earlier file, which would describe another run.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterable
from typing import BinaryIO

import pyarrow as pa

from stroboscope._base.checks import check_path, describe
from stroboscope._base.files import replace_private
from stroboscope.formats.provenance import PROVENANCE_KEY, dumps, from_schema

FORMATS = ("parquet", "csv")
SIDECAR_SUFFIX = ".meta.json"
"""The provenance sidecar of a CSV file is ``FILE`` + this."""
SCOPES_SUFFIX = ".scopes.parquet"
"""A recording's scope intervals beside it: ``<stem>`` + this (``run.parquet`` ->
``run.scopes.parquet``)."""
STACKS_SUFFIX = ".stacks.parquet"
"""A recording's stack samples beside it (:mod:`stroboscope.formats.stacks`): ``<stem>`` + this
(``run.parquet`` -> ``run.stacks.parquet``)."""
STACK_FRAMES_SUFFIX = ".stack_frames.parquet"
"""A recording's interned stacks beside it: ``<stem>`` + this."""
_SUFFIXES = {".parquet": "parquet", ".pq": "parquet", ".csv": "csv"}


def output_format(path: str | os.PathLike[str], *, default: str | None = None) -> str:
    """``"parquet"`` for ``.parquet``/``.pq``, ``"csv"`` for ``.csv`` (any case).

    Another suffix gives ``default`` when one is given (the drop-in receiver writes CSV to any
    other name, as the monitor it replaces did), else a ValueError naming the path.
    """
    lower = os.fspath(path).lower()
    for suffix, fmt in _SUFFIXES.items():
        if lower.endswith(suffix):
            return fmt
    if default is not None:
        if default not in FORMATS:
            raise ValueError(f"default must be one of {FORMATS}, got {default!r}")
        return default
    raise ValueError(f"output path {os.fspath(path)!r} must end in .parquet, .pq or .csv")


CODECS = ("none", "snappy", "gzip", "brotli", "lz4", "zstd")
"""The Parquet codecs a writer takes (those this pyarrow was built with)."""


def check_codec(compression: object) -> str:
    """A Parquet codec of :data:`CODECS` this pyarrow can write (any case), lower-cased;
    TypeError or ValueError naming the argument, the value and the codecs otherwise."""
    accepted = f"compression must be a Parquet codec {CODECS} that this pyarrow has, got "
    if not isinstance(compression, str):
        raise TypeError(accepted + describe(compression))
    name = compression.lower()
    if name not in CODECS or (name != "none" and not pa.Codec.is_available(name)):
        raise ValueError(accepted + describe(compression))
    return name


def write_parquet(
    table: pa.Table, path: str | os.PathLike[str], *, compression: str = "zstd"
) -> None:
    """Write an Arrow table as Parquet (units kept as field metadata) to a file created 0600.

    ``compression`` is a codec of :data:`CODECS` (:func:`check_codec`); any other value
    raises before ``path`` is touched.
    """
    import pyarrow.parquet as pq

    compression = check_codec(compression)
    path = check_path("path", path)
    with replace_private(path) as f:
        pq.write_table(table, f, compression=compression)


def sidecar_path(path: str | os.PathLike[str]) -> str:
    """The provenance sidecar of the CSV file ``path``: ``path + ".meta.json"``."""
    return os.fspath(path) + SIDECAR_SUFFIX


def beside(path: str | os.PathLike[str], suffix: str) -> str:
    """The name of a file kept beside the recording ``path``: its name without its format's
    suffix (``.parquet``, ``.pq``, ``.csv``, any case) + ``suffix``; a name with another suffix
    keeps it (``run.data`` -> ``run.data`` + ``suffix``)."""
    text = os.fspath(path)
    lower = text.lower()
    for known in _SUFFIXES:
        if lower.endswith(known) and len(text) > len(known):
            return text[: -len(known)] + suffix
    return text + suffix


def scopes_path(path: str | os.PathLike[str]) -> str:
    """Where the scope intervals of the recording ``path`` go: :func:`beside` it,
    :data:`SCOPES_SUFFIX` (``run.parquet`` -> ``run.scopes.parquet``)."""
    return beside(path, SCOPES_SUFFIX)


def stacks_path(path: str | os.PathLike[str]) -> str:
    """Where the stack samples of the recording ``path`` go: :func:`beside` it,
    :data:`STACKS_SUFFIX`."""
    return beside(path, STACKS_SUFFIX)


def stack_frames_path(path: str | os.PathLike[str]) -> str:
    """Where the interned stacks of the recording ``path`` go: :func:`beside` it,
    :data:`STACK_FRAMES_SUFFIX`."""
    return beside(path, STACK_FRAMES_SUFFIX)


def companions(path: str | os.PathLike[str]) -> dict[str, str]:
    """The files a recording ``path`` is written as, keyed by what each is of it: the recording
    itself (key ``""``), its scope intervals (:func:`scopes_path`), its stack samples and
    interned stacks (:func:`stacks_path`, :func:`stack_frames_path`) and, for a CSV file, its
    provenance sidecar (:func:`sidecar_path`)."""
    text = os.fspath(path)
    files = {
        "": text,
        "the scope intervals of": scopes_path(text),
        "the stack samples of": stacks_path(text),
        "the interned stacks of": stack_frames_path(text),
    }
    if output_format(text, default="parquet") == "csv":
        files["the provenance sidecar of"] = sidecar_path(text)
    return files


COMPANION_SUFFIXES = (SCOPES_SUFFIX, STACKS_SUFFIX, STACK_FRAMES_SUFFIX, SIDECAR_SUFFIX)
"""How the names of the files :func:`companions` keeps beside a recording end."""


def is_companion(path: str | os.PathLike[str]) -> bool:
    """Whether ``path`` names a file kept beside a recording (its scope intervals, stack
    samples, interned stacks or provenance sidecar: :func:`companions`), not a recording: what
    every reader that lists the recordings of a folder leaves out."""
    return os.fspath(path).endswith(COMPANION_SUFFIXES)


def write_sidecar(schema: pa.Schema, path: str | os.PathLike[str]) -> str | None:
    """Write the provenance in ``schema``'s metadata beside the CSV file ``path`` (whole, 0600)
    and return the sidecar's path; without provenance, remove a stale sidecar and return None."""
    side = sidecar_path(path)
    raw = (schema.metadata or {}).get(PROVENANCE_KEY.encode())
    if raw is None:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(side)
        return None
    text = dumps(from_schema(schema) or {}, indent=1)  # the same JSON, for people to read
    with replace_private(side) as f:
        f.write(text.encode() + b"\n")
    return side


def write_csv(table: pa.Table, path: str | os.PathLike[str]) -> None:
    """Write an Arrow table as CSV (ISO-8601 UTC times, nulls as empty cells), created 0600,
    and its provenance, if the table has one, to the sidecar ``FILE.meta.json``."""
    import pyarrow.csv as pacsv

    path = check_path("path", path)
    with replace_private(path) as f:
        pacsv.write_csv(table, f)
    write_sidecar(table.schema, path)


def write_table(
    table: pa.Table, path: str | os.PathLike[str], *, default: str | None = None
) -> str:
    """Write ``table`` as Parquet or CSV, chosen by :func:`output_format`; return the format."""
    fmt = output_format(path, default=default)
    if fmt == "parquet":
        write_parquet(table, path)
    else:
        write_csv(table, path)
    return fmt


def write_parts(
    schema: pa.Schema,
    parts: Iterable[pa.Table],
    path: str | os.PathLike[str],
    *,
    default: str | None = None,
) -> str:
    """Write tables of one ``schema`` one after another as a single Parquet or CSV file (the
    format by :func:`output_format`), holding one part in memory at a time; return the format.

    Written whole like :func:`write_table`: when a part raises, the file at ``path`` is left as
    it was.
    """
    path = check_path("path", path)
    fmt = output_format(path, default=default)
    with replace_private(path) as f:
        write_stream(schema, parts, f, fmt)
    if fmt == "csv":
        write_sidecar(schema, path)
    return fmt


def write_stream(schema: pa.Schema, parts: Iterable[pa.Table], f: BinaryIO, fmt: str) -> None:
    """Write tables of one ``schema`` one after another to the open binary file ``f`` as one
    Parquet (zstd) or CSV file (``fmt``, one of :data:`FORMATS`), one part in memory at a time.

    The file's content only: the caller creates and publishes the file, and gives a CSV its
    provenance sidecar (:func:`write_sidecar`) once it has its name (:func:`write_parts` does
    all three).
    """
    if fmt not in FORMATS:
        raise ValueError(f"fmt must be one of {FORMATS}, got {fmt!r}")
    if fmt == "parquet":
        import pyarrow.parquet as pq

        with pq.ParquetWriter(f, schema, compression="zstd") as writer:
            for part in parts:
                writer.write_table(part)
    else:
        import pyarrow.csv as pacsv

        with pacsv.CSVWriter(f, schema) as writer:
            for part in parts:
                writer.write_table(part)
