"""The report as one HTML page: inline CSS, no external resource, so it opens offline in any
browser; its plots either the zooming view (scripts inline) or embedded PNG (``data:`` URLs)
with no script."""

from __future__ import annotations

import base64
import html
from collections.abc import Callable, Sequence

import pyarrow as pa
import pyarrow.compute as pc

from stroboscope.analysis.column_stats import (
    COUNTER_HEADER,
    IDENTIFIER_HEADER,
    LEVEL_HEADER,
    SAMPLES_NOTE,
    ColumnStats,
    counter_rows,
    data_span_s,
    identifier_rows,
    level_rows,
)
from stroboscope.export import _meta
from stroboscope.export._compare import compare_table
from stroboscope.export._figure import Plot
from stroboscope.export._recording import Recording
from stroboscope.export._scope_text import ScopeTable, recording_scope_table
from stroboscope.export._select import iso_ms

Describe = Callable[[Recording], list[ColumnStats]]
ScopesOf = Callable[[Recording], ScopeTable | None]
"""The per-scope table of one series, None without scopes (the report's, computed once)."""
"""The column figures of one series (the report's, computed once for the text and the page)."""

PAGE_CSS = """
body{font:14px/1.4 system-ui,sans-serif;margin:1.5em auto;max-width:1240px;color:#222}
h1{font-size:1.5em}h2{font-size:1.2em;margin-top:1.6em;border-bottom:1px solid #ccc}
h3{font-size:1.05em}pre{font-size:12px;overflow-x:auto}
table{border-collapse:collapse;margin:.5em 0;font-size:12px}
td,th{border:1px solid #ddd;padding:2px 6px}th{background:#f3f3f3;text-align:left}
td.n{text-align:right;font-variant-numeric:tabular-nums}
figure{margin:1em 0}img{max-width:100%;height:auto;border:1px solid #eee}
p.note{color:#555;font-size:12px}
details.provenance>summary{cursor:pointer;font-size:12px;color:#333}
"""


def esc(text: object) -> str:
    return html.escape(str(text), quote=True)


def table_html(header: tuple[str, ...], rows: Sequence[tuple[str, ...]], left: int = 1) -> str:
    """An HTML table; the first ``left`` columns as text, the others right-aligned numbers."""
    head = "".join(f"<th>{esc(h)}</th>" for h in header)
    body = "".join(
        "<tr>"
        + "".join(
            f"<td>{esc(v)}</td>" if i < left else f'<td class="n">{esc(v)}</td>'
            for i, v in enumerate(r)
        )
        + "</tr>"
        for r in rows
    )
    return f"<table><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>"


def _series_html(describe: Describe, s: Recording, scopes_of: ScopesOf) -> str:
    mm = pc.min_max(s.held.column("time").cast(pa.int64()))
    parts = [
        f"<h2>{esc(s.label)}</h2>",
        f"<p>{esc(s.source)}: {s.num_rows} rows from {iso_ms(int(mm['min'].as_py()))} to "
        f"{iso_ms(int(mm['max'].as_py()))}, {data_span_s(s.times):.3f} s of data</p>",
    ]
    summaries = describe(s)
    levels, counters = level_rows(summaries), counter_rows(summaries)
    if levels:
        parts += ["<h3>Levels and rates</h3>", table_html(LEVEL_HEADER, levels, left=3)]
    if counters:
        parts += ["<h3>Counters</h3>", table_html(COUNTER_HEADER, counters, left=2)]
    identifiers = identifier_rows(summaries)
    if identifiers:
        parts += ["<h3>Identifiers</h3>", table_html(IDENTIFIER_HEADER, identifiers)]
    parts.append(f'<p class="note">{esc(SAMPLES_NOTE)}</p>')
    empty = [x.name for x in summaries if x.samples == 0]
    missing = _meta.unavailable(s.metadata) + [f"{n}: no value in any row" for n in empty]
    if missing:
        items = "".join(f"<li>{esc(m)}</li>" for m in missing)
        parts.append(f"<h3>Not available</h3><ul>{items}</ul>")
    figures = _meta.sampler_figures(s.metadata)
    if figures:
        parts += ["<h3>Sampler</h3>", table_html(("figure", "value"), figures, left=2)]
    table = scopes_of(s)
    if table is not None:
        header, rows, labels = table
        parts += ["<h3>Scopes</h3>", table_html(header, rows, left=labels)]
    entries = _meta.metadata_items(s.metadata)
    parts.append("<h3>Provenance and metadata</h3>")
    if entries:
        # collapsed: its key facts on the line that opens it, every entry inside
        facts = "; ".join(f"{k}: {v}" for k, v in _meta.key_facts(s.metadata))
        parts.append(
            f'<details class="provenance"><summary>{len(entries)} entries'
            f"{': ' + esc(facts) if facts else ''}</summary>"
            + table_html(("key", "value"), entries, left=2)
            + "</details>"
        )
    else:
        parts.append('<p class="note">This recording carries no metadata.</p>')
    return "\n".join(parts)


def figure_html(plot: Plot) -> str:
    data = base64.b64encode(plot.png).decode("ascii")
    return (
        f'<figure id="plot-{esc(plot.key)}" class="plot">'
        f'<img alt="{esc(plot.title)}" width="{plot.width}" height="{plot.height}" '
        f'src="data:image/png;base64,{data}"></figure>'
    )


def render_html(
    series: list[Recording],
    describe: Describe,
    plots: list[Plot],
    time_axis: str = "",
    view: str | None = None,
    scopes_of: ScopesOf | None = None,
) -> str:
    """The whole page: the zooming ``view`` (HTML with its scripts, see
    :func:`stroboscope.export._page.page_view`) when given, ``plots``, then (several series)
    the runs side by side, then each of ``series`` with its column figures and per-scope
    table (``scopes_of``, else computed here); ``time_axis`` says what the plots' time 0 is."""
    from stroboscope._base.version import __version__

    title = "stroboscope report: " + ", ".join(s.label for s in series)
    body = [
        f"<h1>{esc(title)}</h1>",
        f'<p class="note">Made by stroboscope {esc(__version__)}. Plots: every value is drawn '
        f"as it was sampled, held until the next reading (a rate over the window it is the mean "
        f"of), with a break where a reading is missing; min and max of every pixel column are "
        f"kept, so no peak is hidden by downsampling; time is "
        f"{esc(time_axis or 'seconds after the first row of all inputs')}; the lane above the "
        f"plots shows the scopes, one row per thread and nesting level.</p>",
        "<h2>Plots</h2>",
        *([] if view is None else [view]),
        *(figure_html(p) for p in plots),
        *(
            ["<h2>Runs side by side</h2>", table_html(*compare_table(series, describe))]
            if len(series) > 1
            else []
        ),
        *(_series_html(describe, s, scopes_of or recording_scope_table) for s in series),
    ]
    return (
        '<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8">'
        f"<title>{esc(title)}</title><style>{PAGE_CSS}</style></head>\n<body>\n"
        + "\n".join(body)
        + "\n</body></html>\n"
    )
