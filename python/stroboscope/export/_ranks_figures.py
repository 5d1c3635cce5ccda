"""Per-rank resource figures and per-host clocks, for the cross-rank report.

Figures (each over all of the rank's rows; a rate or level's nulls skipped):

- GPU utilisation (mean over rows, then over the rank's GPUs), power (mean over rows, summed
  over its GPUs) and memory used (peak over rows, summed over its GPUs): ``gpu.N.util_pct``,
  ``gpu.N.power_w``, ``gpu.N.mem_used_bytes``;
- process CPU (mean) and RSS (peak): ``proc.cpu_pct``, ``proc.rss_bytes``, the rank's own only;
- host CPU (mean): ``cpu.util_pct``, the rank's own, else its node's.

A rank's GPUs: those whose UUIDs its provenance lists as owned (``owned_gpus``: its
``CUDA_VISIBLE_DEVICES`` and local rank resolved through NVML), from its own columns or else from
the lowest rank on its host that recorded them. Without that list (older parts), or when no rank
of its node recorded those GPUs (a MIG instance, whose columns are its parent's): those of its own
columns (the one numbered by its local rank when it has several, as local rank 0 records every
GPU of its node); a rank without GPU columns gets its node's GPU numbered by its local rank,
from the lowest rank on its host that recorded that GPU (the stroboscope.cluster default:
host-wide and GPU sources on local rank 0 only). Otherwise none.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

import pyarrow.compute as pc

from stroboscope.export._ranks import Key, Rank

GPU_RE = re.compile(r"^gpu\.(\d+)\.(util_pct|power_w|mem_used_bytes)$")


@dataclass(frozen=True)
class FigureSpec:
    """One figure: ``key`` (JSON), ``title``, ``unit``, the ``column`` (``{g}`` for a GPU's
    label), how a column is reduced over rows (``over``: mean or max) and over GPUs
    (``combine``: mean or sum), and whether a rank may take its node's (``node``)."""

    key: str
    title: str
    unit: str
    column: str
    over: str
    combine: str = "mean"
    node: bool = False

    @property
    def gpu(self) -> bool:
        """Whether the column is a GPU's."""
        return "{g}" in self.column


METRICS = (
    FigureSpec("gpu_util_pct", "GPU util % (mean)", "%", "gpu.{g}.util_pct", "mean", "mean"),
    FigureSpec("gpu_power_w", "GPU power W (mean)", "W", "gpu.{g}.power_w", "mean", "sum"),
    FigureSpec(
        "gpu_mem_peak_bytes", "GPU mem (peak)", "bytes", "gpu.{g}.mem_used_bytes", "max", "sum"
    ),
    FigureSpec("proc_cpu_pct", "proc CPU % (mean)", "%", "proc.cpu_pct", "mean"),
    FigureSpec("proc_rss_peak_bytes", "proc RSS (peak)", "bytes", "proc.rss_bytes", "max"),
    FigureSpec("host_cpu_pct", "host CPU % (mean)", "%", "cpu.util_pct", "mean", node=True),
)


def wanted(name: str) -> bool:
    """Whether the report reads column ``name``."""
    return bool(GPU_RE.match(name)) or any(m.column == name for m in METRICS if not m.gpu)


@dataclass(frozen=True)
class Figure:
    """A rank's value of a metric and where it came from (``"own"``, ``"node: rank R"``);
    ``value`` None: no rank of its node recorded it."""

    value: float | None
    source: str

    def to_dict(self) -> dict[str, Any]:
        """JSON-able."""
        return {"value": self.value, "source": self.source}


@dataclass(frozen=True)
class GpuChoice:
    """The GPUs whose columns count for a rank: their ``labels``, the rank holding the
    columns (``holder``: itself or its node's recorder; None: no GPU) and ``how`` in words."""

    labels: list[int]
    holder: Rank | None
    how: str


def gpu_labels(rank: Rank) -> list[int]:
    """The GPU labels of ``rank``'s own columns, sorted."""
    return sorted({int(m.group(1)) for c in rank.columns if (m := GPU_RE.match(c))})


