"""The cross-rank report (:mod:`stroboscope.export.cluster_report` builds it): its rows, its
jobs, the report itself, and the report as text, Markdown and HTML: the same tables in three
dresses, which are the report's own methods."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import pyarrow as pa

from stroboscope._base.text import fmt_seconds, fmt_value, printable, text_table
from stroboscope.export._html import PAGE_CSS, esc, figure_html, table_html
from stroboscope.export._ranks import Key, Rank
from stroboscope.export._ranks_figures import METRICS, Figure, HostClock
from stroboscope.export._ranks_plot import render_timeline
from stroboscope.export._ranks_steps import Alignment, StepStats, StragglerRule, Verdict
from stroboscope.export._scope_text import SCOPE_HEADER, scope_counts
from stroboscope.formats.partitions import NO_JOB
from stroboscope.formats.provenance import iso_utc

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


Table = tuple[tuple[str, ...], list[tuple[str, ...]], int]
"""Header, rows, and how many first columns are text (left-aligned)."""
NODE_MARK = " *"
NODE_NOTE = (
    "* its node's value: this rank did not record the column, another rank of its host did "
    "(host-wide and GPU sources run on local rank 0; a GPU is matched by local rank)"
)


def _ns(ns: int | None, signed: bool = False) -> str:
    if ns is None:
        return "unknown"
    text = fmt_seconds(abs(ns) / 1e9)
    return ("+" if ns >= 0 else "-") + text if signed else text


def _rows_of(report: ClusterReport, job: JobSummary) -> list[tuple[str, ...]]:
    out = []
    for r in report.rows:
        if r.job != job.job:
            continue
        s = r.step
        cells = [
            str(r.rank),
            r.host,
            "-" if r.local_rank is None else str(r.local_rank),
            "-" if s is None else str(s.count),
            fmt_seconds(None if s is None else s.median_s),
            fmt_seconds(None if s is None else s.p90_s),
        ]
        for m in METRICS:
            f = r.figures[m.key]
            text = "—" if f.value is None else fmt_value(f.value, m.unit)
            cells.append(text + (NODE_MARK if f.source.startswith("node") else ""))
        cells.append("STRAGGLER" if r.straggler else "")
        out.append(tuple(cells))
    return out


def rank_table(report: ClusterReport, job: JobSummary) -> Table:
    """Per rank: step times and resource figures, and the verdict (a ``verdict`` column only
    where a rank of the job straggles: otherwise it would be empty in every row)."""
    header = ("rank", "host", "local", "steps", "median", "p90", *(m.title for m in METRICS))
    rows = _rows_of(report, job)
    if any(r[-1] for r in rows):
        return (*header, "verdict"), rows, 3
    return header, [r[:-1] for r in rows], 3


def scope_table(report: ClusterReport, job: JobSummary) -> Table:
    """Per scope name over the job's ranks: how many ranks called it, its calls, the calls
    still open, and the total, mean, min and max duration of the closed ones
    (:func:`~stroboscope.export._scope_text.scope_counts`); no row when no rank has scopes."""
    tables = [
        r.scopes.select(["name", "begin_ns", "end_ns"])
        for r in report.ranks
        if r.job == job.job and r.scopes is not None and r.scopes.num_rows
    ]
    header = (SCOPE_HEADER[0], "ranks", *SCOPE_HEADER[1:])
    if not tables:
        return header, [], 2
    called = [set(map(str, t.column("name").to_pylist())) for t in tables]
    rows = [
        (c[0], str(sum(c[0] in names for names in called)), *c[1:])
        for c in scope_counts(pa.concat_tables(tables))
    ]
    return header, rows, 2


def clock_table(job: JobSummary) -> Table:
    """Per host: its anchor, the anchor's uncertainty, the clock's synchronisation."""
    header: tuple[str, ...] = (
        "host",
        "ranks",
        "anchor (realtime - monotonic)",
        "spread",
        "anchor ±",
        "clock",
        "est. error",
        "max error",
        "bound ±",
    )
    rows: list[tuple[str, ...]] = [
        (
            c.host,
            ",".join(str(r) for r in c.ranks),
            "unknown" if c.anchor_ns is None else iso_utc(c.anchor_ns),
            _ns(c.anchor_spread_ns),
            _ns(c.anchor_uncertainty_ns),
            c.status(),
            _ns(c.esterror_ns),
            _ns(c.maxerror_ns),
            _ns(c.bound_ns),
        )
        for c in job.clocks
    ]
    return header, rows, 3


def lag_table(report: ClusterReport, job: JobSummary) -> Table:
    """Per rank: how late it starts its steps against the others, and how sure that is."""
    rows: list[tuple[str, ...]] = [
        (str(r.rank), r.host, _ns(r.lag_ns, signed=True), _ns(r.lag_uncertainty_ns))
        for r in report.rows
        if r.job == job.job and r.lag_ns is not None
    ]
    return ("rank", "host", "start lag", "±"), rows, 2


def _step_line(report: ClusterReport) -> str:
    if report.step is None:
        return "step: none (no rank recorded scopes)"
    how = "given" if report.step_given else "the most frequent depth-0 scope; --step NAME to choose"
    return f"step: {report.step!r} ({how})"


def _verdict_lines(report: ClusterReport, job: JobSummary) -> list[str]:
    v = job.verdict
    if v.center_s is None:
        return ["stragglers: no step times"]
    by_key = {r.key: r for r in report.rows}
    named = []
    for key in v.stragglers:
        s = by_key[key].step
        m = 0.0 if s is None or s.median_s is None else s.median_s
        named.append(
            f"rank {key[2]} on {key[1]} (median {fmt_seconds(m)}, "
            f"{(m / v.center_s - 1) * 100:+.1f} %)"
        )
    return [
        "stragglers: " + ("; ".join(named) if named else "none"),
        f"rule: {report.rule.text()}; here: median {fmt_seconds(v.center_s)}, MAD "
        f"{fmt_seconds(v.mad_s)}, threshold {fmt_seconds(v.threshold_s)}",
    ]


def _align_line(job: JobSummary) -> str:
    a = job.alignment
    if a.steps == 0:
        return "steps on one clock: no step starts to compare"
    return (
        f"steps on one clock (each rank's monotonic times plus its anchor; the k-th call of "
        f"every rank, {a.steps} compared): start skew median {_ns(a.skew_median_ns)}, "
        f"max {_ns(a.skew_max_ns)}"
    )


Render = Callable[[Table], str]


Text = Callable[[str], str]


def _sections(report: ClusterReport, table: Render, heading: Text, para: Text) -> list[str]:
    """The report's parts in order, each table, heading and paragraph in the caller's dress
    (which escapes the text in it: host, job and scope names come from the dataset)."""
    parts = [para(_step_line(report))]
    for job in report.jobs:
        title = f"job {job.job}" if len(report.jobs) > 1 or job.job != NO_JOB else "ranks"
        parts += [heading(title), table(rank_table(report, job))]
        parts += [para(line) for line in _verdict_lines(report, job)]
        scopes = scope_table(report, job)
        if scopes[1]:
            parts += [heading("scopes"), table(scopes)]
        parts += [heading("clocks"), table(clock_table(job)), para(_align_line(job))]
        lags = lag_table(report, job)
        if lags[1]:
            parts.append(table(lags))
    if any(f.source.startswith("node") for r in report.rows for f in r.figures.values()):
        parts.append(para(NODE_NOTE))
    if report.notes:
        parts += [heading("notes"), *(para(note) for note in report.notes)]
    return parts


def render_text(report: ClusterReport) -> str:
    """The terminal report; every text in it escaped by :func:`printable` (host, job and scope
    names, the root's path: no control character reaches the terminal)."""

    def table(t: Table) -> str:
        return text_table(*t)

    head = f"== cluster report: {printable(report.root)}  ({len(report.rows)} ranks)"
    body = _sections(report, table, lambda t: f"\n{printable(t)}:", printable)
    return "\n".join([head, *body]) + "\n"


_MD_BACKSLASHED = frozenset("\\`*_[]|#")
"""Characters with a meaning inside a Markdown line, escaped with a backslash (CommonMark, GitHub
and Python-Markdown's tables all honour these)."""
_MD_ENTITIES = {"<": "&lt;", ">": "&gt;", "&": "&amp;", "$": "&#36;", "~": "&#126;"}
"""HTML tags, entities, math (GitHub) and strike-through: written as character references,
which every Markdown reads as the character (a backslash before them is not honoured by all)."""


def md_text(text: str) -> str:
    """``text`` as literal Markdown text, on one line: no tag, link, emphasis, code, math or
    table cell can start in it. Control characters (a newline would end a table row) are shown
    as their escape (``\\n``). The one escaping of everything the Markdown report writes."""
    out = []
    for ch in text:
        if ch in _MD_BACKSLASHED:
            out.append("\\" + ch)
        elif ch in _MD_ENTITIES:
            out.append(_MD_ENTITIES[ch])
        elif not ch.isprintable():
            out.append("\\" + ascii(ch)[1:-1])  # "\n" -> \\n, shown as \n
        else:
            out.append(ch)
    return "".join(out)


def markdown_table(header: Sequence[str], rows: Sequence[Sequence[str]], left: int = 3) -> str:
    """A GitHub pipe table; the first ``left`` columns left-aligned, the rest right-aligned."""
    align = ["---" if i < left else "---:" for i in range(len(header))]
    lines = ["| " + " | ".join(md_text(h) for h in header) + " |", "|" + "|".join(align) + "|"]
    lines += ["| " + " | ".join(md_text(c) for c in r) + " |" for r in rows]
    return "\n".join(lines)


def render_markdown(report: ClusterReport) -> str:
    """The report as Markdown, every text in it escaped by :func:`md_text`."""
    parts = _sections(report, lambda t: markdown_table(*t), lambda t: f"## {md_text(t)}", md_text)
    return f"# Cluster report: {md_text(report.root)}\n\n" + "\n\n".join(parts) + "\n"


def render_html(report: ClusterReport) -> str:
    """The report as one HTML page; the step timeline is drawn when matplotlib is installed."""
    from stroboscope._base.version import __version__

    def table(t: Table) -> str:
        return table_html(*t)

    def para(text: str) -> str:
        return f"<p>{esc(text)}</p>"

    title = f"stroboscope cluster report: {report.root}"
    parts = _sections(report, table, lambda t: f"<h2>{esc(t)}</h2>", para)
    try:
        slow = {r.key for r in report.rows if r.straggler}
        plot = render_timeline(report.step, report.ranks, slow)
        figure = [] if plot is None else ["<h2>Steps on one clock</h2>", figure_html(plot)]
    except ImportError as exc:
        figure = [f'<p class="note">No plot: {esc(exc)}</p>']
    body = [
        f"<h1>{esc(title)}</h1>",
        f'<p class="note">Made by stroboscope {esc(__version__)} from {len(report.rows)} '
        f"ranks.</p>",
        *parts,
        *figure,
    ]
    return (
        '<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8">'
        f"<title>{esc(title)}</title><style>{PAGE_CSS}</style></head>\n<body>\n"
        + "\n".join(body)
        + "\n</body></html>\n"
    )
