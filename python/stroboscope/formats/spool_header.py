"""Opening a spool or segment file for reading, and checking a spool's header against its file.

Standard library only (the watchdog child reads spools without the extension). Every check
happens before anything is mapped or read in bulk: the file must be a regular file (a FIFO, a
device or a directory is refused at once, never read), the header's every field must agree with
the layout and the file's size, and every error is a :class:`SpoolError` naming the file and
the field.
"""

from __future__ import annotations

import fcntl
import os
import stat
import struct
from typing import Any

from stroboscope._base import files as _files
from stroboscope._base.files import pread_full
from stroboscope.formats import spool_layout as _layout

MAGIC = _layout.MAGIC
VERSION = _layout.VERSION
VERSIONS_READ = _layout.VERSIONS_READ
BLOCK_ROWS = _layout.BLOCK_ROWS
SCHEMA_OFFSET = _layout.SCHEMA_OFFSET
FIELDS = {name: (offset, code) for name, offset, code in _layout.FIELDS}
_FIELDS_OF = {1: {n: (o, c) for n, o, c in _layout.V1_FIELDS}, 2: FIELDS}
COUNTERS = struct.Struct("<QQ")  # write_begin, head: adjacent in the layout
COUNTERS_OFFSET = FIELDS["write_begin"][0]
assert FIELDS["head"][0] == COUNTERS_OFFSET + 8

MAX_COUNTER = 1 << 62
"""Largest believable row counter (at 1 MHz, 146,000 years of rows)."""
MAX_NS = 1 << 62
"""Largest believable time in ns (a UTC time in 2116, an uptime of 146 years): with it, a
``mono_ns`` plus the anchor always fits in an int64."""
MAX_CAPACITY = 1 << 40
MAX_COLUMNS = 1 << 16
MAX_SCHEMA = 1 << 24
CLOCK_SLACK_NS = 86_400 * 10**9  # the anchor and the creation time are taken apart: a day
DTYPES = ("int64", "float64")
KINDS = ("gauge", "counter", "rate")


