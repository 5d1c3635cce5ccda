"""The provenance as stored: JSON text under one schema metadata key (Arrow, Parquet) and in
CSV sidecars. Below every room, so that the sampling facade, which gathers the provenance, and
the writers, which store it, share one spelling of it without importing each other.

Also the provenance of rows recovered from a spool (:func:`recovered`): what a spool's header
and segments tell of the run, made without the extension (the watchdog child writes it).
"""

from __future__ import annotations

import functools
import json
from collections.abc import Callable, Mapping, Sequence
from datetime import datetime, timezone
from typing import Any

import pyarrow as pa

from stroboscope._base.checks import describe
from stroboscope._base.files import regular_source

PROVENANCE_KEY = "stroboscope.provenance"
"""Schema metadata key (and the sidecar's content): the provenance as JSON."""
FORMAT = 1
"""Version of the provenance dict's layout (``"format"``)."""


def iso_utc(ns: int) -> str:
    """``ns`` since the epoch as ISO 8601 UTC, to the ns (``2026-12-03T10:00:00.000000001Z``)."""
    seconds, frac = divmod(int(ns), 1_000_000_000)
    return f"{_utc_second(seconds)}.{frac:09d}Z"


@functools.lru_cache(maxsize=16)  # every frame's provenance has two; mostly the same seconds
def _utc_second(seconds: int) -> str:
    return datetime.fromtimestamp(seconds, tz=timezone.utc).strftime("%Y-%m-%dT%H:%M:%S")


def span_facts(first: int | None, last: int | None) -> dict[str, Any]:
    """The provenance's span of rows: ``start_ns``/``end_ns`` (the first and last row's
    ``time``, ns since the epoch; None where unknown) and their :func:`iso_utc` text
    (``start_time``/``end_time``)."""
    return {
        "start_ns": first,
        "end_ns": last,
        "start_time": None if first is None else iso_utc(first),
        "end_time": None if last is None else iso_utc(last),
    }


def clock_facts(anchor_ns: int | None, anchor_uncertainty_ns: int | None) -> dict[str, Any]:
    """The provenance's ``clock``: the clock of ``mono_ns`` (CLOCK_MONOTONIC), the anchor
    (``time - mono_ns``, ns) and its uncertainty (ns); None where unknown."""
    return {
        "clock": "CLOCK_MONOTONIC",
        "anchor_ns": anchor_ns,
        "anchor_uncertainty_ns": anchor_uncertainty_ns,
    }


def dumps(prov: Mapping[str, Any], *, indent: int | None = None) -> str:
    """The provenance as JSON text (sorted keys, UTF-8 kept; compact unless ``indent``)."""
    return json.dumps(prov, sort_keys=True, ensure_ascii=False, indent=indent)


def attach(table: pa.Table, prov: Mapping[str, Any]) -> pa.Table:
    """``table`` with ``prov`` in its schema metadata (other keys kept; no data copied)."""
    metadata = dict(table.schema.metadata or {})
    metadata[PROVENANCE_KEY.encode()] = dumps(prov).encode()
    return table.replace_schema_metadata(metadata)


MAX_DEPTH = 64
"""Deepest nesting of objects and lists a stored provenance may have (the package writes 4)."""


def _depth(value: Any) -> int:
    """How deeply ``value`` nests lists and objects (iteratively: no recursion limit)."""
    deepest, stack = 0, [(value, 1)]
    while stack:
        item, level = stack.pop()
        if isinstance(item, dict):
            children = list(item.values())
        elif isinstance(item, list):
            children = item
        else:
            continue
        deepest = max(deepest, level)
        if level <= MAX_DEPTH:  # deeper is refused anyway: no need to look further
            stack.extend((child, level + 1) for child in children)
    return deepest


def loads(raw: str | bytes, what: str) -> dict[str, Any]:
    """The provenance JSON object in ``raw``.

    Raises
    ------
    ValueError
        Naming ``what`` (a file, or a file's schema metadata key) and what is wrong: not UTF-8,
        not JSON, nested deeper than :data:`MAX_DEPTH`, or not a JSON object.
    """
    try:
        value = json.loads(raw)
    except RecursionError:  # the decoder's own limit (~1000 levels)
        raise ValueError(f"{what} is nested deeper than {MAX_DEPTH} levels") from None
    except ValueError as exc:  # JSONDecodeError, UnicodeDecodeError
        raise ValueError(f"{what} is not valid JSON: {exc}") from None
    if _depth(value) > MAX_DEPTH:
        raise ValueError(f"{what} is nested deeper than {MAX_DEPTH} levels")
    if not isinstance(value, dict):
        raise ValueError(f"{what} is not a JSON object")
    return value


def from_schema(schema: pa.Schema) -> dict[str, Any] | None:
    """The provenance a schema's metadata holds, or None (unreadable JSON raises ValueError
    naming the key)."""
    raw = (schema.metadata or {}).get(PROVENANCE_KEY.encode())
    if raw is None:
        return None
    return loads(raw, f"schema metadata {PROVENANCE_KEY}")


def _number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def _strings(value: Any) -> bool:
    return isinstance(value, list) and all(isinstance(v, str) for v in value)


