"""``stroboscope report ROOT`` on a partitioned dataset: every rank side by side.

>>> report = build_cluster_report("runs/ds", step="train_step")
>>> print(report.text())
>>> write_cluster_report(report, "cluster.html")   # or .md, or .json

Per rank: its step times from its scope calls (count, median, 90th percentile), GPU
utilisation, power and memory, process CPU and RSS, host CPU (a rank that did not record host
or GPU columns gets its node's, marked). The stragglers are named by a stated rule
(:class:`~stroboscope.export._ranks_steps.StragglerRule`). Each host's clock is shown — the
realtime anchor of its ranks, the anchor's uncertainty, and the kernel's view of how well its
realtime clock is synchronised — and the ranks' step starts are put on one realtime axis with
it, with how far that axis may be off between hosts. See ``docs/cluster-report.md``.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from stroboscope._base.files import replace_private
from stroboscope.export._ranks import Key, Rank, load_ranks
from stroboscope.export._ranks_figures import (
    Figure,
    HostClock,
    figures,
    gpu_choice,
    host_clock,
    lag_uncertainty,
    wanted,
)
from stroboscope.export._ranks_render import render_html, render_markdown, render_text
from stroboscope.export._ranks_steps import (
    Alignment,
    StepStats,
    StragglerRule,
    Verdict,
    align,
    choose_step,
    judge,
    step_calls,
    step_stats,
)

__all__ = ["ClusterReport", "StragglerRule", "build_cluster_report", "write_cluster_report"]
FORMAT = "stroboscope-cluster-report"


@dataclass(frozen=True)
class RankRow:
    """One rank's figures: identity, step times, resources, verdict and clock."""

    job: str
    host: str
    rank: int
    local_rank: int | None
    step: StepStats | None
    gpus: str
    figures: dict[str, Figure]
    straggler: bool
    anchor_ns: int | None
    lag_ns: int | None
    lag_uncertainty_ns: int | None

    @property
    def key(self) -> Key:
        """``(job, host, rank)``."""
        return (self.job, self.host, self.rank)

    def to_dict(self) -> dict[str, Any]:
        """JSON-able."""
        out = {k: v for k, v in self.__dict__.items() if k not in ("step", "figures")}
        out["step"] = None if self.step is None else self.step.to_dict()
        out["figures"] = {k: f.to_dict() for k, f in self.figures.items()}
        return out


@dataclass(frozen=True)
class JobSummary:
    """What holds for one job: the straggler verdict, the step alignment, the hosts' clocks."""

    job: str
    verdict: Verdict
    alignment: Alignment
    clocks: list[HostClock]

    def to_dict(self) -> dict[str, Any]:
        """JSON-able (ranks named by number)."""
        a = self.alignment
        return {
            "job": self.job,
            "median_step_s": self.verdict.center_s,
            "mad_s": self.verdict.mad_s,
            "straggler_threshold_s": self.verdict.threshold_s,
            "stragglers": [k[2] for k in self.verdict.stragglers],
            "alignment": {
                "steps_compared": a.steps,
                "skew_median_ns": a.skew_median_ns,
                "skew_max_ns": a.skew_max_ns,
            },
            "hosts": [c.to_dict() for c in self.clocks],
        }


@dataclass
class ClusterReport:
    """The cross-rank report of a dataset (see the module docstring).

    Attributes
    ----------
    root : str
    step : str or None
        The scope name (or path) taken as the step; None when no rank recorded scopes.
    step_given : bool
        Whether the caller named it (else: the most frequent depth-0 scope).
    rule : StragglerRule
    rows : list of RankRow
        One per rank, by job then rank.
    jobs : list of JobSummary
    notes : list of str
        What the figures could not use, and why.
    """

    root: str
    step: str | None
    step_given: bool
    rule: StragglerRule
    rows: list[RankRow]
    jobs: list[JobSummary]
    notes: list[str]
    ranks: list[Rank] = field(default_factory=list, repr=False)

    @property
    def stragglers(self) -> list[RankRow]:
        """The rows of the ranks named stragglers, slowest first within each job."""
        by_key = {r.key: r for r in self.rows}
        return [by_key[k] for j in self.jobs for k in j.verdict.stragglers]

    def to_dict(self) -> dict[str, Any]:
        """The whole report as JSON-able data (what ``-o FILE.json`` writes)."""
        from stroboscope._base.version import __version__

        return {
            "format": FORMAT,
            "version": 1,
            "stroboscope_version": __version__,
            "root": self.root,
            "step": {"name": self.step, "given": self.step_given},
            "straggler_rule": self.rule.to_dict(),
            "jobs": [j.to_dict() for j in self.jobs],
            "ranks": [r.to_dict() for r in self.rows],
            "notes": list(self.notes),
        }

    def text(self) -> str:
        """The terminal report."""
        return render_text(self)

    def markdown(self) -> str:
        """The report as Markdown (pipe tables)."""
        return render_markdown(self)

    def html(self) -> str:
        """The report as one self-contained HTML page (with the step timeline plot when
        matplotlib is installed)."""
        return render_html(self)


