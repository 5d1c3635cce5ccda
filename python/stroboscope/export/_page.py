"""The zooming view of the report page: Bokeh figures (one per panel of
:func:`~stroboscope.export._groups.plot_groups`, all on one time axis) and a scope lane above
them, with the readings embedded (:mod:`stroboscope.export._page_data`) and the page's scripts
(:data:`PAGE_SCRIPTS`) refilling the figures for the visible range on every zoom and pan; under
them, the flame graph of each recording with stacks (:mod:`stroboscope.export._flame`).

Bokeh (the ``report`` extra) is embedded whole: its core script (about 1.3 MB) is written into
the page, so it opens offline. Bokeh over plotly: a quarter of the script (plotly.js is about
4.8 MB), a canvas renderer whose redraw with new data per zoom stays within a frame, ranges
shared across figures as one model, and a BSD licence.
"""

from __future__ import annotations

import base64
import html
import json
import re
from importlib import resources
from typing import Any

import numpy as np
import pyarrow.compute as pc

from stroboscope.analysis.column_stats import column_kind
from stroboscope.export._downsample import GAP_FACTOR, STALL_FACTOR
from stroboscope.export._figure import MissingExtraError, is_bytes
from stroboscope.export._flame import flame_figure, flame_html, flame_manifest
from stroboscope.export._groups import (
    SCOPE_PALETTE,
    WHOLE_COLOR,
    int_column,
    lane_rows,
    line_label,
    plot_groups,
    scope_colors,
    scope_names,
    whole_of,
)
from stroboscope.export._page_data import FORMAT, Array, Blob, encode_column, encode_time
from stroboscope.export._plots import largest, time_span_s, union_schema
from stroboscope.export._recording import Recording
from stroboscope.export._select import align_text, time_origins

PALETTE = SCOPE_PALETTE[:10]
"""The colours of the lines of a panel: tab10, matplotlib's own cycle (the PNG plots')."""
WIDTH_PX = 1200
"""Width of every figure; the plot area is this less ``BORDER_LEFT`` and ``BORDER_RIGHT``."""
BORDER_LEFT = 100
BORDER_RIGHT = 20
PANEL_HEIGHT_PX = 190
LANE_ROW_PX = 22
PAGE_SCRIPTS = ("page_data.js", "page_bokeh.js", "page.js")
"""The page's own scripts, package data of :mod:`stroboscope.export`, inlined in this order:
the readings decoded and the points of a visible range (``page_data.js``), Bokeh's paint
lightened (``page_bokeh.js``), and the figures refilled on every zoom and pan (``page.js``, which
uses both). A page with stacks has ``flame.js`` (:mod:`._flame`) before ``page.js``."""

_CSS = (
    ".strobo-fig{margin:0 0 4px 0;position:relative}"
    # every panel says it is being drawn until its data is (page.js sets data-state)
    ".strobo-status{position:absolute;inset:0;display:flex;align-items:center;"
    "justify-content:center;background:rgba(255,255,255,.8);color:#555;font-size:13px;z-index:4}"
    '.strobo-fig[data-state="drawn"] .strobo-status{display:none}'
    '.strobo-fig[data-state="error"] .strobo-status{color:#b00020;background:#fff5f5}'
    f".legend{{font-size:11px;margin:6px 0 0 {BORDER_LEFT}px}}"
    ".legend .key{margin-right:12px;white-space:nowrap}"
    ".legend i{display:inline-block;width:14px;height:3px;margin:0 4px 3px 0;vertical-align:middle}"
    ".strobo-bar{position:sticky;top:0;background:#fff;z-index:5;padding:4px 0;font-size:12px}"
    ".strobo-range{margin-left:1em;color:#555}"
)

