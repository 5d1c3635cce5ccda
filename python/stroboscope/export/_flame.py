"""The flame graph of the report page: a recording's Python stacks (``<stem>.stacks.parquet``
and ``<stem>.stack_frames.parquet``, :mod:`stroboscope.formats.stacks`) drawn as an icicle
(the root on top, callees below), for a weight, a time range and a scope the reader chooses on
the page (``flame.js`` draws it).

What the page holds, per recording with stacks (in the page's blob, :mod:`._page_data`):

- **The call tree**: one node per distinct path of frames from the root (a frame is a function:
  its name, file and first line), in breadth-first order with each node's children in the
  order of their function's name, so the page lays it out in one pass and a zoom never
  reorders it; the node each stack ends at.
- **The weights**: each stack sample's weight under every weight offered
  (:func:`stroboscope.analysis.stacks.sample_weights`, the one home of what a weight means),
  summed per stack and time bucket, for the whole run and for each scope (the samples of the
  thread that ran a call of it, while it was open: :func:`stroboscope.analysis.select_samples`).
  A bucket is the stacks' own sampling period when the run is short; a long run doubles it until
  the entries fit :data:`~stroboscope.export._flame_data.FLAME_ENTRIES` (see
  :func:`~stroboscope.export._flame_data.fit_buckets`), and the page says how wide a bucket is.

The page sums the buckets that overlap the zoomed range (shown as the range they cover), adds
each node's weight to its parent, and draws each node as wide as its share of the total.
"""

from __future__ import annotations

import html
from collections.abc import Iterator, Sequence
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from stroboscope.analysis.column_stats import column_kind
from stroboscope.analysis.stacks import (
    GROWTH,
    WEIGHTS,
    sample_weights,
    select_samples,
    weight_source,
)
from stroboscope.export._flame_data import (
    call_tree,
    dense_ids,
    encode_buckets,
    encode_tree,
    fit_buckets,
    rows_needed,
)
from stroboscope.export._page_data import Array, Blob
from stroboscope.export._recording import Recording
from stroboscope.formats.stacks import has_stacks, read_stacks

I64 = Array
F64 = Array

FLAME_SCOPES = 24
"""At most this many scopes are offered on the page (those with the most time inside)."""
ROW_PX = 18
"""Height of one row (one depth of the call tree) of the flame graph."""
MAX_ROWS = 40
"""Rows drawn at once; deeper frames are reached by dragging the graph up."""
FLAME_CSS = (
    ".strobo-flame-bar{font-size:12px;margin:10px 0 4px 0}"
    ".strobo-flame-status{color:#555;margin-top:2px}"
)
"""The style of the flame graphs' controls (in the page only when it has a flame graph)."""


def flame_figure(k: int, rows: int, width: int, left: int, right: int) -> Any:
    """The Bokeh figure of flame graph ``k`` (``width`` px wide, borders ``left`` and
    ``right`` px, as the page's time plots): a quad per node (source ``flame-k``), its label
    (``flame-text-k``) and the hover (function, file:line, weight, share); ``rows`` deep."""
    from bokeh.models import ColumnDataSource, CustomJS, HoverTool, Range1d
    from bokeh.plotting import figure

    shown = min(rows, MAX_ROWS)
    p = figure(
        width=width,
        height=24 + ROW_PX * shown,
        x_range=Range1d(start=0, end=1, bounds=(0, 1), name=f"flame-x-{k}"),
        y_range=Range1d(start=shown, end=0, bounds=(0, max(rows, 1)), name=f"flame-y-{k}"),
        tools="ypan",
        active_drag="ypan",
        toolbar_location=None,
        min_border_left=left,
        min_border_right=right,
        output_backend="canvas",
    )
    empty: dict[str, list[Any]] = {
        k2: []
        for k2 in ("left", "right", "bottom", "top", "color", "fn", "at", "weight", "share", "node")
    }
    src = ColumnDataSource(data=empty, name=f"flame-{k}")
    r = p.quad(
        left="left",
        right="right",
        bottom="bottom",
        top="top",
        fill_color="color",
        line_color="white",
        line_width=0.5,
        source=src,
    )
    p.add_tools(
        HoverTool(
            renderers=[r],
            tooltips=[("function", "@fn"), ("at", "@at"), ("weight", "@weight"), ("", "@share")],
        )
    )
    texts = ColumnDataSource({"x": [], "y": [], "text": []}, name=f"flame-text-{k}")
    p.text(
        "x",
        "y",
        text="text",
        source=texts,
        text_align="left",
        text_baseline="middle",
        text_font_size="10px",
        text_color="#222222",
    )
    tap = f"const s = window.strobo; if (s && s.flameTap) s.flameTap({k}, cb_obj.x, cb_obj.y)"
    p.js_on_event("tap", CustomJS(code=tap))
    p.xaxis.visible = False
    p.yaxis.visible = False
    p.xgrid.visible = False
    p.ygrid.visible = False
    return p