def _job_rows(
    job: str, ranks: list[Rank], step: str | None, rule: StragglerRule, notes: list[str]
) -> tuple[list[RankRow], JobSummary]:
    by_host: dict[str, list[Rank]] = {}
    for r in ranks:
        by_host.setdefault(r.host, []).append(r)
    clocks = {h: host_clock(rs) for h, rs in sorted(by_host.items())}
    stats: dict[Key, StepStats] = {}
    starts: dict[Key, Any] = {}
    for r in ranks:
        if step is None:
            continue
        begins, durations = step_calls(r, step)
        stats[r.key] = step_stats(durations, len(begins) - len(durations))
        if r.anchor_ns is None:
            notes.append(f"job {job} {r.label}: no clock anchor, its steps are not aligned")
        elif len(begins):
            starts[r.key] = begins + np.int64(r.anchor_ns)
    medians = {k: s.median_s for k, s in stats.items() if s.median_s is not None}
    verdict = judge(medians, rule)
    if step is not None and len(medians) < 3:
        notes.append(
            f"job {job}: {len(medians)} rank(s) with step times: a straggler needs 3 or more "
            f"ranks to stand out from the others"
        )
    alignment = align(starts)
    unc = {r.key: _int(r.clock.get("anchor_uncertainty_ns")) for r in ranks if r.key in starts}
    rows = []
    for r in ranks:
        gpus = gpu_choice(r, by_host[r.host])
        lag = alignment.lag_ns.get(r.key)
        rows.append(
            RankRow(
                job=job,
                host=r.host,
                rank=r.rank,
                local_rank=r.local_rank,
                step=stats.get(r.key),
                gpus=gpus.how,
                figures=figures(r, by_host[r.host], gpus),
                straggler=r.key in verdict.stragglers,
                anchor_ns=r.anchor_ns,
                lag_ns=lag,
                lag_uncertainty_ns=None if lag is None else lag_uncertainty(r.key, clocks, unc),
            )
        )
    for c in clocks.values():
        if c.synchronized is False and len(clocks) > 1:
            notes.append(
                f"job {job} host {c.host}: realtime clock UNSYNCHRONISED (adjtimex): its "
                f"steps cannot be compared with other hosts' to a known error"
            )
    return rows, JobSummary(job, verdict, alignment, list(clocks.values()))


def _int(value: Any) -> int | None:
    return int(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else None


def build_cluster_report(
    root: str | os.PathLike[str],
    *,
    step: str | None = None,
    rule: StragglerRule | None = None,
) -> ClusterReport:
    """Read the dataset at ``root`` and compute the cross-rank report.

    Parameters
    ----------
    root : path
        A dataset root (``stroboscope record --dataset``, ``write_part``).
    step : str, optional
        The scope name or path whose calls are the steps; default: the depth-0 scope name
        called most often over all ranks.
    rule : StragglerRule, optional
        Default ``StragglerRule(k=3, pct=5)``.

    Raises
    ------
    ValueError
        ``root`` is not a dataset or holds no part; ``step`` was never called; ``rule`` is not
        a StragglerRule.
    """
    if rule is None:
        rule = StragglerRule()
    if not isinstance(rule, StragglerRule):
        raise TypeError(f"rule must be a StragglerRule, got {type(rule).__name__}")
    ranks = load_ranks(root, wanted)
    chosen = choose_step(ranks, step)
    notes: list[str] = []
    if chosen is None:
        notes.append("no rank recorded scopes: no step times (annotate the training step)")
    rows: list[RankRow] = []
    jobs = []
    for job in sorted({r.job for r in ranks}):
        job_rows, summary = _job_rows(job, [r for r in ranks if r.job == job], chosen, rule, notes)
        rows += job_rows
        jobs.append(summary)
    return ClusterReport(os.fspath(root), chosen, step is not None, rule, rows, jobs, notes, ranks)


def write_cluster_report(report: ClusterReport, path: str | os.PathLike[str]) -> str:
    """Write ``report`` to ``path`` whole (0600) in the format its suffix names: ``.json``,
    ``.md`` (Markdown), else HTML; return the format's name."""
    name = os.fspath(path).lower()
    if name.endswith(".json"):
        kind, data = "json", json.dumps(report.to_dict(), indent=1, ensure_ascii=False) + "\n"
    elif name.endswith((".md", ".markdown")):
        kind, data = "markdown", report.markdown()
    else:
        kind, data = "html", report.html()
    with replace_private(path) as f:
        f.write(data.encode())
    return kind
