"""The run a sampler records: its provenance (gathered once) and the overhead budget's rate
changes, which reach the provenance, the frames' fill limits and the log as they are seen.

A part of :class:`stroboscope.sampling.CoreSampler` (:class:`RunRecord`): the budget is kept in
C++ on the sampler thread (``_core.Sampler``'s rate log); here a rate change made since the last
look becomes a new :class:`RunFacts` (frames made before keep theirs) and one rate-limited log
line. The look is one atomic load, made when rows or stats are read and at stop, so no Python
thread wakes for the budget.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict
from types import MappingProxyType
from typing import Any

from stroboscope._base.ratelimit import RateLimitedLog
from stroboscope.sampling._plan import value_holds_ns
from stroboscope.sampling._provenance import RunFacts, gather, read_cmdline
from stroboscope.sampling._stats import RateChange, SamplerStats

logger = logging.getLogger("stroboscope")


def describe_change(change: RateChange) -> str:
    """One rate change in words, e.g. ``network every 1 ms -> 2 ms (over_budget at 3.1 %)``."""
    return (
        f"{change.source} every {change.old_interval_ns / 1e6:g} ms -> "
        f"{change.new_interval_ns / 1e6:g} ms ({change.reason} at {change.overhead:.1%} of a core)"
    )


class RunRecord:
    """The run a sampler records, a part of :class:`stroboscope.sampling.CoreSampler`: its
    facts (gathered once), the budget's rate changes seen so far and the forward-fill limits of
    the frames made from now on.

    It holds no reference to its sampler: the sampler's measurement of itself is handed in as
    ``stats`` (a callable, called only when needed) where a method needs it.

    Parameters
    ----------
    interval : float
        The sampler's base interval (s).
    pid : int
        The sampled process.
    column_names : sequence of str
        The names of the sampler's frame columns.
    gpu_labels : mapping of int to int
        NVML index -> column label of the sampler's GPUs.
    details : mapping
        What ``_core.source_details`` said of each source (its columns and value windows).
    fill_within : mapping of str to int
        The forward-fill limit (ns) of each column as planned.
    max_overhead : float
        The overhead budget (a share of one core; 0: none).
    """

    def __init__(
        self,
        *,
        interval: float,
        pid: int,
        column_names: Sequence[str],
        gpu_labels: Mapping[int, int],
        details: Mapping[str, Mapping[str, Any]],
        fill_within: Mapping[str, int],
        max_overhead: float,
    ) -> None:
        self._interval = interval
        self._pid = pid
        self._column_names = list(column_names)
        self._gpu_labels = dict(gpu_labels)
        self._details = details
        self._max_overhead = max_overhead
        self._fill_within = MappingProxyType(dict(fill_within))  # shared by its frames
        self._facts: RunFacts | None = None
        self._rates_seen = 0  # the budget's rate changes taken in so far
        self._rates_log = RateLimitedLog(logger)
        self.identity: object = None
        """Job, host and rank the run records as (None: none); read when the facts are
        gathered."""

    @property
    def gathered(self) -> bool:
        """Whether the run's facts were gathered."""
        return self._facts is not None

    @property
    def fill_within(self) -> MappingProxyType[str, int]:
        """The forward-fill limit (ns) of each column for the frames made now."""
        return self._fill_within

    def budget_changed(self, rate_changes_total: int) -> bool:
        """Whether the budget made rate changes (``_core.Sampler.rate_changes_total``, one atomic
        load) not taken in yet."""
        return rate_changes_total != self._rates_seen

    def facts(self, stats: Callable[[], SamplerStats]) -> RunFacts:
        """The run's provenance, gathered on first use (from ``stats()``) and then kept."""
        run = self._facts
        if run is None:
            now = stats()
            run = self._facts = gather(
                pid=self._pid,
                interval_s=self._interval,
                sources=now.sources,
                interfaces={s.name: getattr(s, "interface", None) for s in now.sources},
                column_names=self._column_names,
                gpu_labels=self._gpu_labels,
                identity=self.identity,
                anchor_uncertainty_ns=now.clock_anchor_uncertainty_ns,
                command=read_cmdline(self._pid),
                max_overhead=self._max_overhead,
            )
        return run

    def current(self, stats: Callable[[], SamplerStats], rate_changes_total: int) -> RunFacts:
        """The facts a frame made now carries: gathered, with the budget's changes so far."""
        run = self.facts(stats)
        if self.budget_changed(rate_changes_total):
            run = self.follow_budget(stats)  # one atomic load when nothing changed
        return run

    def follow_budget(self, stats: Callable[[], SamplerStats]) -> RunFacts:
        """The run's facts with the budget's rate changes so far; new ones are logged once
        (rate-limited: the first at once, then one line a minute with a count)."""
        now = stats()
        seen, self._rates_seen = self._rates_seen, now.rate_changes_total
        run = self.facts(lambda: now)
        if now.rate_changes_total == seen:
            return run
        fresh = now.rate_changes[max(0, len(now.rate_changes) - (now.rate_changes_total - seen)) :]
        if fresh:
            beyond = any(c.reason == "over_budget_beyond_resolution" for c in fresh)
            self._rates_log(
                logging.WARNING if beyond else logging.INFO,
                "%d rate change(s) to keep the sampler within %.1f%% of a core "
                "(latest: %s); see Sampler.stats().rate_changes",
                len(fresh),
                self._max_overhead * 100,
                describe_change(fresh[-1]),
            )
        self._fill_within = self._fill_for(now.rate_changes)
        run = self._facts = run.with_budget(
            self._max_overhead, [asdict(c) for c in now.rate_changes], now.rate_changes_total
        )
        return run

    def _fill_for(self, changes: tuple[RateChange, ...]) -> MappingProxyType[str, int]:
        """The forward-fill limits of frames made from now on: a source the budget slowed holds
        each value until its next reading at the slowest interval it had (frames made before
        keep their limits)."""
        slowest: dict[str, int] = {}
        for c in changes:
            slowest[c.source] = max(slowest.get(c.source, 0), c.new_interval_ns)
        fill = dict(self._fill_within)
        half_tick = round(self._interval * 1e9) // 2
        for name, period in slowest.items():
            windows = self._details[name].get("windows_ns", {})
            for col in self._details[name]["columns"]:
                held = value_holds_ns(period, windows.get(col["name"], 0)) - half_tick
                fill[col["name"]] = max(fill.get(col["name"], 0), held)
        return MappingProxyType(fill)

    def latest(
        self, stats: Callable[[], SamplerStats], command: list[str] | None = None
    ) -> RunFacts:
        """The facts :meth:`CoreSampler.provenance` gives: gathered (see :meth:`facts`), with the
        budget's changes so far and the command line: ``command`` where given (kept for this
        answer only), else the process's read again (it may ``exec``), the last successful read
        kept."""
        fresh = self._facts is None
        run = self.follow_budget(stats)
        if command is not None:
            return run.with_command(command)
        if not fresh:
            cmdline = read_cmdline(self._pid)
            if cmdline is not None and cmdline != run.facts["cmdline"]:
                run = self._facts = run.with_command(cmdline)
        return run
