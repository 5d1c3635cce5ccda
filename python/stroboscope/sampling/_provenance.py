"""Provenance: the facts a recording needs to be read correctly later, kept with its rows.

A :class:`~stroboscope.sampling.CoreSampler` gathers what it knows of its run once (:func:`gather`,
when it starts or its first frame is made): the version that recorded it, host, monitored
process and its command line, base and per-source intervals and the interface each source reads,
GPUs, rank, the clock anchor's uncertainty and the realtime clock's own error. That
:class:`RunFacts` object is shared by every frame of the sampler; a frame adds only what is its
own: the sampler's counters when it was made (ticks taken and missed, rows lost) and what its
rows say (first and last time, row count, the anchor; :func:`for_table`; both in
:mod:`stroboscope.sampling._provenance_frame`, importable from here). The result is a plain
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
from typing import Any, Protocol

from stroboscope._base.files import read_regular
from stroboscope.analysis import gpu_labels as _labels_in_columns
from stroboscope.formats.provenance import (
    FORMAT,
    PROVENANCE_KEY,
    RECOVERED_MISSING,
    attach,
    clock_facts,
    dumps,
    from_schema,
    iso_utc,
    recovered,
)
from stroboscope.sampling._clock_sync import clock_sync
from stroboscope.sampling._provenance_frame import RunFacts, budget, for_table
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
    # NVML index -> column label: the driver-sample recorder knows it (``gpus="cuda"`` labels by
    # CUDA ordinal); otherwise a column's label is the NVML index.
    by_index: dict[int, int] = dict(gpu_labels)
    if not by_index:
        by_index = {i: i for i in _labels_in_columns(column_names)}
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
        "clock": clock_facts(None, int(anchor_uncertainty_ns)),  # a frame's rows give the anchor
        "clock_sync": clock_sync(),  # the realtime clock's own error, for comparing hosts
        "budget": budget(max_overhead, [], 0),
    }
    facts["missing"] = [k for k in ("cmdline",) if facts[k] is None]
    return RunFacts(facts)


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
