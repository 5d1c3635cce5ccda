"""``stroboscope report``: a recording (or several) summarised in the terminal, as one
self-contained HTML page, and as PNG plots.

>>> report = build_report(["run.parquet"], columns=["cpu.*", "mem.*"], start="10s")
>>> print(report.text())
>>> write_html(report, "report.html")          # written whole, or not at all
>>> write_pngs(report, "plots/")               # one PNG per plot

The HTML holds a zooming view of every value (Bokeh and the readings embedded: from the whole
run down to single rows, offline), a flame graph of the Python stacks kept beside a recording
(:mod:`stroboscope.export._flame`), its tables and the run's metadata; ``static=True`` writes
the page with the plots as embedded PNG images instead and no script (for papers and CI logs,
like the PNG files). Plots need matplotlib and bokeh (``pip install 'stroboscope[report]'``);
the text does not.
"""

from __future__ import annotations

import contextlib
import os
import stat
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from stroboscope._base.checks import check_path
from stroboscope._base.files import (
    check_replaceable,
    file_kind,
    replace_private,
    same_file,
    why_unreachable,
)
from stroboscope._base.text import printable, text_table
from stroboscope.analysis.column_stats import (
    TIME_COLUMNS,
    ColumnStats,
    column_stats,
    column_stats_text,
)
from stroboscope.export import _meta
from stroboscope.export._compare import compare_table
from stroboscope.export._html import render_html
from stroboscope.export._inputs import read_inputs
from stroboscope.export._page import page_view, require_bokeh
from stroboscope.export._plots import Plot, draw_timing, render_plots, require_matplotlib
from stroboscope.export._recording import Recording
from stroboscope.export._scope_text import (
    ScopeTable,
    recording_scope_table,
    scope_counts,
    scope_text,
)
from stroboscope.export._select import (
    align_text,
    check_align,
    select_columns,
    select_scope,
    select_time,
    split_patterns,
    time_origins,
)
from stroboscope.formats.writers import companions

__all__ = [
    "Report",
    "build_report",
    "check_outputs",
    "scope_counts",
    "scope_text",
    "write_html",
    "write_pngs",
]


@dataclass
class Report:
    """The selected rows of every input, ready to print, render and write.

    Attributes
    ----------
    series : list of Recording
        One per recording (or host/rank of a dataset), after the selections.
    align : str or None
        The plots' time axis (:func:`~stroboscope.export._select.time_origins`): None for
        one absolute axis, ``start`` or ``scope:NAME`` to overlay the runs.
    """

    series: list[Recording]
    align: str | None = None
    _plots: list[Plot] | None = field(default=None, repr=False)
    _described: dict[int, list[ColumnStats]] = field(default_factory=dict, repr=False)
    _scope_tables: dict[int, ScopeTable | None] = field(default_factory=dict, repr=False)

    def describe(self, s: Recording) -> list[ColumnStats]:
        """The column figures of one series (computed once, shared by the text and the page)."""
        key = id(s.held)
        if key not in self._described:  # a column at a time: a long recording is never whole
            names = [n for n in s.column_names if n not in TIME_COLUMNS]
            self._described[key] = [c for n in names for c in column_stats(s.columns([n]))]
        return self._described[key]

    def scope_table(self, s: Recording) -> ScopeTable | None:
        """The per-scope table of one series, None without scopes (computed once, shared by
        the text and the page)."""
        key = id(s.held)
        if key not in self._scope_tables:
            self._scope_tables[key] = recording_scope_table(s)
        return self._scope_tables[key]

    def lateness(self) -> dict[str, tuple[list[float], list[int]]]:
        """The sampler's lateness histogram of each series that recorded one, by label."""
        out = {}
        for s in self.series:
            hist = _meta.lateness_histogram(s.metadata)
            if hist is not None:
                out[s.label] = hist
        return out

    def plots(self) -> list[Plot]:
        """The plots (rendered once, on first use)."""
        if self._plots is None:
            self._plots = render_plots(self.series, self.lateness(), self.align)
        return self._plots

    def sections(self, s: Recording) -> list[tuple[str, str]]:
        """The text sections of one series: summary, sampler, not available, scopes."""
        out = [("summary", column_stats_text(s.times, stats=self.describe(s)))]
        figures = _meta.sampler_figures(s.metadata)
        if figures:
            out.append(("sampler", "\n".join(printable(f"{k}: {v}") for k, v in figures)))
        missing = _meta.unavailable(s.metadata)
        if missing:
            out.append(("not available", "\n".join(printable(m) for m in missing)))
        table = self.scope_table(s)
        if table is not None:
            out.append(("scopes", text_table(table[0], table[1], left=table[2])))
        return out

    def text(self) -> str:
        """The terminal report: per series, its summary and what came with it; names and
        texts from the files with their control characters escaped (:func:`printable`)."""
        parts = []
        for s in self.series:
            parts.append(printable(f"== {s.label}  ({s.source})"))
            for title, body in self.sections(s):
                parts.append(body if title == "summary" else f"\n{title}:\n{body}")
            parts.append("")
        if len(self.series) > 1:
            parts += ["== side by side", text_table(*compare_table(self.series, self.describe))]
        return "\n".join(parts).rstrip() + "\n"

    def html(self) -> str:
        """The whole page: the zooming view, the sampler's timing, the tables."""
        timing = draw_timing(self.series, self.lateness())
        view = page_view(self.series, self.align)
        plots = [] if timing is None else [timing]
        return render_html(
            self.series, self.describe, plots, align_text(self.align), view, self.scope_table
        )

    def static_html(self) -> str:
        """The page with every plot as an embedded PNG and no script."""
        return render_html(
            self.series,
            self.describe,
            self.plots(),
            align_text(self.align),
            scopes_of=self.scope_table,
        )