def blocks(capacity: int) -> int:
    """Row blocks of a version-2 ring of ``capacity`` rows (at least one)."""
    return max(1, capacity // BLOCK_ROWS)


GROUP_COLUMNS = 8
"""Version 2 keeps a block's columns in groups of 8: their cells, then a line of validity."""


def block_words(columns: int) -> int:
    """8-byte words of one version-2 block: 64 cells per column, a validity line per group."""
    return columns * BLOCK_ROWS + (columns + GROUP_COLUMNS - 1) // GROUP_COLUMNS * 8


class SpoolError(ValueError):
    """A file that is not a readable spool: the message says what is wrong with it."""


class SchemaError(SpoolError):
    """A spool whose header reads but whose schema text does not (its columns can be taken
    from its segments instead: :func:`read_header`'s ``fields``)."""


def open_regular(path: str, what: str, *, follow: bool = True) -> tuple[int, os.stat_result]:
    """An fd open for reading on ``path`` and its stat, when it is a regular file
    (:func:`stroboscope._base.files.open_regular`: ``O_NONBLOCK``, ``fstat``; ``O_NOFOLLOW`` unless
    ``follow``). ``what`` ("spool", "segment") starts every error message (a SpoolError)."""
    return _files.open_regular(path, what, follow=follow, error=SpoolError)


def read_header(
    path: str, fd: int, size: int, fields: list[tuple[str, str, str, str]] | None = None
) -> dict[str, Any]:
    """Every header field of the spool open on ``fd`` (``size`` bytes), checked against the layout
    and the file; SpoolError naming the file and the field otherwise. Reads the fixed header and
    the schema only. ``fields`` (name, unit, dtype, kind per column, as the schema text holds
    them) stand for a schema text that cannot be read (:class:`SchemaError`), when there are
    as many as the header's columns: ``h["schema_error"]`` then says what was wrong."""
    if size == 0:
        raise SpoolError(f"{path} is empty (0 bytes): not a stroboscope spool")
    fixed = pread_full(fd, SCHEMA_OFFSET, 0)
    if fixed[:8] != MAGIC[: min(8, len(fixed))]:
        raise SpoolError(
            f"{path} is not a stroboscope spool (starts with {fixed[:8]!r}, expected {MAGIC!r})"
        )
    if len(fixed) < SCHEMA_OFFSET:
        raise SpoolError(f"{path} is truncated: {size} bytes, shorter than a spool header")

    def field(name: str, fields: dict[str, tuple[int, str]] = FIELDS) -> Any:
        offset, code = fields[name]
        return struct.unpack_from("<8s" if code == "s" else "<" + code, fixed, offset)[0]

    def corrupt(name: str, value: Any, why: str) -> SpoolError:
        return SpoolError(f"{path} has a corrupt header: field {name} = {value} {why}")

    version = field("version")
    if version not in VERSIONS_READ:
        accepted = " and ".join(str(v) for v in VERSIONS_READ)
        raise SpoolError(
            f"{path} is a spool of format version {version}; this stroboscope reads "
            f"versions {accepted}"
        )
    layout = _FIELDS_OF[version]
    h: dict[str, Any] = {name: field(name, layout) for name in layout}
    cap, ncols = h["capacity"], h["columns"]
    header, schema_len = h["header_size"], h["schema_size"]
    if cap < 2 or cap & (cap - 1) or cap > MAX_CAPACITY:
        raise corrupt("capacity", cap, f"(a power of two from 2 to {MAX_CAPACITY} rows)")
    if not 1 <= ncols <= MAX_COLUMNS:
        raise corrupt("columns", ncols, f"(from 1 to {MAX_COLUMNS})")
    if version == 1:
        words = h["words"]
        if words != (cap + 63) // 64:
            raise corrupt("words", words, f"(capacity {cap} needs {(cap + 63) // 64})")
        data_size = 8 * ncols * cap + 8 * (ncols * words + 1)
    else:
        if h["block_rows"] != BLOCK_ROWS:
            raise corrupt("block_rows", h["block_rows"], f"(this layout has {BLOCK_ROWS})")
        data_size = 8 * blocks(cap) * block_words(ncols)
    if schema_len > MAX_SCHEMA:
        raise corrupt("schema_size", schema_len, f"(at most {MAX_SCHEMA} bytes)")
    if header % _layout.PAGE or header < SCHEMA_OFFSET + schema_len:
        raise corrupt(
            "header_size",
            header,
            f"(a multiple of {_layout.PAGE} holding the {schema_len}-byte schema)",
        )
    expected = header + data_size
    if h["total_size"] != expected:
        raise corrupt("total_size", h["total_size"], f"(the layout gives {expected} bytes)")
    if size < expected:
        raise SpoolError(f"{path} is truncated: {size} of {expected} bytes")
    if not 0 < h["interval_ns"] < MAX_NS:
        raise corrupt("interval_ns", h["interval_ns"], "(a sampling interval > 0)")
    created, anchor = h["created_ns"], h["anchor_ns"]
    if not 0 < created < MAX_NS:
        raise corrupt("created_ns", created, "(a UTC time in ns between 1970 and 2116)")
    # anchor = realtime - monotonic: the boot's UTC time, after 1970 and before the creation
    # (monotonic >= 0 when the spool was created); -1 would put every row in 1970.
    if not 0 < anchor <= created + CLOCK_SLACK_NS:
        raise corrupt(
            "anchor_ns", anchor, f"(the creation time {created} minus an uptime, after 1970)"
        )
    begin, head = h["write_begin"], h["head"]
    if head >= MAX_COUNTER:
        raise corrupt("head", head, f"(a row counter below {MAX_COUNTER})")
    if head > begin or begin > head + 1:
        raise SpoolError(
            f"{path} has corrupt counters: fields write_begin {begin} and head {head} (write_begin "
            f"is head or head + 1)"
        )
    try:
        h["fields"] = _read_schema(path, pread_full(fd, schema_len, SCHEMA_OFFSET), ncols)
    except SchemaError as exc:
        if fields is None or len(fields) != ncols:
            raise
        h["fields"], h["schema_error"] = list(fields), str(exc)
    h["uid"] = os.fstat(fd).st_uid
    return h


def _read_schema(path: str, raw: bytes, ncols: int) -> list[tuple[str, str, str, str]]:
    try:
        text = raw.decode()
    except UnicodeDecodeError:
        raise SchemaError(f"{path} has a corrupt schema (not UTF-8)") from None
    lines = [tuple(ln.split("\t")) for ln in text.splitlines()]
    if len(lines) != ncols or any(len(f) != 4 for f in lines):
        raise SchemaError(
            f"{path} has a corrupt schema ({len(lines)} lines for header field columns = {ncols})"
        )
    fields: list[tuple[str, str, str, str]] = [(f[0], f[1], f[2], f[3]) for f in lines]
    if fields[0][0] != "mono_ns" or fields[0][2] != "int64":
        raise SchemaError(f"{path} has a corrupt schema (the first column must be mono_ns, int64)")
    seen: set[str] = set()
    for name, _unit, dtype, kind in fields:
        if not name or name in seen or name == "time":
            raise SchemaError(
                f"{path} has a corrupt schema (column name {name!r} empty or repeated)"
            )
        seen.add(name)
        if dtype not in DTYPES:
            raise SchemaError(
                f"{path} has a corrupt schema (column {name!r} has dtype {dtype!r}; known: "
                f"{', '.join(DTYPES)})"
            )
        if kind not in KINDS:
            raise SchemaError(
                f"{path} has a corrupt schema (column {name!r} has kind {kind!r}; known: "
                f"{', '.join(KINDS)})"
            )
    return fields


def counted_rows(path: str) -> int | None:
    """The rows a spool's header counts (its ``head``) when the header cannot be read whole
    (a damaged schema, size or row): read when the magic, the format version and the
    counters still agree (``write_begin`` is ``head`` or ``head + 1``, below
    :data:`MAX_COUNTER`); None otherwise (how many rows the spool held is then unknown)."""
    try:
        fd, _st = open_regular(path, "spool")
    except SpoolError:
        return None
    try:
        fixed = os.pread(fd, SCHEMA_OFFSET, 0)
    except OSError:
        return None
    finally:
        os.close(fd)
    if len(fixed) < SCHEMA_OFFSET or fixed[:8] != MAGIC:
        return None
    version = struct.unpack_from("<I", fixed, FIELDS["version"][0])[0]
    begin, head = COUNTERS.unpack_from(fixed, COUNTERS_OFFSET)
    if version not in VERSIONS_READ or head >= MAX_COUNTER or begin not in (head, head + 1):
        return None
    return int(head)


def spool_in_use(path: str) -> int | None:
    """The pid in the header of a spool a live recording holds (its ``flock``), else None."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError:
        return None
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            return None
        try:
            fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
        except BlockingIOError:
            head = os.pread(fd, 4, FIELDS["pid"][0])
            return int.from_bytes(head, "little") if len(head) == 4 else 0
        return None
    finally:
        os.close(fd)
