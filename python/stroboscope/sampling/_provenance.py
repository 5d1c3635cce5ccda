"""Provenance: the facts a recording needs to be read correctly later, kept with its rows.

A :class:`~stroboscope.sampling.CoreSampler` gathers what it knows of its run once (:func:`gather`,
when it starts or its first frame is made): the version that recorded it, host, monitored
process and its command line, base and per-source intervals and the interface each source reads,
GPUs, rank, the clock anchor's uncertainty and the realtime clock's own error. That
:class:`RunFacts` object is shared by every frame of the sampler; a frame adds only what is its
own: the sampler's counters when it was made (ticks taken and missed, rows lost) and what its
rows say (first and last time, row count, the anchor; :func:`for_table`). The result is a plain
JSON-able dict, stored in Arrow/Parquet schema metadata under :data:`PROVENANCE_KEY` and, for
CSV, in a ``FILE.meta.json`` sidecar (:mod:`stroboscope.formats.writers`). A recording recovered
from a spool knows less: its dict lists what is missing under ``"missing"``.

The command line is read when the facts are gathered and again by each explicit
``Sampler.provenance()`` call (a process may ``exec``); the last successful read is kept, so it
survives the process's exit.
"""

from __future__ import annotations

import os
import socket
from collections.abc import Iterable, Mapping, Sequence
from json.encoder import encode_basestring as _encode_text
from typing import Any, Protocol, cast

import pyarrow as pa

from stroboscope._base.files import read_regular
from stroboscope.formats.provenance import (
    FORMAT,
    PROVENANCE_KEY,
    RECOVERED_MISSING,
    attach,
    dumps,
    from_schema,
    iso_utc,
    recovered,
)
from stroboscope.formats.provenance import time_cell_ns as _ns
from stroboscope.sampling._clock_sync import clock_sync
from stroboscope.sampling._provenance_identity import identity_facts
from stroboscope.sampling._stats import SourceStats

__all__ = [  # the stored form is formats.provenance's; its names stay importable from here
    "FORMAT",
    "PROVENANCE_KEY",
    "RECOVERED_MISSING",
    "RunFacts",
    "attach",
    "counters",
    "dumps",
    "for_table",
    "from_schema",
    "gather",
    "iso_utc",
    "provenance",
    "read_cmdline",
    "recovered",
]


def _version() -> str:
    from stroboscope._base.version import __version__

    return __version__


def read_cmdline(pid: int, proc_root: str = "/proc") -> list[str] | None:
    """The command line of ``pid`` (``/proc/PID/cmdline``), or None when it cannot be read (the
    process is gone, or a kernel thread with an empty one)."""
    try:  # under a proc_root the user gave: a FIFO there is refused, never waited on
        raw = read_regular(os.path.join(proc_root, str(pid), "cmdline"), "cmdline")
    except ValueError:
        return None
    parts = raw.split(b"\0")
    if parts and parts[-1] == b"":
        parts.pop()
    return [p.decode("utf-8", "backslashreplace") for p in parts] or None


def _gpus(
    source_names: Iterable[str], column_names: Iterable[str], gpu_labels: Mapping[int, int]
) -> dict[str, Any] | None:
    """The GPUs the ``gpu`` source reads (None without that source): NVML's driver version and
    each device's name and UUID, with the label of its columns (``gpu.LABEL.*``)."""
    if "gpu" not in source_names:
        return None
    from stroboscope.sampling._gpu import gpu_status

    status = gpu_status()
    labels_in_columns = {
        int(name.split(".")[1])
        for name in column_names
        if name.startswith("gpu.") and name.split(".")[1].isdigit()
    }
    # NVML index -> column label: the driver-sample recorder knows it (``gpus="cuda"`` labels by
    # CUDA ordinal); otherwise a column's label is the NVML index.
    by_index: dict[int, int] = dict(gpu_labels)
    if not by_index:
        by_index = {i: i for i in labels_in_columns}
    devices = [
        {
            "label": by_index[int(d["index"])],
            "index": int(d["index"]),
            "name": d.get("name"),
            "uuid": d.get("uuid"),
        }
        for d in status.get("devices", [])
        if int(d["index"]) in by_index
    ]
    return {
        "driver_version": status.get("driver_version") or None,
        "nvml_version": status.get("nvml_version") or None,
        "devices": devices,
        "reason": None if status.get("loaded") else status.get("reason"),
    }


# The keys a frame (or an explicit provenance() call) fills in; every other key is the run's.
_COUNTER_KEYS = ("ticks_taken", "ticks_missed", "rows_lost")
_ROW_KEYS = ("rows", "start_ns", "end_ns", "start_time", "end_time", "table_rows_lost")


class RunFacts:
    """What a sampler knows of its run, gathered once (:func:`gather`) and shared by its frames.

    Never changed once made: a sampler that learns a newer command line makes a new one, and the
    frames made before keep theirs. :meth:`provenance` and :meth:`for_rows` give the dict of
    :func:`provenance` and :func:`for_table`; :meth:`encoded` gives the JSON text of the latter
    (the schema metadata a frame's table carries) from the run's facts encoded once.
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
        facts["budget"] = _budget(max_overhead, changes, total)
        return RunFacts(facts)

    def provenance(self, counted: Sequence[int]) -> dict[str, Any]:
        """The run's facts and the counters (:func:`counters`) as :func:`provenance` gives them."""
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