def build_report(
    inputs: list[str],
    *,
    columns: list[str] | None = None,
    start: str | None = None,
    end: str | None = None,
    scope: str | None = None,
    scopes: str | os.PathLike[str] | None = None,
    align: str | None = None,
) -> Report:
    """Read ``inputs`` and select what the report shows.

    Parameters
    ----------
    inputs : list of str
        Parquet recordings, spools, segment folders or partitioned dataset directories.
    columns : list of str, optional
        Column names or patterns (``gpu.0.*``); comma-separated lists are split.
    start, end : str, optional
        Seconds after the first row (``30``, ``1.5s``, ``2m``) or ISO-8601 times.
    scope : str, optional
        Keep the rows taken while this scope (name or path) was open.
    scopes : path, optional
        A scope-intervals Parquet file for every input (else ``<stem>.scopes.parquet``).
    align : {None, "start", "scope:NAME"}
        The plots' time 0: the first row of all inputs (None), each run's first row, or the
        first call of the scope NAME in each run (every run must have one).

    Raises
    ------
    ValueError
        An input that is not a recording or is empty, a column no input has, a time range
        outside the run, a scope never entered: the message names which and why.
    """
    check_align(align)
    patterns = split_patterns(columns) if columns else None
    series = read_inputs(list(inputs), scopes, patterns)
    series = select_columns(series, columns)
    series = select_time(series, start, end)
    series = select_scope(series, scope)
    report = Report(series, align)
    if align is not None:
        time_origins(series, align)  # a run without the scope is said before any output
    return report


@contextlib.contextmanager
def lean_memory_pool() -> Iterator[str]:
    """While the block runs, jemalloc is Arrow's default memory pool where pyarrow has it, for
    work that reads a long recording column after column (the ``report`` command); yields the
    backend in use, and gives the previous pool back at the end (the setting is the process's:
    a caller of the command in its own process keeps its pool).

    pyarrow's default on Linux, mimalloc, keeps the pages of the arrays it freed for its next
    allocations; a report frees one column-sized array after another (each 27 MiB in a 1-hour
    1 kHz run) and peaked 1,174 MiB with it against 1,060 MiB with jemalloc (same run, one
    sitting). The pool named by ``ARROW_DEFAULT_MEMORY_POOL`` is left as it is, as is the pool
    of a pyarrow without jemalloc (Windows).
    """
    import pyarrow as pa

    before = pa.default_memory_pool()
    if not os.environ.get("ARROW_DEFAULT_MEMORY_POOL"):
        with contextlib.suppress(NotImplementedError):  # a pyarrow built without jemalloc
            pa.set_memory_pool(pa.jemalloc_memory_pool())
    try:
        yield str(pa.default_memory_pool().backend_name)
    finally:
        pa.set_memory_pool(before)