def flame_controls(k: int, flame: dict[str, Any]) -> str:
    """The HTML above flame graph ``k``: its title, the weight and scope chosen, whether it
    follows the zoomed range, and a line the page fills with what is shown."""
    weights = "".join(
        f'<option value="{i}">{html.escape(w["label"])}</option>'
        for i, w in enumerate(flame["weights"])
    )
    scopes = '<option value="-1">the whole run</option>' + "".join(
        f'<option value="{i}">scope {html.escape(t["scope"])}</option>'
        for i, t in enumerate(flame["tables"][1:])
    )
    return (
        f'<div class="strobo-flame-bar" data-flame="{k}"><b>Python stacks</b>'
        f" of {html.escape(flame['label'])}: weight "
        f'<select data-flame-weight="{k}">{weights}</select> in '
        f'<select data-flame-scope="{k}">{scopes}</select> '
        f'<label><input type="checkbox" data-flame-follow="{k}" checked> the zoomed range'
        f"</label> "
        f'<button type="button" data-flame-reset="{k}">whole graph</button>'
        f'<div class="strobo-flame-status" data-flame-status="{k}"></div></div>'
    )


WEIGHT_COLUMNS = (
    "proc.cpu_pct",
    "proc.rss_bytes" + GROWTH,
    "proc.read_bytes",
    "proc.write_bytes",
    "gpu.*.util_pct",
    "gpu.*.power_w",
)
"""Weights offered on the page besides ``cpu`` and ``wall``, those whose column the recording
has, in this order: the process's CPU, memory growth and I/O, each GPU's utilisation and
power. Every other column is a weight of ``stroboscope stacks --weight``."""
WEIGHT_LABELS = {"cpu": "CPU time", "wall": "wall time"}


def weight_columns(names: list[str]) -> list[str]:
    """The weights of :data:`WEIGHT_COLUMNS` whose column is one of ``names``, in that order."""
    import fnmatch

    out: list[str] = []
    for pattern in WEIGHT_COLUMNS:
        suffix = GROWTH if pattern.endswith(GROWTH) else ""
        base = pattern[: len(pattern) - len(suffix)]
        out += [n + suffix for n in fnmatch.filter(names, base) if n + suffix not in out]
    return out


def weight_label(key: str, s: Recording) -> str:
    """How the page names a weight: ``CPU time``, ``wall time``, or its column and what the
    column is (``gpu.0.power_w (gauge)``, ``proc.rss_bytes (growth)``)."""
    column = weight_source(key)
    if column is None:
        return WEIGHT_LABELS[key]
    what = "growth" if key.endswith(GROWTH) else column_kind(s.schema.field(column))
    return f"{column} ({what})"


def stacks_of(s: Recording) -> tuple[pa.Table, pa.Table] | None:
    """The stacks beside ``s``'s file (``<stem>.stacks.parquet`` and
    ``<stem>.stack_frames.parquet``), None when it has none."""
    if not has_stacks(s.source):
        return None
    return read_stacks(s.source)


def page_microseconds(mono_ns: I64, s: Recording, origin: int) -> I64:
    """Times on the page's axis: µs after the report's origin (realtime ns ``origin``), as
    :func:`~stroboscope.export._page_data.encode_time` stores the rows'."""
    ns = mono_ns - (origin - s.anchor_ns)
    return np.asarray(np.rint(ns / 1000.0), np.int64)


def _scope_names(s: Recording) -> list[str]:
    """The scope names of ``s`` with the most time inside closed calls, at most
    :data:`FLAME_SCOPES`, most time first."""
    sc = s.scopes
    if sc is None or not sc.num_rows:
        return []
    closed = sc.filter(sc.column("end_ns").is_valid())
    time = pc.subtract(closed.column("end_ns"), closed.column("begin_ns"))
    per = pa.table({"name": closed.column("name"), "t": time}).group_by("name")
    per = per.aggregate([("t", "sum")]).sort_by([("t_sum", "descending"), ("name", "ascending")])
    return [str(n) for n in per.column("name").to_pylist()[:FLAME_SCOPES]]


