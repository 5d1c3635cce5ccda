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
from typing import Any

import numpy as np

from stroboscope._base.files import replace_private
from stroboscope.export._ranks import Key, Rank, load_ranks
from stroboscope.export._ranks_figures import (
    figures,
    gpu_choice,
    host_clock,
    lag_uncertainty,
    wanted,
)
from stroboscope.export._ranks_report import ClusterReport, JobSummary, RankRow
from stroboscope.export._ranks_steps import (
    StepStats,
    StragglerRule,
    align,
    choose_step,
    judge,
    step_calls,
    step_stats,
)

__all__ = ["ClusterReport", "StragglerRule", "build_cluster_report", "write_cluster_report"]


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
