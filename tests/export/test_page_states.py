"""What a reader of the report sees while it is drawn and where it is not: every panel says it
is loading until its data is drawn (and why, where drawing failed), the panels out of view are
drawn soon after the ones in view, byte axes tick at round binary values on both pages, the
static plots' legends sit outside the data, a panel with a whole (the memory installed) shows
each part against it, and the provenance is collapsed to a line of its key facts."""

from __future__ import annotations

import base64
import math
import re
from pathlib import Path

import pytest

pytest.importorskip("matplotlib")
pytest.importorskip("bokeh")
from _chromium import Browser
from _report_series import series
from matplotlib.figure import Figure
from stroboscope.export import _plots
from stroboscope.export._figure import byte_ticks, tick_texts
from stroboscope.export.report import Report

GI = 2**30
ROWS = 400
TOTAL = 23.54 * GI  # an odd size installed, as a real machine's MemTotal
HOST = {
    "mem.total_bytes": ("bytes", "gauge", [TOTAL] * ROWS),
    "mem.available_bytes": ("bytes", "gauge", [TOTAL - (0.5 + i / ROWS) * GI for i in range(ROWS)]),
    "mem.used_bytes": ("bytes", "gauge", [(0.5 + i / ROWS) * GI for i in range(ROWS)]),
    "cpu.util_pct": ("%", "rate", [float(i % 9) for i in range(ROWS)]),
    "disk.read_bytes_per_s": ("bytes/s", "rate", [float(i % 5) * 300_000 for i in range(ROWS)]),
}


def _report(many: int = 12) -> Report:
    """Host memory, CPU, disk rates, and other panels: enough to be out of a short view."""
    columns = dict(HOST)
    for k in range(many - 4):  # more panels: one unit each
        columns[f"other.x{k}_count"] = (f"u{k}", "gauge", [float(i % (k + 3)) for i in range(ROWS)])
    return Report([series("run", columns, ROWS)])