def flame_data(
    blob: Blob, s: Recording, si: int, origin: int, stacks: tuple[pa.Table, pa.Table]
) -> dict[str, Any] | None:
    """The page's flame data of recording ``s`` (series ``si`` of the page, time 0 at realtime
    ``origin``): the call tree, the weights offered and the tables of sums (the whole run, then
    each scope); None when none of its stack samples lies within its rows."""
    samples, frames = stacks
    mono = np.asarray(samples.column("mono_ns").to_numpy(), np.int64)
    rows = np.asarray(s.held.column("mono_ns").to_numpy(zero_copy_only=False), np.int64)
    keep = (mono >= rows.min()) & (mono <= rows.max())  # the report's rows (a time selection)
    if not keep.any():
        return None
    kept = samples if keep.all() else samples.filter(pa.array(keep))  # no copy of a whole run
    stack_ids, stack = dense_ids(np.asarray(kept.column("stack_id").to_numpy(), np.int64))
    tree = call_tree(frames, stack_ids)
    t_us = page_microseconds(mono if kept is samples else mono[keep], s, origin)
    del mono
    scopes = _scope_names(s)
    groups = [
        np.flatnonzero(select_samples(kept, scope=name, intervals=s.scopes)) for name in scopes
    ]
    weights: list[dict[str, Any]] = []

    def values() -> Iterator[F64]:
        for key in (*WEIGHTS, *weight_columns(s.column_names)):
            column = weight_source(key)
            table = None if column is None else s.columns([column])
            if table is not None and table.column(column).null_count == table.num_rows:
                continue  # a column with no reading weighs nothing
            # every sample of the run: a weight depends on the thread's previous sample
            v, unit, rule = sample_weights(samples, key, table)
            weights.append({"key": key, "label": weight_label(key, s), "unit": unit, "rule": rule})
            v = v if kept is samples else v[keep]
            finite = np.isfinite(v)
            yield v if finite.all() else np.where(finite, v, 0.0)

    first, width, tables = fit_buckets(t_us, stack, groups, values())
    return {
        "series": si,
        "label": s.label,
        "samples": int(keep.sum()),
        "first_us": first,
        "bucket_us": width,
        "rows": rows_needed(tree),
        "weights": weights,
        "tree": encode_tree(blob, tree),
        "tables": [
            {"scope": name, **encode_buckets(blob, table)}
            for name, table in zip([None, *scopes], tables)
        ],
    }


def flame_manifest(
    blob: Blob, series: list[Recording], origins: list[int]
) -> tuple[list[dict[str, Any]], list[str]]:
    """The flame data of every recording of ``series`` with stacks beside it
    (:func:`flame_data`, time 0 of each at ``origins``), and a note for each whose stacks could
    not be read (the page says why; the rest of the report is drawn)."""
    flames, notes = [], []
    for si, (s, origin) in enumerate(zip(series, origins)):
        try:
            stacks = stacks_of(s)
        except ValueError as exc:
            notes.append(f"{s.label}: its stacks are not shown: {exc}")
            continue
        if stacks is None:
            continue
        data = flame_data(blob, s, si, origin, stacks)
        if data is None:
            notes.append(f"{s.label}: no stack sample lies within the rows shown")
        else:
            flames.append(data)
    return flames, notes


def flame_html(notes: list[str], flames: list[Any], divs: Sequence[str]) -> list[str]:
    """The flame graphs' part of the view: a note per recording whose stacks are not shown,
    then per flame graph its controls (:func:`~stroboscope.export._flame.flame_controls`) and
    figure."""
    out = [f'<p class="note">{html.escape(n)}</p>' for n in notes]
    if flames:
        out.append(f"<style>{FLAME_CSS}</style>")
        out.append(
            '<p class="note">The flame graphs show the Python stacks sampled with the rows: '
            "each box a function, as wide as its share of the weight chosen, its callers above "
            "it; hover for the function, its file and line, its weight and share; click a box "
            "to widen it. They follow the zoomed range of the plots above (whole buckets of "
            "time, as the line under the controls says) unless that is unticked.</p>"
        )
    for k, (f, div) in enumerate(zip(flames, divs)):
        out.append(flame_controls(k, f))
        out.append(f'<div class="strobo-flame" data-flame="{k}">{div}</div>')
    return out
