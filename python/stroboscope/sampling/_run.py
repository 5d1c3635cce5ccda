"""The run a sampler records: its provenance (gathered once), the counters each frame carries, and
the overhead budget's rate changes, which reach the provenance and the log as they are seen.

The provenance side of :class:`stroboscope.sampling.CoreSampler` (a mixin): the budget is kept in
C++ on the sampler thread (``_core.Sampler``'s rate log); here a rate change made since the last
look becomes a new :class:`RunFacts` (frames made before keep theirs) and one rate-limited log
line. The look is one atomic load, made when rows or stats are read and at stop, so no Python
thread wakes for the budget.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from dataclasses import asdict
from types import MappingProxyType
from typing import Any

import stroboscope._core as _core
from stroboscope._base.ratelimit import RateLimitedLog
from stroboscope.sampling._checks import check_command
from stroboscope.sampling._frame import Frame
from stroboscope.sampling._plan import value_holds_ns
from stroboscope.sampling._provenance import RunFacts, counters, gather, read_cmdline
from stroboscope.sampling._schema import Column
from stroboscope.sampling._stats import RateChange, SamplerStats

logger = logging.getLogger("stroboscope")

_CoreRows = _core.Frame  # (in the class, "_core" names the sampler's attribute)


def describe_change(change: RateChange) -> str:
    """One rate change in words, e.g. ``network every 1 ms -> 2 ms (over_budget at 3.1 %)``."""
    return (
        f"{change.source} every {change.old_interval_ns / 1e6:g} ms -> "
        f"{change.new_interval_ns / 1e6:g} ms ({change.reason} at {change.overhead:.1%} of a core)"
    )


class RunRecord:
    """The provenance side of :class:`stroboscope.sampling.CoreSampler` (a mixin)."""

    _core: _core.Sampler
    _interval: float
    _pid: int
    _columns: list[Column]
    _gpu_labels: dict[int, int]
    _fill_within: MappingProxyType[str, int]
    _details: Mapping[str, Mapping[str, Any]]
    _run: RunFacts | None
    _max_overhead: float

    def stats(self) -> SamplerStats:
        raise NotImplementedError  # the Sampler's

    def _extra_stats(self) -> dict[str, Any]:
        raise NotImplementedError  # the Sampler's

    def _frame(self, rows: _CoreRows) -> Frame:
        run = self._run_facts()
        if self._core.rate_changes_total != self.__dict__.get("_rates_seen", 0):
            run = self._follow_budget()  # one atomic load when nothing changed
        return Frame._of_sampler(rows, run, self._counters(), self._fill_within)

    def _counters(self) -> tuple[int, int, int]:
        """``(ticks_taken, ticks_missed, rows_lost)`` now: what a frame's provenance counts."""
        return counters(self._core.counters(), self._extra_stats())

    def _follow_budget(self, stats: SamplerStats | None = None) -> RunFacts:
        """The run's facts with the budget's rate changes so far; new ones are logged once
        (rate-limited: the first at once, then one line a minute with a count)."""
        stats = stats or self.stats()
        seen = int(self.__dict__.get("_rates_seen", 0))
        self.__dict__["_rates_seen"] = stats.rate_changes_total
        run = self._run_facts()
        if stats.rate_changes_total == seen:
            return run
        fresh = stats.rate_changes[
            max(0, len(stats.rate_changes) - (stats.rate_changes_total - seen)) :
        ]
        log = self.__dict__.get("_rates_log")
        if log is None:
            log = self.__dict__["_rates_log"] = RateLimitedLog(logger)
        if fresh:
            beyond = any(c.reason == "over_budget_beyond_resolution" for c in fresh)
            log(
                logging.WARNING if beyond else logging.INFO,
                "%d rate change(s) to keep the sampler within %.1f%% of a core "
                "(latest: %s); see Sampler.stats().rate_changes",
                len(fresh),
                self._max_overhead * 100,
                describe_change(fresh[-1]),
            )
        self._fill_within = self._fill_for(stats.rate_changes)
        run = self._run = run.with_budget(
            self._max_overhead, [asdict(c) for c in stats.rate_changes], stats.rate_changes_total
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

    def provenance(self, *, command: list[str] | None = None) -> dict[str, Any]:
        """What this sampler knows of its run, as a JSON-able dict that frames and outputs
        carry (see :func:`stroboscope.sampling._provenance.provenance`).

        The run's facts are gathered once (at :meth:`start`, or by the first frame); each call
        here reads the monitored process's command line again (it may ``exec``) and keeps the
        last successful read, unless ``command`` (the command line as the caller knows it) is
        given; and takes in the overhead budget's rate changes made since (``budget``). Frames
        made before keep the facts they were made with.
        """
        command = check_command(command)
        fresh = self._run is None
        run = self._follow_budget()
        if command is not None:
            run = run.with_command(command)
        elif not fresh:
            cmdline = read_cmdline(self._pid)
            if cmdline is not None and cmdline != run.facts["cmdline"]:
                run = self._run = run.with_command(cmdline)
        return run.provenance(self._counters())

    def _run_facts(self) -> RunFacts:
        """The run's provenance, gathered on first use and then kept."""
        run = self._run
        if run is None:
            stats = self.stats()
            run = self._run = gather(
                pid=self._pid,
                interval_s=self._interval,
                sources=stats.sources,
                interfaces={s.name: getattr(s, "interface", None) for s in stats.sources},
                column_names=[c.name for c in self._columns],
                gpu_labels=self._gpu_labels,
                identity=getattr(self, "identity", None),
                anchor_uncertainty_ns=stats.clock_anchor_uncertainty_ns,
                command=read_cmdline(self._pid),
                max_overhead=self._max_overhead,
            )
        return run