def _labels_of(holder: Rank, uuids: list[str]) -> list[int]:
    """The labels of ``holder``'s GPU columns that belong to the devices ``uuids`` name."""
    gpus = holder.provenance.get("gpus")
    devices = gpus.get("devices") if isinstance(gpus, dict) else None
    have = set(gpu_labels(holder))
    labels = {
        d["label"]
        for d in devices or []
        if isinstance(d, dict) and d.get("uuid") in uuids and d.get("label") in have
    }
    return sorted(labels)


def _by_uuid(rank: Rank, node: list[Rank]) -> GpuChoice | None:
    """The GPUs the provenance says ``rank`` drives (``owned_gpus``), from its own columns or
    else from the lowest rank of its node that recorded them; None when none did."""
    owned = rank.provenance.get("owned_gpus")
    if not isinstance(owned, list) or not owned:
        return None
    for holder in [rank, *sorted((r for r in node if r is not rank), key=lambda r: r.rank)]:
        labels = _labels_of(holder, owned)
        if labels:
            names = ", ".join(f"gpu.{g}" for g in labels)
            of = "" if holder is rank else f" of rank {holder.rank}"
            return GpuChoice(labels, holder, f"{names}{of} (by UUID)")
    return None


def gpu_choice(rank: Rank, node: list[Rank]) -> GpuChoice:
    """Which GPUs are ``rank``'s (see the module docstring); ``node``: its host's ranks."""
    chosen = _by_uuid(rank, node)
    if chosen is not None:
        return chosen
    own = gpu_labels(rank)
    local = rank.local_rank
    if own:
        if len(own) == 1:
            return GpuChoice(own, rank, f"gpu.{own[0]}")
        if local in own:
            return GpuChoice([local], rank, f"gpu.{local} (its local rank)")
        return GpuChoice(own, rank, f"all {len(own)} GPUs (local rank unknown)")
    if local is None:
        return GpuChoice([], None, "none (no GPU column, local rank unknown)")
    for other in sorted(node, key=lambda r: r.rank):
        if other is not rank and local in gpu_labels(other):
            return GpuChoice([local], other, f"gpu.{local} of rank {other.rank} (local rank)")
    return GpuChoice([], None, "none (no GPU column on its node)")


def _reduce(rank: Rank, column: str, over: str) -> float | None:
    if rank.samples is None or column not in rank.samples.column_names:
        return None
    col = rank.samples.column(column)
    value = (pc.mean(col) if over == "mean" else pc.max(col)).as_py()
    return None if value is None else float(value)


def figures(rank: Rank, node: list[Rank], gpus: GpuChoice) -> dict[str, Figure]:
    """Every metric of :data:`METRICS` for ``rank`` (``node``: the ranks on its host)."""
    out = {}
    for m in METRICS:
        if m.gpu:
            holder = gpus.holder
            values = (
                []
                if holder is None
                else [_reduce(holder, m.column.format(g=g), m.over) for g in gpus.labels]
            )
            got = [v for v in values if v is not None]
            if not got or holder is None:
                out[m.key] = Figure(None, "")
                continue
            total = sum(got) / len(got) if m.combine == "mean" else sum(got)
            out[m.key] = Figure(total, "own" if holder is rank else f"node: rank {holder.rank}")
            continue
        value = _reduce(rank, m.column, m.over)
        if value is not None:
            out[m.key] = Figure(value, "own")
            continue
        if m.node:
            for other in sorted(node, key=lambda r: r.rank):
                if other is not rank and (v := _reduce(other, m.column, m.over)) is not None:
                    out[m.key] = Figure(v, f"node: rank {other.rank}")
                    break
            else:
                out[m.key] = Figure(None, "")
        else:
            out[m.key] = Figure(None, "")
    return out