_BYTES_TICKS = """
const u = ["", "Ki", "Mi", "Gi", "Ti", "Pi"];
let m = 0;
for (const t of ticks) m = Math.max(m, Math.abs(t));
let i = 0, s = 1;
while (m / s >= 1024 && i < u.length - 1) { s *= 1024; i++; }
const d = ticks.length > 1 ? Math.abs(ticks[1] - ticks[0]) / s : 1;
let dec = d > 0 ? Math.min(Math.max(0, -Math.floor(Math.log10(d))), 9) : 0;
// binary steps in a larger unit (256 Ki in Mi: 0.25) are written exactly, every tick alike
const off = (t) => Math.abs(+(t / s).toFixed(dec) - t / s) > 1e-9 * d;
while (dec < 12 && ticks.some(off)) dec++;
const text = (tick / s).toFixed(dec);
return +text === 0 ? "0" : text + (i ? " " + u[i] : "");
"""
_BYTES_TICKER = """
const P = window.stroboPage;
return P && P.byteTicks ? P.byteTicks(cb_data.start, cb_data.end) : [];
"""
"""A byte axis's ticks: round binary values (``byteTicks`` in ``page_data.js``, the rule of
:func:`~stroboscope.export._figure.byte_ticks`)."""


def require_bokeh() -> None:
    """Import bokeh or raise :class:`MissingExtraError` naming the extra to install."""
    try:
        import bokeh  # noqa: F401
    except ImportError as exc:
        raise MissingExtraError(
            f"the zooming page needs bokeh, which is not installed ({exc}): "
            f"pip install 'stroboscope[report]'"
        ) from None


def _script_text(text: str) -> str:
    """Text safe inside a ``<script>`` element (no ``</script`` or ``<!--`` in it)."""
    return re.sub(r"<(/script|!--)", r"<\\\1", text, flags=re.IGNORECASE)


def _json(value: Any) -> str:
    return json.dumps(value, separators=(",", ":")).replace("<", "\\u003c")


def _scopes(blob: Blob, series: list[Recording], origins: list[int]) -> dict[str, Any] | None:
    """The scope intervals of ``series`` on the lane's rows (:func:`lane_rows`): begin and end
    (µs after each series' origin), row, name and path; colours by
    :func:`~stroboscope.export._groups.scope_colors`."""
    rows = lane_rows(series)
    if not rows:
        return None
    lane_of = {(si, tid, depth): i for i, (si, tid, depth, _) in enumerate(rows)}
    colors = scope_colors(scope_names(s.scopes for s in series))
    name_ids = {n: i for i, n in enumerate(colors)}
    path_ids: dict[str, int] = {}
    parts: list[tuple[Array, Array, Array, Array, Array]] = []
    for si, s in enumerate(series):
        sc = s.scopes
        if sc is None or not sc.num_rows:
            continue
        last = int(pc.max(s.held.column("mono_ns")).as_py())
        shift = s.anchor_ns - origins[si]
        begin = sc.column("begin_ns").to_numpy(zero_copy_only=False).astype(np.int64) + shift
        end = pc.fill_null(sc.column("end_ns"), last).to_numpy(zero_copy_only=False)
        end = end.astype(np.int64) + shift
        tid, depth = int_column(sc, "thread_id"), int_column(sc, "depth")
        lane = np.array(
            [lane_of.get((si, int(t), int(d)), -1) for t, d in zip(tid, depth)], np.int32
        )
        names = np.array([name_ids[str(n)] for n in sc.column("name").to_pylist()], np.int32)
        texts = sc.column("path" if "path" in sc.column_names else "name").to_pylist()
        paths = np.array([path_ids.setdefault(str(p), len(path_ids)) for p in texts], np.int32)
        keep = lane >= 0  # past the lane's rows at most: not drawn
        parts.append((begin[keep], end[keep], lane[keep], names[keep], paths[keep]))
    cols = [np.concatenate([p[k] for p in parts]) for k in range(5)]
    order = np.argsort(cols[0], kind="stable")
    begin, end, lane, names, paths = (c[order] for c in cols)
    return {
        "begin_us": blob.add(np.rint(begin / 1000.0)),
        "end_us": blob.add(np.rint(end / 1000.0)),
        "lane": blob.add(lane),
        "name": blob.add(names),
        "path": blob.add(paths),
        "names": list(colors),
        "colors": list(colors.values()),
        "paths": list(path_ids),
        "lanes": [r[3] for r in rows],
    }