def counters(core: Sequence[int], extra: Mapping[str, Any]) -> tuple[int, int, int]:
    """``(ticks_taken, ticks_missed, rows_lost)``: the core's (``_core.Sampler.counters()``), with
    a spooled sampler's ``segment_rows_lost`` from what it adds to its stats (``extra``), where
    it has one, as its rows lost."""
    taken, missed, lost = core
    segment_lost = extra.get("segment_rows_lost")
    return int(taken), int(missed), int(lost if segment_lost is None else segment_lost)


def gather(
    *,
    pid: int,
    interval_s: float,
    sources: Sequence[SourceStats],
    interfaces: Mapping[str, str | None],
    column_names: Sequence[str],
    gpu_labels: Mapping[int, int],
    identity: object,
    anchor_uncertainty_ns: int,
    command: list[str] | None,
    max_overhead: float = 0.0,
) -> RunFacts:
    """Everything a sampler knows of its run that is not a frame's own (see :func:`provenance`).

    ``sources``: each source's name and read period in ticks; ``interfaces``: the kernel
    interface each reads (None where this build's source does not say); ``gpu_labels``: NVML
    index -> column label; ``identity``: the one the sampler was given (else the monitored
    process's environment decides); ``command``: its command line (None: unknown);
    ``max_overhead``: its overhead budget (0.0: none), whose rate changes are added as the sampler
    sees them (:meth:`RunFacts.with_budget`).
    """
    facts: dict[str, Any] = {
        "format": FORMAT,
        "stroboscope_version": _version(),
        "recorded_by": "sampler",
        "host": socket.gethostname(),
        "pid": pid,
        "interval_s": interval_s,
        "sources": [
            {
                "name": s.name,
                "every": s.every,
                "interval_s": s.every * interval_s,
                "interface": interfaces.get(s.name) or None,
            }
            for s in sources
        ],
        "gpus": _gpus([s.name for s in sources], column_names, gpu_labels),
        **identity_facts(pid, identity),
        "cmdline": command,
        "clock": {
            "clock": "CLOCK_MONOTONIC",
            "anchor_ns": None,
            "anchor_uncertainty_ns": int(anchor_uncertainty_ns),
        },
        "clock_sync": clock_sync(),  # the realtime clock's own error, for comparing hosts
        "budget": _budget(max_overhead, [], 0),
    }
    facts["missing"] = [k for k in ("cmdline",) if facts[k] is None]
    return RunFacts(facts)


def _budget(max_overhead: float, changes: list[dict[str, Any]], total: int) -> dict[str, Any]:
    """The provenance's ``budget``: the sampler's overhead budget (a share of one core, None
    when off) and its rate changes (:class:`stroboscope.sampling._stats.RateChange` as dicts,
    the latest 256 of ``rate_changes_total``)."""
    return {
        "max_overhead": max_overhead or None,
        "rate_changes_total": total,
        "rate_changes": changes,
    }


class _HasProvenance(Protocol):
    def provenance(self, *, command: list[str] | None = None) -> dict[str, Any]: ...


def provenance(sampler: _HasProvenance, *, command: list[str] | None = None) -> dict[str, Any]:
    """Everything ``sampler`` knows of its run, as a JSON-able dict (``sampler.provenance()``).

    Parameters
    ----------
    sampler : Sampler
        The sampler (running, stopped or closed).
    command : list of str, optional
        The monitored command line when the caller knows it better than ``/proc`` (``record --
        CMD``: the command, not the gate it waits in). Default: ``/proc/PID/cmdline``, the last
        successful read kept once the process has exited.

    Returns
    -------
    dict
        ``format``, ``stroboscope_version``, ``recorded_by`` ("sampler"), ``host``, ``pid``,
        ``cmdline``, ``interval_s``, ``sources`` (name, every, interval_s, interface), ``gpus``,
        ``identity`` (:meth:`~stroboscope._base.identity.Identity.to_dict`; ``identity_error`` when
        the rank variables conflict), ``rank``/``world_size``/``local_rank``, ``clock``
        (``anchor_uncertainty_ns``), ``clock_sync``, ``ticks_taken``, ``ticks_missed``,
        ``rows_lost`` (overwritten before a drain or a segment took them), ``missing`` (names of
        facts not known). :func:`for_table` adds the rows' own facts.
    """
    return sampler.provenance(command=command)


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
    if start is not None and end is not None:
        out.update(start_ns=start, end_ns=end, start_time=iso_utc(start), end_time=iso_utc(end))
    else:
        out.update(start_ns=None, end_ns=None, start_time=None, end_time=None)
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
        out.update({k: facts[k] for k in ("start_ns", "end_ns", "start_time", "end_time")})
    elif "start_ns" not in out:
        out.update(start_ns=None, end_ns=None, start_time=None, end_time=None)
    if rows_lost is not None:
        out["table_rows_lost"] = int(rows_lost)
    return out


def _edge(column: pa.ChunkedArray, *, last: bool) -> pa.Scalar:
    """The first (or last) cell of a non-empty column, read from its chunk (indexing the
    chunked array is slower; chunks may be empty)."""
    chunks = [c for c in column.chunks if len(c)]
    return chunks[-1][-1] if last else chunks[0][0]
