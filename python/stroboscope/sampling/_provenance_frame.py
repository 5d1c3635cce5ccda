"""A frame's provenance: the run's facts a sampler gathered once (:class:`RunFacts`, made by
:func:`stroboscope.sampling._provenance.gather`), plus what the frame adds of its own: the
sampler's counters when it was made and what its rows say (:func:`for_table`).

The run's facts are encoded to JSON once (:class:`_Template`); each frame's schema metadata is
that text with the frame's own values filled in, the text :func:`dumps` gives the whole dict.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from json.encoder import encode_basestring as _encode_text
from typing import Any, cast

import pyarrow as pa

from stroboscope.formats.provenance import dumps, span_facts
from stroboscope.formats.provenance import time_cell_ns as _ns

__all__ = ["RunFacts", "budget", "for_table"]


# The keys a frame (or an explicit provenance() call) fills in; every other key is the run's.
_COUNTER_KEYS = ("ticks_taken", "ticks_missed", "rows_lost")
_SPAN_KEYS = tuple(span_facts(None, None))  # start_ns, end_ns, start_time, end_time
_ROW_KEYS = ("rows", *_SPAN_KEYS, "table_rows_lost")


class RunFacts:
    """What a sampler knows of its run, gathered once (:func:`~._provenance.gather`) and shared
    by its frames.

    Never changed once made: a sampler that learns a newer command line makes a new one, and the
    frames made before keep theirs. :meth:`provenance` and :meth:`for_rows` give the dict of
    :func:`~._provenance.provenance` and :func:`for_table`; :meth:`encoded` gives the JSON text
    of the latter (the schema metadata a frame's table carries) from the run's facts encoded
    once.
    """

    __slots__ = ("_clock", "_facts", "_frame")

    def __init__(self, facts: Mapping[str, Any]) -> None:
        self._facts = dict(facts)
        own = set(_COUNTER_KEYS) | set(_ROW_KEYS) | {"clock"}
        self._frame = _Template(self._facts, own)  # a frame's provenance, but for its own keys
        self._clock = _Template(self._facts["clock"], {"anchor_ns"})

    @property
    def facts(self) -> dict[str, Any]:
        """A copy of the run's facts (without a frame's counters and rows)."""
        return dict(self._facts)

    def with_command(self, command: list[str]) -> RunFacts:
        """These facts with ``command`` as the command line."""
        facts = dict(self._facts)
        facts["cmdline"] = command
        facts["missing"] = []
        return RunFacts(facts)

    def with_budget(
        self, max_overhead: float, changes: list[dict[str, Any]], total: int
    ) -> RunFacts:
        """These facts with the overhead budget's rate changes (the latest ``changes`` of
        ``total`` made so far)."""
        facts = dict(self._facts)
        facts["budget"] = budget(max_overhead, changes, total)
        return RunFacts(facts)

    def provenance(self, counted: Sequence[int]) -> dict[str, Any]:
        """The run's facts and the counters (:func:`~._provenance.counters`) as
        :func:`~._provenance.provenance` gives them."""
        out = dict(self._facts)
        out["clock"] = dict(out["clock"])
        out.update(zip(_COUNTER_KEYS, counted))
        return out

    def for_rows(
        self, counted: Sequence[int], table: pa.Table, rows_lost: int | None = None
    ) -> dict[str, Any]:
        """``for_table(self.provenance(counted), table, rows_lost=rows_lost)``."""
        return for_table(self.provenance(counted), table, rows_lost=rows_lost)

    def encoded(
        self,
        counted: Sequence[int],
        table: pa.Table,
        rows_lost: int,
        edges: tuple[int | None, int | None, int | None] | None = None,
    ) -> str:
        """``dumps(self.for_rows(counted, table, rows_lost))``, encoding only what the frame
        adds (the run's facts were encoded once). ``edges``: the table's first and last
        ``time`` and first ``mono_ns`` when the caller has them (a core frame's ``edges``),
        else they are read from the table."""
        own = _row_facts(table) if edges is None else _edge_facts(table.num_rows, *edges)
        own.update(zip(_COUNTER_KEYS, counted))
        own["table_rows_lost"] = rows_lost
        own["clock"] = _Encoded(self._clock.fill(own))  # the run's clock, the frame's anchor
        return self._frame.fill(own)


def _dumps_value(value: object) -> str:
    """Any JSON value as :func:`dumps` writes it (typed there for the dict it is made for)."""
    return dumps(cast(Mapping[str, Any], value))


class _Encoded(str):
    """JSON text already encoded (placed by :class:`_Template` as it is)."""

    __slots__ = ()


class _Template:
    """The JSON text ``dumps`` gives a dict (keys sorted, ", " and ": " between them), with the
    values of the ``own`` keys left open and the others encoded once: :meth:`fill` puts in the
    values of the open keys (ints, None, text, or :class:`_Encoded`), in one join."""

    __slots__ = ("_chunks", "_keys")

    def __init__(self, values: Mapping[str, Any], own: set[str]) -> None:
        chunks: list[str] = []
        keys: list[str] = []
        text = "{"
        for i, key in enumerate(sorted(set(values) | own)):
            text += ("" if i == 0 else ", ") + _dumps_value(key) + ": "
            if key in own:
                chunks.append(text)
                keys.append(key)
                text = ""
            else:
                text += _dumps_value(values[key])
        self._chunks = [*chunks, text + "}"]
        self._keys = keys

    def fill(self, values: Mapping[str, Any]) -> str:
        """The text, with ``values[key]`` for each open key."""
        parts: list[str] = []
        for chunk, key in zip(self._chunks, self._keys):
            parts.append(chunk)
            value = values[key]
            if value is None:
                parts.append("null")
            elif type(value) is int:
                parts.append(str(value))
            elif type(value) is str:
                parts.append(_encode_text(value))  # what dumps does with ensure_ascii=False
            elif isinstance(value, _Encoded):
                parts.append(value)
            else:
                parts.append(_dumps_value(value))
        parts.append(self._chunks[-1])
        return "".join(parts)


def budget(max_overhead: float, changes: list[dict[str, Any]], total: int) -> dict[str, Any]:
    """The provenance's ``budget``: the sampler's overhead budget (a share of one core, None
    when off) and its rate changes (:class:`stroboscope.sampling._stats.RateChange` as dicts,
    the latest 256 of ``rate_changes_total``)."""
    return {
        "max_overhead": max_overhead or None,
        "rate_changes_total": total,
        "rate_changes": changes,
    }


def _row_facts(table: pa.Table) -> dict[str, Any]:
    """What ``table``'s rows say (see :func:`_edge_facts`)."""
    schema = table.schema  # field lookups by index: ``column_names`` builds every name
    time_at, mono_at = schema.get_field_index("time"), schema.get_field_index("mono_ns")
    start = end = mono = None
    if table.num_rows and time_at >= 0:
        times = table.column(time_at)
        start, end = _ns(_edge(times, last=False)), _ns(_edge(times, last=True))
        if mono_at >= 0:
            mono = _edge(table.column(mono_at), last=False).as_py()
    return _edge_facts(table.num_rows, start, end, mono)


def _edge_facts(rows: int, start: int | None, end: int | None, mono: int | None) -> dict[str, Any]:
    """What rows say of themselves, from their first and last ``time`` and first ``mono_ns``
    (ns; None where unknown): ``rows``, ``start_ns``/``end_ns`` and their ISO text (all None
    unless both are known) and ``anchor_ns`` (``time - mono_ns`` of the first row, or None)."""
    out: dict[str, Any] = {"rows": rows}
    out["anchor_ns"] = None if start is None or mono is None else start - mono
    known = start is not None and end is not None
    out.update(span_facts(start, end) if known else span_facts(None, None))
    return out


def for_table(
    prov: Mapping[str, Any], table: pa.Table, *, rows_lost: int | None = None
) -> dict[str, Any]:
    """``prov`` plus what ``table``'s rows say: ``start_time``/``end_time`` (ISO UTC of the first
    and last row's ``time``), ``start_ns``/``end_ns``, ``rows``, and the clock anchor
    (``time - mono_ns``, exact: the column is made from it). ``rows_lost`` (the rows this
    table misses, such as a frame's) is kept as ``table_rows_lost`` when given."""
    out = dict(prov)
    facts = _row_facts(table)
    out["rows"] = facts["rows"]
    if facts["anchor_ns"] is not None:
        clock = dict(out.get("clock") or {})
        clock["anchor_ns"] = facts["anchor_ns"]
        out["clock"] = clock
    if facts["start_ns"] is not None:
        out.update({k: facts[k] for k in _SPAN_KEYS})
    elif "start_ns" not in out:
        out.update(dict.fromkeys(_SPAN_KEYS))
    if rows_lost is not None:
        out["table_rows_lost"] = int(rows_lost)
    return out


def _edge(column: pa.ChunkedArray, *, last: bool) -> pa.Scalar:
    """The first (or last) cell of a non-empty column, read from its chunk (indexing the
    chunked array is slower; chunks may be empty)."""
    chunks = [c for c in column.chunks if len(c)]
    return chunks[-1][-1] if last else chunks[0][0]