def page_data(
    series: list[Recording], align: str | None = None
) -> tuple[dict[str, Any], bytes, list[Any]]:
    """The manifest, the compressed readings and the panels (group, unit label, and the
    ``(line id, series index, column, legend text, is the panel's whole)`` of each line) of
    ``series``, on the time axis of
    ``align`` (:func:`~stroboscope.export._select.time_origins`)."""
    origins = time_origins(series, align)
    x0, x1 = time_span_s(series, origins)
    blob = Blob()
    out_series = []
    monos = []
    for s, t0 in zip(series, origins):
        mono = np.asarray(s.held.column("mono_ns").to_numpy(zero_copy_only=False), np.int64)
        monos.append(mono)  # the table's own buffer where it is one chunk of int64: no copy
        origin = t0 - s.anchor_ns  # this series' monotonic ns at its time 0
        out_series.append(
            {"label": s.label, "rows": s.num_rows, "time": encode_time(blob, mono, origin)}
        )
    lines: list[dict[str, Any]] = []
    panels = []
    many = len(series) > 1
    for group in plot_groups(union_schema(series)):
        for label, columns in group.panels:
            whole = whole_of(columns)
            total = largest(series, whole)
            members = []
            for si, s in enumerate(series):
                for col in columns:
                    if col not in s.column_names:
                        continue
                    rate = column_kind(s.schema.field(col)) == "rate"
                    # one column read, encoded and dropped at a time: the recording never whole
                    enc = encode_column(blob, s.column(col), monos[si], rate)
                    if enc is None:
                        continue
                    k = len(lines)
                    lines.append({"id": k, "series": si, "column": col, **enc})
                    text = f"{col} [{s.label}]" if many else col
                    if whole is not None:  # each part against the whole (the static plots')
                        mm = pc.min_max(s.column(col))
                        lo, hi = float(mm["min"].as_py()), float(mm["max"].as_py())
                        text = line_label(text, lo, hi, None if col == whole else total, label)
                    members.append((k, si, col, text, col == whole))
            if members:
                panels.append((group, label, members))
    scopes = _scopes(blob, series, origins)
    flames, flame_notes = flame_manifest(blob, series, origins)
    manifest = {
        "format": FORMAT,
        "x0": x0,
        "x1": x1,
        "gap_factor": GAP_FACTOR,
        "stall_factor": STALL_FACTOR,
        "width": WIDTH_PX - BORDER_LEFT - BORDER_RIGHT,
        "series": out_series,
        "lines": lines,
        "scopes": scopes,
    }
    if flames or flame_notes:  # a page without stacks is as it was
        manifest["flames"] = flames
        manifest["flame_notes"] = flame_notes
    return manifest, blob.packed(), panels


def _color(i: int, member: tuple[Any, ...]) -> str:
    """The colour of a panel's ``i``-th line: the palette's, a whole's grey."""
    return WHOLE_COLOR if member[4] else PALETTE[i % len(PALETTE)]


def _legend(members: list[Any], series: list[Recording]) -> str:
    """A panel's legend as HTML (Bokeh's own legend re-lays itself out on every redraw)."""
    items = []
    for i, m in enumerate(members):
        items.append(
            f'<span class="key"><i style="background:{_color(i, m)}"></i>{html.escape(m[3])}</span>'
        )
    return '<div class="legend">' + "".join(items) + "</div>"