@pytest.fixture(scope="module")
def page(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("states") / "r.html"
    out.write_text(_report().html())
    return out


def _round_binary(ticks: list[float]) -> bool:
    """Evenly spaced by a power of two (2**k bytes, k may be negative), each a multiple of it."""
    if len(ticks) < 2:
        return False
    step = ticks[1] - ticks[0]
    k = math.log2(step)
    return (
        k == round(k)
        and all(t / step == round(t / step) for t in ticks)
        and all(b - a == step for a, b in zip(ticks, ticks[1:]))
    )


def test_byte_ticks_are_round_binary_values() -> None:
    got = byte_ticks(-0.05 * TOTAL, 1.05 * TOTAL)
    assert got == [k * 4 * GI for k in range(7)]  # 0, 4 Gi, ... 24 Gi: not 23/19/14/9/5
    assert tick_texts(got, "bytes · host") == ["0"] + [f"{4 * k} Gi" for k in range(1, 7)]
    for lo, hi in [(70 * GI, 256 * GI), (0, 1.1 * 2**20), (8.5 * 2**20, 9.4 * 2**20), (0, 0.9)]:
        ticks = byte_ticks(lo, hi)
        assert _round_binary(ticks) and 4 <= len(ticks) <= 9, (lo, hi, ticks)
        assert lo <= ticks[0] and ticks[-1] <= hi
    # a binary step in a larger unit is written exactly: 256 Ki in Mi is 0.25, not 0.2
    assert tick_texts(byte_ticks(0, 1.1 * 2**20), "bytes/s") == [
        "0", "0.25 Mi", "0.50 Mi", "0.75 Mi", "1.00 Mi"
    ]  # fmt: skip


@pytest.fixture
def figures(monkeypatch: pytest.MonkeyPatch) -> dict[str, Figure]:
    seen: dict[str, Figure] = {}
    original = _plots.figure_png

    def keep(fig: Figure, key: str, title: str) -> _plots.Plot:
        plot = original(fig, key, title)
        seen[key] = fig
        return plot

    monkeypatch.setattr(_plots, "figure_png", keep)
    return seen


def test_static_plots_tick_binary_legends_outside_and_the_whole_as_reference(
    figures: dict[str, Figure],
) -> None:
    _report(4).plots()
    for fig in figures.values():
        fig.canvas.draw()
        for ax in fig.axes:
            legend = ax.get_legend()
            if legend is None:
                continue
            box, area = legend.get_window_extent(), ax.get_window_extent()
            assert box.y0 >= area.y1 - 1, (ax.get_ylabel(), box, area)  # above, not on, the data
    [host] = [ax for ax in figures["memory"].axes if ax.get_ylabel() == "bytes · host"]
    ticks = [t for t in host.get_yticks() if host.get_ylim()[0] <= t <= host.get_ylim()[1]]
    assert _round_binary(ticks) and ticks[-1] >= 20 * GI
    assert [t.get_text() for t in host.get_yticklabels()][:3] == ["0", "4 Gi", "8 Gi"]
    assert host.get_ylim()[0] == 0  # the parts from 0, against the whole
    lines = {str(ln.get_label()): ln for ln in host.get_lines()}
    labels = {name: ln for name, ln in lines.items() if not name.startswith("_")}
    total = next(ln for name, ln in labels.items() if name.startswith("mem.total_bytes"))
    assert total.get_linestyle() == "--"
    used = next(name for name in labels if name.startswith("mem.used_bytes"))
    assert used == "mem.used_bytes: 512.00 Mi to 1.50 Gi (2.1 to 6.4 % of the total)"
    [rate] = [ax for ax in figures["disk"].axes if ax.get_ylabel() == "bytes/s"]
    ticks = [t for t in rate.get_yticks() if rate.get_ylim()[0] <= t <= rate.get_ylim()[1]]
    assert _round_binary(ticks)


def test_provenance_is_collapsed_to_its_key_facts(tmp_path: Path) -> None:
    import json

    s = series("run", HOST, ROWS)
    meta = {"stroboscope.provenance": json.dumps({"host": "node7", "pid": 42, "rows": ROWS})}
    s.metadata.update(meta)
    page = Report([s]).static_html()
    block = page.split('<details class="provenance">')[1].split("</details>")[0]
    summary = block.split("<summary>")[1].split("</summary>")[0]
    assert "host: node7" in summary and "pid: 42" in summary and f"rows: {ROWS}" in summary
    assert "<table>" in block  # every entry, inside
    assert not re.search(r"<details[^>]*\sopen", page)


def _states(b: Browser) -> list[str]:
    return list(
        b.eval("Array.from(document.querySelectorAll('.strobo-fig'), e => e.dataset.state)")
    )


def _overlays(b: Browser) -> list[str]:
    """The text of each figure's status where it shows, '' where it is hidden."""
    return list(
        b.eval(
            "Array.from(document.querySelectorAll('.strobo-fig .strobo-status'), e =>"
            " getComputedStyle(e).display === 'none' ? '' : e.textContent)"
        )
    )


def test_every_panel_says_loading_before_it_is_drawn(page: Path) -> None:
    with Browser(1280, 700) as b:
        b.call("Emulation.setScriptExecutionDisabled", session=True, value=True)
        b.open(page.as_uri())  # as the page is before any script has drawn
        before = _overlays(b)
    assert len(before) == page.read_text().count('class="strobo-fig"') >= 10
    assert set(before) == {"drawing…"}


def test_panels_in_view_first_then_the_rest_and_the_ticks_are_binary(page: Path) -> None:
    with Browser(1280, 700) as b:
        b.open(page.as_uri())
        assert b.eval("window.strobo.ready") is True
        b.eval("new Promise((res) => requestAnimationFrame(() => requestAnimationFrame(res)))")
        first = _overlays(b)
        assert b.eval("window.strobo.drawn()") is True
        states, after = _states(b), _overlays(b)
        axes = b.eval(
            "(() => { const out = []; for (const v of Object.values(Bokeh.index))"
            " for (const av of v.axis_views || []) if (av.dimension === 1)"
            " out.push([av.model.axis_label, Array.from(av.tick_coords.major[1]),"
            " av.model.formatter.doFormat(Array.from(av.tick_coords.major[1]), {loc: 0})]);"
            " return out; })()"
        )
        js = [b.eval(f"stroboPage.byteTicks({lo}, {hi})") for lo, hi in _RANGES]
        errors = [c for c in b.console if not c.startswith(("log:", "info:", "debug:"))]
    assert errors == []
    assert first[0] == "" and first[-1] == "drawing…"  # in view drawn; below, not yet
    assert states == ["drawn"] * len(states) and set(after) == {""}
    [host] = [a for a in axes if a[0] == "bytes · host"]
    assert _round_binary(host[1]) and host[2][:3] == ["0", "4 Gi", "8 Gi"]
    [rate] = [a for a in axes if a[0] == "bytes/s"]
    assert _round_binary(rate[1])
    assert js == [byte_ticks(lo, hi) for lo, hi in _RANGES]  # one rule on both pages


_RANGES = [(0.0, 24.5 * GI), (70 * GI, 256 * GI), (-1.0, 1.0), (8.5 * 2**20, 9.4 * 2**20)]


def test_a_page_that_cannot_draw_says_so_on_every_panel(page: Path, tmp_path: Path) -> None:
    text = page.read_text()
    head, rest = text.split('<script type="application/octet-stream" id="strobo-data">')
    broken = tmp_path / "broken.html"
    bad = base64.b64encode(b"not a zlib stream").decode()
    broken.write_text(head + '<script type="application/octet-stream" id="strobo-data">' + bad
                      + "</script>" + rest.split("</script>", 1)[1])  # fmt: skip
    with Browser(1280, 700) as b:
        b.open(broken.as_uri())
        with pytest.raises(RuntimeError):
            b.eval("window.strobo.ready")
        states, shown = _states(b), _overlays(b)
    assert states == ["error"] * len(states)
    assert all(s.startswith("could not draw this plot: ") for s in shown)


def test_page_legend_gives_each_part_of_the_whole(page: Path) -> None:
    text = page.read_text()
    assert "mem.used_bytes: 512.00 Mi to 1.50 Gi (2.1 to 6.4 % of the total)" in text
    assert "mem.total_bytes: 23.54 Gi (the total)" in text