def check_output_path(path: str | os.PathLike[str]) -> str:
    """``-o``: a path an output can be written to (nothing there, or a regular file, in an
    existing directory); a ValueError naming it otherwise. Checked before any work."""
    p = check_path("-o", path)
    try:
        check_replaceable(p)
    except OSError as exc:
        raise ValueError(f"-o {p!r} {exc.strerror}") from None
    parent = os.path.dirname(os.path.abspath(p))
    if not os.path.isdir(parent):
        raise ValueError(f"-o {p!r}: its directory {parent!r} does not exist")
    return p


def check_png_dir(directory: str | os.PathLike[str]) -> str:
    """``--png``: a directory (made when absent); a ValueError naming what is there instead."""
    d = check_path("--png", directory)
    try:
        st = os.stat(d)
    except FileNotFoundError:
        why = why_unreachable(d)
        if why is not None:
            raise ValueError(f"--png {d!r} {why}") from None
        return d
    except OSError as exc:
        raise ValueError(f"--png {d!r} cannot be used: {exc.strerror}") from None
    if not stat.S_ISDIR(st.st_mode):
        kind = "a regular file" if stat.S_ISREG(st.st_mode) else file_kind(st.st_mode)
        raise ValueError(f"--png {d!r} is {kind}, not a directory")
    return d


def check_not_an_input(
    output: str, inputs: Sequence[str | os.PathLike[str]], option: str = "-o"
) -> None:
    """Refuse an output that is one of ``inputs`` or a file written with one (its scope
    intervals, its provenance sidecar), once links and relative parts are resolved: the page
    would replace what the report reads."""
    for given in inputs:
        for what, path in companions(given).items():
            if same_file(output, path):
                name = f"{what} the input" if what else "the input"
                raise ValueError(
                    f"{option} {output!r} is {name} {os.fspath(given)!r} (the same file once "
                    f"links and relative parts are resolved): give another path for the report"
                )


def check_outputs(
    html: str | os.PathLike[str] | None,
    png: str | os.PathLike[str] | None,
    static: bool = False,
    inputs: Sequence[str | os.PathLike[str]] = (),
) -> None:
    """Check ``-o`` and ``--png`` (and that plots can be drawn) before a report is built;
    ``-o`` may not be one of ``inputs`` (the recordings and scope tables read)."""
    if html is not None:
        check_not_an_input(check_output_path(html), inputs)
    if png is not None:
        check_png_dir(png)
    if html is not None or png is not None:
        require_matplotlib()
    if html is not None and not static:
        require_bokeh()


def write_html(report: Report, path: str | os.PathLike[str], static: bool = False) -> None:
    """Write the page to ``path`` whole (0600), or leave ``path`` as it was on any error:
    the zooming page, or with ``static`` the page of PNG images and no script."""
    require_matplotlib()
    if not static:
        require_bokeh()
    # rendered before the file is created; a lone surrogate (from a provenance's JSON escape
    # "\\ud800") is written as its escape, not refused
    page = (report.static_html() if static else report.html()).encode(errors="backslashreplace")
    with replace_private(path) as f:
        f.write(page)


def write_pngs(report: Report, directory: str | os.PathLike[str]) -> list[Path]:
    """Write each plot as ``DIR/<key>.png`` (each file whole); return the paths."""
    require_matplotlib()
    d = Path(check_png_dir(directory))
    plots = report.plots()
    d.mkdir(parents=True, exist_ok=True)
    paths = []
    for plot in plots:
        p = d / f"{plot.key}.png"
        with replace_private(p) as f:
            f.write(plot.png)
        paths.append(p)
    return paths