def _figures(
    manifest: dict[str, Any], panels: list[Any], series: list[Recording], xlabel: str
) -> list[Any]:
    """``(figure, legend HTML, line ids, has the lane)`` per figure: the scope lane, then one
    per panel. Each figure is a root of its own with its own time range, which ``page.js``
    keeps equal to the others' (a figure out of view is brought up to date when it scrolls
    into view, so a zoom redraws only what the reader sees)."""
    from bokeh.models import (
        ColumnDataSource,
        CustomJS,
        CustomJSTicker,
        CustomJSTickFormatter,
        HoverTool,
        Range1d,
    )
    from bokeh.plotting import figure

    x0, x1 = manifest["x0"], manifest["x1"]
    rows = max(s.num_rows for s in series)
    step = (x1 - x0) / max(rows - 1, 1)

    def make(i: int, **kw: Any) -> Any:
        x = Range1d(
            start=x0, end=x1, bounds=(x0, x1), min_interval=max(step * 8, 1e-6), name=f"time-{i}"
        )
        moved = CustomJS(code=f"if (window.strobo && window.strobo.moved) window.strobo.moved({i})")
        x.js_on_change("start", moved)
        x.js_on_change("end", moved)
        return figure(
            width=WIDTH_PX,
            x_range=x,
            tools="xpan,xwheel_zoom",
            active_scroll="xwheel_zoom",
            active_drag="xpan",
            toolbar_location=None,
            min_border_left=BORDER_LEFT,
            min_border_right=BORDER_RIGHT,
            output_backend="canvas",
            **kw,
        )

    out: list[Any] = []
    sc = manifest["scopes"]
    if sc is not None:
        n = len(sc["lanes"])
        lane = make(0, height=30 + LANE_ROW_PX * n, y_range=Range1d(start=n, end=0))
        empty: dict[str, Any] = {
            k: []
            for k in ("left", "right", "bottom", "top", "color", "name", "path", "dur", "lane")
        }
        quads = ColumnDataSource(data=empty, name="lane")
        r = lane.quad(
            left="left",
            right="right",
            bottom="bottom",
            top="top",
            fill_color="color",
            line_color=None,  # a white outline would pale calls thinner than a pixel
            source=quads,
        )
        lane.add_tools(
            HoverTool(
                renderers=[r],
                tooltips=[("scope", "@name"), ("path", "@path"), ("lasted", "@dur"), ("", "@lane")],
            )
        )
        texts = ColumnDataSource({"x": [], "y": [], "text": []}, name="lane-text")
        lane.text(
            "x",
            "y",
            text="text",
            source=texts,
            text_align="center",
            text_baseline="middle",
            text_font_size="10px",
            text_color="#222222",
        )
        lane.yaxis.ticker = [i + 0.5 for i in range(n)]
        lane.yaxis.major_label_overrides = {i + 0.5: t for i, t in enumerate(sc["lanes"])}
        lane.yaxis.major_label_text_font_size = "8pt"
        lane.ygrid.visible = False
        legend = "".join(
            f'<span class="key"><i style="background:{c}"></i>{html.escape(nm)}</span>'
            for nm, c in zip(sc["names"], sc["colors"])
        )
        out.append((lane, f'<div class="legend"><b>Scopes</b> {legend}</div>', [], True))
    for group, label, members in panels:
        p = make(len(out), height=PANEL_HEIGHT_PX)
        # one renderer for every line of the figure (a renderer costs each zoom's redraw its
        # own paint), each line in its colour and drawn in the legend's order; the readings
        # marked where few are in view, likewise
        colors = [_color(i, m) for i, m in enumerate(members)]
        dashes = ["dashed" if m[4] else "solid" for m in members]
        src = ColumnDataSource(
            {
                "xs": [[0.0]] * len(members),
                "ys": [[0.0]] * len(members),
                "color": colors,
                "dash": dashes,
            },
            name=f"lines-{len(out)}",
        )
        p.multi_line("xs", "ys", source=src, color="color", line_dash="dash", line_width=1.2)
        if any(m[4] for m in members):  # from 0: how much of the whole each part takes
            p.y_range.start = 0
        dots = ColumnDataSource({"x": [], "y": [], "color": []}, name=f"dots-{len(out)}")
        p.scatter("x", "y", source=dots, color="color", size=4)
        if is_bytes(label):
            p.yaxis.formatter = CustomJSTickFormatter(code=_BYTES_TICKS)
            p.yaxis.ticker = CustomJSTicker(major_code=_BYTES_TICKER, minor_code="return [];")
        p.yaxis.axis_label = label
        p.yaxis.axis_label_text_font_size = "8pt"
        title = f"<b>{html.escape(group.title)}</b>: {html.escape(label)} "
        out.append(
            (
                p,
                _legend(members, series).replace('">', '">' + title, 1),
                [m[0] for m in members],
                False,
            )
        )
    for p, *_ in out:
        p.xaxis.axis_label = xlabel
        p.xaxis.axis_label_text_font_size = "8pt"
    return out