@dataclass(frozen=True)
class HostClock:
    """One host's clock as its ranks recorded it.

    Attributes
    ----------
    job, host : str
    ranks : list of int
    anchor_ns : int or None
        Realtime minus monotonic ns (the lowest rank's; all ranks of a host share both clocks).
    anchor_spread_ns : int or None
        Largest minus smallest anchor over its ranks.
    anchor_uncertainty_ns : int or None
        The widest anchor bracket of its ranks (None when one is unknown).
    synchronized : bool or None
        The kernel's view (adjtimex): False when no daemon vouches for the clock, None unknown.
    maxerror_ns, esterror_ns : int or None
        The kernel's bound on the realtime clock's error and the estimate (the largest over
        its ranks' records).
    """

    job: str
    host: str
    ranks: list[int]
    anchor_ns: int | None
    anchor_spread_ns: int | None
    anchor_uncertainty_ns: int | None
    synchronized: bool | None
    maxerror_ns: int | None
    esterror_ns: int | None

    @property
    def bound_ns(self) -> int | None:
        """How far a time on this host may be from true realtime: the anchor's uncertainty plus
        the clock's maximum error; None when unsynchronised or unknown."""
        if self.synchronized is not True or self.maxerror_ns is None:
            return None
        if self.anchor_uncertainty_ns is None:
            return None
        return self.anchor_uncertainty_ns + self.maxerror_ns

    def status(self) -> str:
        """``"synchronised"``, ``"UNSYNCHRONISED"`` or ``"unknown"``."""
        if self.synchronized is None:
            return "unknown"
        return "synchronised" if self.synchronized else "UNSYNCHRONISED"

    def to_dict(self) -> dict[str, Any]:
        """JSON-able, with ``status`` and ``bound_ns``."""
        return {**self.__dict__, "status": self.status(), "bound_ns": self.bound_ns}


def _largest(values: list[Any]) -> int | None:
    known = [int(v) for v in values if isinstance(v, (int, float)) and not isinstance(v, bool)]
    return max(known) if known and len(known) == len(values) else None


def host_clock(ranks: list[Rank]) -> HostClock:
    """The clock of the host of ``ranks`` (one job, one host, at least one rank)."""
    ranks = sorted(ranks, key=lambda r: r.rank)
    anchors = [r.anchor_ns for r in ranks]
    known = [a for a in anchors if a is not None]
    syncs = [r.clock_sync for r in ranks if r.clock_sync is not None]
    states = [s.get("synchronized") for s in syncs]
    synchronized: bool | None = None
    if False in states:
        synchronized = False
    elif syncs and all(s is True for s in states):
        synchronized = True
    return HostClock(
        job=ranks[0].job,
        host=ranks[0].host,
        ranks=[r.rank for r in ranks],
        anchor_ns=known[0] if known else None,
        anchor_spread_ns=max(known) - min(known) if known else None,
        anchor_uncertainty_ns=_largest([r.clock.get("anchor_uncertainty_ns") for r in ranks]),
        synchronized=synchronized,
        maxerror_ns=_largest([s.get("maxerror_ns") for s in syncs]) if syncs else None,
        esterror_ns=_largest([s.get("esterror_ns") for s in syncs]) if syncs else None,
    )


def lag_uncertainty(
    key: Key, clocks: dict[str, HostClock], anchor_unc: dict[Key, int | None]
) -> int | None:
    """How far off a rank's lag may be (ns): on one host, its anchor's uncertainty plus the
    largest other rank's (both clocks are shared); across hosts, its host's bound plus the
    largest other host's (:attr:`HostClock.bound_ns`). None when a term is unknown."""
    others = [k for k in anchor_unc if k != key]
    if len(clocks) <= 1:
        mine = anchor_unc.get(key)
        rest = [anchor_unc[k] for k in others]
        if mine is None or any(v is None for v in rest):
            return None
        return mine + max((v for v in rest if v is not None), default=0)
    mine_b = clocks[key[1]].bound_ns
    rest_b = [c.bound_ns for h, c in clocks.items() if h != key[1]]
    if mine_b is None or any(b is None for b in rest_b):
        return None
    return mine_b + max((b for b in rest_b if b is not None), default=0)
