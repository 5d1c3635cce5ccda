"""The sampler's measurement of itself, typed: :class:`SamplerStats` with one
:class:`SourceStats` per source."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import asdict, dataclass, fields
from typing import TYPE_CHECKING, Any

from stroboscope._base.text import fmt_seconds, fmt_value, text_table

if TYPE_CHECKING:
    from stroboscope.sampling._stacks import StackStats


@dataclass(frozen=True)
class SourceStats:
    """One source's reads since the sampler was built.

    Attributes
    ----------
    name : str
        The source (see :func:`stroboscope.available_sources`).
    every : int
        Read on every n-th tick of the base interval.
    reads, failures : int
        Reads made, and those that left its cells null.
    read_ns_total : int
        Nanoseconds spent in its reads.
    reason : str or None
        Why the latest read left cells null (None when it succeeded).
    errno : int
        The errno of the latest failure (0 when none).
    process_exited : bool
        The latest read found the monitored process gone (process sources only).
    not_followed : int
        Processes (count) the latest read found but did not follow: for ``proc_tree``, the
        descendants past its cap of 1024 and those whose /proc files could not be opened for
        want of file descriptors (it keeps few open: at most an eighth of the soft
        ``RLIMIT_NOFILE``). 0 for the other sources.
    interface : str
        The kernel interface the source reads (``clock_gettime(thread CPU clocks ...)``,
        ``rtnetlink``, ``/sys/block/*/stat``, or the text file it fell back to), as chosen when
        the sampler was built; "" when the source does not say.
    resolution_ns : int
        How often the value it reads can change (0: on any tick); unless ``sources`` gave an
        interval, ``every`` is the first multiple of the base interval at or above it.
    poll_lead_ns : int
        A source polled on its own thread (``gpu``): how long before the sampler's tick its
        latest poll was planned to start: the 90th percentiles of its recent call times and of
        its thread's recent wake-up delays, plus a 20 µs margin, so that the reading lands just
        before the row that carries it. 0 for the other sources.
    interval_ns, first_interval_ns : int
        How often it is read now, and how often it was read at the start: they differ when the
        overhead budget (``max_overhead``) slowed it (see :attr:`SamplerStats.rate_changes`).
        A polled source's are its poll thread's.
    cost_ns : int
        CPU time it cost: its poll thread's CPU time (a polled source), else ``read_ns_total``.
    """

    name: str
    every: int
    reads: int
    failures: int
    read_ns_total: int
    reason: str | None
    errno: int
    process_exited: bool
    not_followed: int = 0
    interface: str = ""
    resolution_ns: int = 0
    poll_lead_ns: int = 0
    interval_ns: int = 0
    first_interval_ns: int = 0
    cost_ns: int = 0


@dataclass(frozen=True)
class RateChange:
    """One change of a source's rate made by the overhead budget (``max_overhead``).

    Attributes
    ----------
    mono_ns : int
        When it was decided (``CLOCK_MONOTONIC``, as :func:`time.monotonic_ns`).
    source : str
        The source whose rate changed.
    old_interval_ns, new_interval_ns : int
        Its interval before and after (a lowered rate doubles it; a raised one halves it).
    reason : str
        ``"over_budget"`` (lowered, still no slower than the source's declared resolution, so
        nothing is lost), ``"over_budget_beyond_resolution"`` (lowered past it: values that
        changed between reads are not seen) or ``"room"`` (raised again).
    overhead : float
        The sampler's CPU (a share of one core) over the window that decided it.
    """

    mono_ns: int
    source: str
    old_interval_ns: int
    new_interval_ns: int
    reason: str
    overhead: float

    @classmethod
    def from_core(cls, raw: tuple[int, str, int, int, str, int]) -> RateChange:
        """From the extension's tuple (the overhead in millionths of a core)."""
        mono, source, old, new, reason, ppm = raw
        return cls(int(mono), str(source), int(old), int(new), str(reason), ppm / 1e6)


@dataclass(frozen=True)
class SamplerStats:
    """Counters and percentiles the sampler keeps about itself (all times in nanoseconds).

    Attributes
    ----------
    ticks_scheduled, ticks_taken, ticks_missed : int
        Deadlines passed while running; those taken; those skipped because the previous tick
        ran over (ticks are never bunched).
    ticks_requested, tick_requests : int
        Extra rows ("edge rows") taken for :meth:`Sampler.request_tick`, not counted in
        ``ticks_taken`` (so ``rows_written = ticks_taken + ticks_requested``); and the requests
        made while running (several requests before one row starts share it).
    precise : bool
        Whether the sampler sleeps to just before each deadline, then spins.
    spin_window_ns : int
        Precise mode: how long before a deadline it started spinning at the latest tick (it
        learns this from its own sleeps' overshoot); 0 otherwise.
    rows_written, rows_overwritten, rows_lost : int
        Rows pushed into the ring; rows whose slot was reused; rows overwritten before a
        ``drain()`` reached them.
    lateness_p50_ns, lateness_p99_ns, lateness_max_ns : int
        Wake-up after each deadline.
    cost_mean_ns, cost_p99_ns, cost_max_ns : float, int, int
        Time to read the due sources and push one row.
    thread_cpu_ns : int
        CPU time used by the sampler thread.
    capacity, num_columns, ring_bytes : int
        Rows the ring holds, metric columns, and its memory.
    clock_anchor_uncertainty_ns : int
        Width of the bracket of the realtime anchor of the ``time`` column.
    process_exited : bool
        A process source found the monitored process gone (from the core, per source).
    sources : tuple of SourceStats
        One entry per source, in column order.
    interval_s : float
        Base interval in seconds.
    pid : int
        The monitored process.
    segments_written, segment_rows_lost : int or None
        With a spool: Parquet segments written, and rows overwritten before a segment took
        them. None without a spool.
    max_overhead : float
        The overhead budget (a share of one core; 0.0: off).
    overhead : float or None
        The sampler's CPU over the budget's latest window, a share of one core (its thread and
        its sources' poll threads); None before the first window (about 1 s) or when off.
    threads_cpu_ns : int
        CPU time of the sampler thread and its sources' poll threads.
    rate_changes_total : int
        Rate changes the budget made since the sampler was built.
    rate_changes : tuple of RateChange
        The latest of them (up to 256), oldest first.
    budget_unmet : int
        Checks (4 a second) that found the sampler over its budget after slowing what it could:
        every source at 1 s (or its resolution, if slower), or what the sources do not cost
        (waking at the interval, ``precise``'s spin) leaves them less than a quarter of the
        budget (they are slowed until they cost that quarter above it, no further).
    stacks : StackStats or None
        The stack reader's own counts (``Sampler(stacks=...)``); None without stacks.
    """

    interval_ns: int
    running: bool
    ticks_scheduled: int
    ticks_taken: int
    ticks_missed: int
    ticks_requested: int
    tick_requests: int
    precise: bool
    spin_window_ns: int
    rows_written: int
    rows_overwritten: int
    rows_lost: int
    lateness_p50_ns: int
    lateness_p99_ns: int
    lateness_max_ns: int
    cost_mean_ns: float
    cost_p99_ns: int
    cost_max_ns: int
    thread_cpu_ns: int
    capacity: int
    num_columns: int
    ring_bytes: int
    clock_anchor_uncertainty_ns: int
    process_exited: bool
    sources: tuple[SourceStats, ...]
    interval_s: float
    pid: int
    segments_written: int | None = None
    segment_rows_lost: int | None = None
    max_overhead: float = 0.0
    overhead: float | None = None
    threads_cpu_ns: int = 0
    rate_changes_total: int = 0
    rate_changes: tuple[RateChange, ...] = ()
    budget_unmet: int = 0
    stacks: StackStats | None = None

    @classmethod
    def from_core(
        cls,
        raw: Mapping[str, Any],
        details: Mapping[str, Mapping[str, Any]] | None = None,
        **extra: Any,
    ) -> SamplerStats:
        """Build from the extension's dict plus ``extra`` fields (interval_s, pid, …).

        ``details`` maps a source name to what ``_core.source_details`` said of it (its
        ``interface`` and ``resolution_ns``)."""
        names = {f.name for f in fields(cls)}
        values = {k: v for k, v in raw.items() if k in names and k != "sources"}
        values["sources"] = tuple(
            SourceStats(**s, **_said_by((details or {}).get(s["name"]))) for s in raw["sources"]
        )
        values["rate_changes"] = tuple(RateChange.from_core(c) for c in raw.get("rate_changes", ()))
        ppm = raw.get("overhead_ppm", -1)
        values["overhead"] = None if ppm < 0 else ppm / 1e6
        values.update(extra)
        return cls(**values)

    def source(self, name: str) -> SourceStats:
        """The entry of the source ``name`` (KeyError when the sampler has no such source)."""
        for s in self.sources:
            if s.name == name:
                return s
        raise KeyError(f"no source {name!r} in this sampler: {[s.name for s in self.sources]}")

    def as_dict(self) -> dict[str, Any]:
        """Plain dicts and lists (for JSON, logging)."""
        return asdict(self)

    def __str__(self) -> str:
        """The figures for a terminal, a few lines and a table of the sources (``repr`` keeps
        every field on one line)."""
        state = "running" if self.running else "stopped"
        mode = ", precise" if self.precise else ""
        lines = [f"sampler {state}: every {_ns(self.interval_ns)}{mode}, pid {self.pid}"]

        def line(what: str, text: str) -> None:
            lines.append(f"  {what:<11}{text}")

        line(
            "ticks",
            f"{self.ticks_taken:,} taken, {self.ticks_missed:,} missed of "
            f"{self.ticks_scheduled:,}; {self.ticks_requested:,} edge rows for "
            f"{self.tick_requests:,} requests",
        )
        line(
            "lateness",
            f"p50 {_ns(self.lateness_p50_ns)}, p99 {_ns(self.lateness_p99_ns)}, "
            f"max {_ns(self.lateness_max_ns)}",
        )
        line(
            "cost/tick",
            f"mean {_ns(self.cost_mean_ns)}, p99 {_ns(self.cost_p99_ns)}, "
            f"max {_ns(self.cost_max_ns)}",
        )
        cpu = f"sampler thread {_ns(self.thread_cpu_ns)}"
        if self.threads_cpu_ns != self.thread_cpu_ns:
            cpu += f", with poll threads {_ns(self.threads_cpu_ns)}"
        line("cpu time", cpu)
        if self.max_overhead > 0:
            now = "-" if self.overhead is None else f"{self.overhead:.1%}"
            line(
                "budget",
                f"{self.max_overhead:.1%} of a core, using {now}; "
                f"{self.rate_changes_total} rate changes (rate_changes), "
                f"{self.budget_unmet} checks unmet",
            )
        line(
            "rows",
            f"{self.rows_written:,} written, {self.rows_overwritten:,} overwritten, "
            f"{self.rows_lost:,} lost; ring of {self.capacity:,} rows x {self.num_columns} "
            f"columns, {fmt_value(self.ring_bytes, 'bytes')}B",
        )
        if self.segments_written is not None:
            line(
                "spool",
                f"{self.segments_written} segments written, "
                f"{self.segment_rows_lost or 0:,} rows lost before one took them",
            )
        line("clock", f"anchor within {_ns(self.clock_anchor_uncertainty_ns)}")
        if self.process_exited:
            line("process", f"{self.pid} has exited")
        rows: list[tuple[str, ...]] = [
            (
                s.name,
                s.interface or "-",
                s.reason or "-",
                _ns(s.interval_ns or s.every * self.interval_ns),
                f"{s.reads:,}",
                f"{s.failures:,}",
                _ns(s.cost_ns),
            )
            for s in self.sources
        ]
        header = ("source", "interface", "latest failure", "every", "reads", "failures", "cost")
        table = text_table(header, rows, left=3)
        lines += ["  " + row for row in table.splitlines()]
        return "\n".join(lines)


def _ns(ns: float) -> str:
    """Nanoseconds in the package's human units (``1.5 ms``)."""
    return "0" if ns == 0 else fmt_seconds(ns / 1e9)


def _said_by(details: Mapping[str, Any] | None) -> dict[str, Any]:
    """The fields of :class:`SourceStats` that come from the source's own description."""
    if details is None:
        return {}
    return {"interface": str(details["interface"]), "resolution_ns": int(details["resolution_ns"])}