def page_view(series: list[Recording], align: str | None = None) -> str:
    """The zooming view of ``series`` as HTML (scripts inline): Bokeh, the figures, the
    manifest and readings, and the page's scripts (:data:`PAGE_SCRIPTS`)."""
    require_bokeh()
    from bokeh.document import Document
    from bokeh.embed import components
    from bokeh.resources import Resources

    manifest, packed, panels = page_data(series, align)
    figures = _figures(manifest, panels, series, align_text(align))
    if not figures:
        return '<p class="note">No column to plot.</p>'
    manifest["figures"] = [{"lines": ids, "lane": lane} for _, _, ids, lane in figures]
    manifest["palette"] = list(PALETTE)  # the dots' colours, each its line's
    flames = manifest.get("flames", [])
    flame_figs = [
        flame_figure(k, f["rows"], WIDTH_PX, BORDER_LEFT, BORDER_RIGHT)
        for k, f in enumerate(flames)
    ]
    doc = Document()
    with doc.models.freeze():  # the models are collected once, not once per root
        for p in [f[0] for f in figures] + flame_figs:
            doc.add_root(p)
    script, all_divs = components([f[0] for f in figures] + flame_figs)
    divs, flame_divs = all_divs[: len(figures)], all_divs[len(figures) :]
    bokeh_js = "\n".join(Resources(mode="inline", components=["bokeh"]).js_raw)
    package = resources.files("stroboscope.export")
    names = [*PAGE_SCRIPTS[:-1], "flame.js", PAGE_SCRIPTS[-1]] if flames else PAGE_SCRIPTS
    page_js = [package.joinpath(name).read_text() for name in names]
    note = (
        "Zoom with the mouse wheel (or the buttons), pan by dragging; every "
        "plot follows one time axis. Each value is drawn as "
        "read: a step held until the next reading, a gap where no reading followed; zoomed "
        "out, each pixel column shows the min and max of its rows, so no spike is hidden; "
        "zoomed in, every reading. The scope lane has a row per thread and nesting level."
    )
    return "\n".join(
        [
            f"<style>{_CSS}</style>",
            f'<p class="note">{html.escape(note)}</p>',
            f"<script>{_script_text(bokeh_js)}</script>",
            '<div class="strobo-bar"><button type="button" data-zoom="all">whole run</button> '
            '<button type="button" data-zoom="in">zoom in</button> '
            '<button type="button" data-zoom="out">zoom out</button> '
            '<span class="strobo-range"></span></div>',
            *(
                f'<div class="strobo-fig" data-fig="{i}" data-state="loading">{legend}{div}'
                '<div class="strobo-status" role="status">drawing…</div></div>'
                for i, ((_, legend, _, _), div) in enumerate(zip(figures, divs))
            ),
            *flame_html(manifest.get("flame_notes", []), flames, flame_divs),
            script,
            f'<script type="application/json" id="strobo-manifest">{_json(manifest)}</script>',
            '<script type="application/octet-stream" id="strobo-data">'
            + base64.b64encode(packed).decode("ascii")
            + "</script>",
            *(f"<script>{_script_text(js)}</script>" for js in page_js),
        ]
    )