def _source(value: Any) -> bool:
    return (
        isinstance(value, dict)
        and isinstance(value.get("name"), str)
        and _number(value.get("every"))
        and _number(value.get("interval_s"))
        and isinstance(value.get("interface"), (str, type(None)))
    )


def _device(value: Any) -> bool:
    return isinstance(value, dict) and "label" in value and "index" in value


_FIELDS: dict[str, tuple[Callable[[Any], bool], str]] = {
    "clock": (lambda v: isinstance(v, dict), "an object"),
    "clock_sync": (lambda v: isinstance(v, dict), "an object"),
    "gpus": (
        lambda v: (
            isinstance(v, dict)
            and (v.get("devices") is None or isinstance(v["devices"], list))
            and all(_device(d) for d in v.get("devices") or [])
        ),
        "an object whose devices are objects with a label and an index",
    ),
    "sources": (
        lambda v: isinstance(v, list) and all(_source(s) for s in v),
        "a list of objects with a name, every and interval_s",
    ),
    "missing": (_strings, "a list of strings"),
    "cmdline": (_strings, "a list of strings"),
    "interval_s": (_number, "a number of seconds"),
}
"""The provenance fields readers interpret (format, iterate, look into), and the type each must
have; None (not known) is always accepted. Every other field is only shown as it is."""


def unreadable(prov: Mapping[str, Any]) -> dict[str, str]:
    """``key → why`` for each interpreted field of ``prov`` whose value has the wrong type
    (a hand-edited or foreign recording): readers show these as unreadable, never use them."""
    out = {}
    for key, (ok, expected) in _FIELDS.items():
        value = prov.get(key)
        if value is not None and not ok(value):
            out[key] = f"expected {expected}, got {describe(value)}"
    return out


def well_typed(prov: Mapping[str, Any]) -> dict[str, Any]:
    """``prov`` without the fields :func:`unreadable` names (each reader uses this view)."""
    bad = unreadable(prov)
    return {k: v for k, v in prov.items() if k not in bad}


RECOVERED_MISSING = (
    "stroboscope_version",
    "host",
    "cmdline",
    "sources",
    "gpus",
    "identity",
    "rank",
    "world_size",
    "local_rank",
    "clock.anchor_uncertainty_ns",
    "ticks_missed",
)
"""What a spool does not keep: a recording recovered from one (a crash dump, ``stroboscope
recover``) says these are unknown."""


def _version() -> str:
    from stroboscope._base.version import __version__

    return __version__


def time_cell_ns(cell: pa.Scalar) -> int | None:
    """A ``time`` cell as ns since the epoch (no cast of the column: one cell is read)."""
    value = getattr(cell, "value", None)  # TimestampScalar.value: the stored int64
    return None if value is None else int(value)


def _segment_time(path: str, last: bool) -> int | None:
    """The first (or last) ``time`` of a Parquet segment, reading one row group's column."""
    import pyarrow.parquet as pq

    with regular_source(path, "segment") as src:  # a FIFO: refused, not awaited
        f = pq.ParquetFile(src)
        groups = f.metadata.num_row_groups
        if groups == 0:
            return None
        times = f.read_row_group(groups - 1 if last else 0, columns=["time"]).column(0)
    if len(times) == 0:
        return None
    return time_cell_ns(times[-1 if last else 0])


def recovered(
    header: Mapping[str, Any],
    *,
    rows: int,
    rows_lost: int | None,
    segments: Sequence[Any],
    rest: pa.Table,
    segment_time: Callable[[Any, bool], int | None] | None = None,
) -> dict[str, Any]:
    """The provenance of rows recovered from a spool (``header``: its fields, see
    ``formats/spool_layout.py``) and its Parquet ``segments`` (those whose rows are kept, in
    order), followed by ``rest`` (the spool's own rows): the pid, the interval, the clock anchor,
    the spool's creation time, first and last row, rows and rows lost (None: rows were lost
    that nothing counts; ``rows_lost_unknown`` is then true). The rest is listed under
    ``missing``: a spool's header keeps no more. ``segment_time(segment, last)`` reads a
    segment's first or last time (default: a segment file's, by its path)."""
    time_of = _segment_time if segment_time is None else segment_time
    first = time_of(segments[0], False) if segments else None
    last = None
    if rest.num_rows:
        if first is None:
            first = time_cell_ns(rest.column("time")[0])
        last = time_cell_ns(rest.column("time")[-1])
    elif segments:
        last = time_of(segments[-1], True)
    out: dict[str, Any] = {
        "format": FORMAT,
        "recorded_by": "spool recovery",
        "recovered_by_version": _version(),
        "pid": None if header["pid"] is None else int(header["pid"]),  # None: header damaged
        "interval_s": None if header["interval_ns"] is None else int(header["interval_ns"]) / 1e9,
        "clock": clock_facts(int(header["anchor_ns"]), None),
        "spool_created_time": None
        if header["created_ns"] is None
        else iso_utc(int(header["created_ns"])),
        "rows": rows,
        "rows_lost": rows_lost,
        **({"rows_lost_unknown": True} if rows_lost is None else {}),
        **span_facts(first, last),
        "missing": list(RECOVERED_MISSING),
    }
    for key in RECOVERED_MISSING:
        if "." not in key:
            out[key] = None
    return out
