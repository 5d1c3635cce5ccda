"""Provenance: the facts a recording needs to be read correctly later, kept with its rows.

:func:`provenance` gathers what a :class:`~stroboscope.sampling.CoreSampler` knows of its run (the
version that recorded it, host, monitored process and its command line, base and per-source
intervals and the interface each source reads, GPUs, rank, the clock anchor and its uncertainty,
rows lost); :func:`for_table` adds what the rows themselves say (first and last time, row count,
the anchor). The result is a plain JSON-able dict, stored in Arrow/Parquet schema metadata under
:data:`PROVENANCE_KEY` and, for CSV, in a ``FILE.meta.json`` sidecar
(:mod:`stroboscope.formats.writers`). A recording recovered from a spool knows less: its dict
lists what is missing under ``"missing"``.

Facts that cannot change during a run (host, GPUs, rank) are gathered once per sampler; the
command line is read again each time (a process may ``exec``) and the last successful read kept,
so it survives the process's exit.
"""

from __future__ import annotations

import os
import socket
import weakref
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

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

if TYPE_CHECKING:
    from stroboscope.sampling._sampler import CoreSampler as Sampler

__all__ = [  # the stored form is _provenance_json's; its names stay importable from here
    "FORMAT",
    "PROVENANCE_KEY",
    "RECOVERED_MISSING",
    "attach",
    "dumps",
    "for_table",
    "from_schema",
    "iso_utc",
    "provenance",
    "read_cmdline",
    "recovered",
]

_static: weakref.WeakKeyDictionary[Sampler, dict[str, Any]] = weakref.WeakKeyDictionary()
_cmdlines: weakref.WeakKeyDictionary[Sampler, list[str]] = weakref.WeakKeyDictionary()


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


def _gpus(sampler: Sampler, source_names: list[str]) -> dict[str, Any] | None:
    """The GPUs the ``gpu`` source reads (None without that source): NVML's driver version and
    each device's name and UUID, with the label of its columns (``gpu.LABEL.*``)."""
    if "gpu" not in source_names:
        return None
    from stroboscope.sampling._gpu import gpu_status

    status = gpu_status()
    labels_in_columns = {
        int(c.name.split(".")[1])
        for c in sampler.columns
        if c.name.startswith("gpu.") and c.name.split(".")[1].isdigit()
    }
    # NVML index -> column label: the driver-sample recorder knows it (``gpus="cuda"`` labels by
    # CUDA ordinal); otherwise a column's label is the NVML index.
    by_index: dict[int, int] = dict(getattr(sampler, "_gpu_labels", {}) or {})
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


def _static_facts(sampler: Sampler) -> dict[str, Any]:
    """What cannot change while a sampler lives: gathered once, then kept."""
    facts = _static.get(sampler)
    if facts is None:
        stats = sampler.stats()
        names = [s.name for s in stats.sources]
        facts = {
            "host": socket.gethostname(),
            "pid": sampler.pid,
            "interval_s": sampler.interval,
            "sources": [
                {
                    "name": s.name,
                    "every": s.every,
                    "interval_s": s.every * sampler.interval,
                    # The kernel interface it reads, where this build's sources say (else None).
                    "interface": getattr(s, "interface", None) or None,
                }
                for s in stats.sources
            ],
            "gpus": _gpus(sampler, names),
            **identity_facts(sampler.pid, getattr(sampler, "identity", None)),
        }
        _static[sampler] = facts
    return facts


def provenance(sampler: Sampler, *, command: list[str] | None = None) -> dict[str, Any]:
    """Everything ``sampler`` knows of its run, as a JSON-able dict (see the module docstring).

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
        (``anchor_uncertainty_ns``), ``ticks_missed``, ``rows_lost`` (overwritten before a drain
        or a segment took them), ``missing`` (names of facts not known). :func:`for_table` adds
        the rows' own facts.
    """
    # The core's own counters (a dict, not the typed stats: this runs for every frame), and
    # what the sampler adds to them (a spool's segment rows lost).
    stats = {**sampler._core.stats(), **sampler._extra_stats()}
    cmdline = command
    if cmdline is None:
        cmdline = read_cmdline(sampler.pid)
        if cmdline is not None:
            _cmdlines[sampler] = cmdline
        else:
            cmdline = _cmdlines.get(sampler)
    lost = (
        stats["rows_lost"] if stats.get("segment_rows_lost") is None else stats["segment_rows_lost"]
    )
    out: dict[str, Any] = {
        "format": FORMAT,
        "stroboscope_version": _version(),
        "recorded_by": "sampler",
        **_static_facts(sampler),
        "cmdline": cmdline,
        "clock": {
            "clock": "CLOCK_MONOTONIC",
            "anchor_ns": None,
            "anchor_uncertainty_ns": int(stats["clock_anchor_uncertainty_ns"]),
        },
        "clock_sync": clock_sync(),  # the realtime clock's own error, for comparing hosts
        "ticks_taken": int(stats["ticks_taken"]),
        "ticks_missed": int(stats["ticks_missed"]),
        "rows_lost": lost,
    }
    out["missing"] = [k for k in ("cmdline",) if out[k] is None]
    return out


def for_table(
    prov: Mapping[str, Any], table: pa.Table, *, rows_lost: int | None = None
) -> dict[str, Any]:
    """``prov`` plus what ``table``'s rows say: ``start_time``/``end_time`` (ISO UTC of the first
    and last row's ``time``), ``start_ns``/``end_ns``, ``rows``, and the clock anchor
    (``time - mono_ns``, exact: the column is made from it). ``rows_lost`` (the rows this
    table misses, such as a frame's) is kept as ``table_rows_lost`` when given."""
    out = dict(prov)
    out["rows"] = table.num_rows
    names = table.column_names
    start = end = None
    if table.num_rows and "time" in names:
        times = table.column("time")
        start, end = _ns(_edge(times, last=False)), _ns(_edge(times, last=True))
        if "mono_ns" in names and start is not None:
            clock = dict(out.get("clock") or {})
            clock["anchor_ns"] = start - _edge(table.column("mono_ns"), last=False).as_py()
            out["clock"] = clock
    if start is not None and end is not None:
        out.update(start_ns=start, end_ns=end, start_time=iso_utc(start), end_time=iso_utc(end))
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
