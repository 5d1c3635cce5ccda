"""The columns of a spool whose schema text and its segments disagree.

A spool's schema text is a header field written once: a bit flipped in it renames a column, or
makes the text unreadable, while every segment (a Parquet file, or a piece, with its own schema)
still says what the columns are. :func:`names_from_segments` and :func:`fields_from_segments`
give the columns most of the first segments have (:data:`SCHEMA_VOTES`), so that
:func:`stroboscope.formats.spool_read.recover_parts` reads the segments and the ring with them
instead of leaving every segment out as another recording's.
"""

from __future__ import annotations

import os

import pyarrow as pa

from stroboscope.formats.segments import Segment, segment_schema
from stroboscope.formats.spool_header import SpoolError

__all__ = ["SCHEMA_VOTES", "fields_from_segments", "names_from_segments"]

SCHEMA_VOTES = 5
"""Segments whose columns are compared with the spool's (the most common set wins)."""


def _schemas(segments: list[Segment], uid: int) -> list[pa.Schema]:
    """The schemas of the first few segments whose footer reads (at most
    :data:`SCHEMA_VOTES`)."""
    out: list[pa.Schema] = []
    for seg in segments:
        try:
            out.append(segment_schema(seg, uid))
        except SpoolError:
            continue
        if len(out) >= SCHEMA_VOTES:
            break
    return out


def _common(schemas: list[pa.Schema]) -> pa.Schema | None:
    """The schema most of ``schemas`` have (names and types), None for none."""
    if not schemas:
        return None
    keys = [tuple((f.name, str(f.type)) for f in s) for s in schemas]
    best = max(keys, key=keys.count)  # the first of the most common: the same every run
    return schemas[keys.index(best)]


def names_from_segments(
    segments: list[Segment], uid: int, want: list[tuple[str, pa.DataType]]
) -> list[tuple[str, pa.DataType]] | None:
    """The columns most segments have, when they are the spool's ``want`` but for some names
    (a bit flipped in the spool's schema text); None when they agree with it (or differ in
    more than names: such segments are left out as another recording's)."""
    common = _common(_schemas(segments, uid))
    if common is None:
        return None
    got = [(f.name, f.type) for f in common]
    if got == want or [t for _, t in got] != [t for _, t in want]:
        return None
    return got


def fields_from_segments(
    segments: list[Segment], spool: str
) -> list[tuple[str, str, str, str]] | None:
    """The spool's schema text as its segments' columns give it (name, unit, dtype, kind;
    ``time`` left out), from the schema most of them have; None when none can be read."""
    try:
        uid = os.lstat(spool).st_uid
    except OSError:
        return None
    common = _common(_schemas(segments, uid))
    if common is None or "mono_ns" not in common.names:
        return None
    fields = []
    for f in common:
        if f.name == "time":
            continue
        meta = f.metadata or {}
        dtype = "float64" if pa.types.is_floating(f.type) else "int64"
        kind = meta.get(b"kind", b"gauge").decode(errors="replace")
        fields.append((f.name, meta.get(b"unit", b"").decode(errors="replace"), dtype, kind))
    return fields
