"""The zooming report page, looked at as a person does: headless Chromium opens it offline, no
console error, screenshots at the whole run and zoomed into the steps show plots and the scope
lane, and the readings the page decoded equal the table's."""

from __future__ import annotations

import io
import json
import re
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

pytest.importorskip("matplotlib")  # the report extra: the page's timing plot
pytest.importorskip("bokeh")  # the report extra: the zooming view
import PIL.Image as PIL_Image
from _chromium import Browser
from _report_run import record_run
from stroboscope.cli import main
from stroboscope.export._groups import scope_colors, scope_names


@pytest.fixture(scope="module")
def run(tmp_path_factory: pytest.TempPathFactory, fake_libs: dict[str, Path]) -> Path:
    return record_run(tmp_path_factory.mktemp("page"), fake_libs["new"])


@pytest.fixture(scope="module")
def page(run: Path) -> Path:
    out = run.parent / "report.html"
    assert main(["report", str(run), "-o", str(out)]) == 0
    return out


def _manifest(text: str) -> dict[str, Any]:
    body = text.split('<script type="application/json" id="strobo-manifest">')[1]
    return dict(json.loads(body.split("</script>")[0]))


def test_page_is_whole_and_offline(page: Path) -> None:
    text = page.read_text()
    assert not re.search(r'<(script|img|link|iframe)[^>]*\s(src|href)="(?!data:)', text)  # inline
    assert "Bokeh.safely" in text and "window.strobo" in text
    m = _manifest(text)
    assert m["format"] == 1 and [f["lane"] for f in m["figures"]][:1] == [True]
    assert {ln["column"] for ln in m["lines"]} >= {"cpu.util_pct", "gpu.0.util_pct"}
    assert "threads.top0.tid" not in {ln["column"] for ln in m["lines"]}  # no tid plotted


def _rgb(hex_color: str) -> np.ndarray[Any, Any]:
    return np.array([int(hex_color[i : i + 2], 16) for i in (1, 3, 5)], dtype=int)


def _box(b: Browser, i: int) -> tuple[int, int, int, int]:
    """The viewport box (left, top, right, bottom) of figure ``i``'s canvas area."""
    r = b.eval(
        f"(() => {{const r = document.querySelector('.strobo-fig[data-fig=\"{i}\"]')"
        ".getBoundingClientRect(); return [r.left, r.top, r.right, r.bottom];})()"
    )
    return tuple(round(v) for v in r)


def _pixels(shot: bytes, box: tuple[int, int, int, int]) -> np.ndarray[Any, Any]:
    img = PIL_Image.open(io.BytesIO(shot)).convert("RGB")
    x0, y0, x1, y1 = box
    return np.asarray(img.crop((x0, y0, x1, y1))).reshape(-1, 3).astype(int)


def _share(pixels: np.ndarray[Any, Any], color: np.ndarray[Any, Any]) -> float:
    return float((np.abs(pixels - color).sum(axis=1) < 30).mean())


def test_page_zooms_in_headless_chromium(run: Path, page: Path, tmp_path: Path) -> None:
    table = pq.read_table(run)
    scopes = pq.read_table(run.parent / "run.scopes.parquet")
    colors = scope_colors(scope_names([scopes]))
    m = _manifest(page.read_text())
    with Browser(1280, 1400) as b:
        b.open(page.as_uri())
        assert b.eval("window.strobo.ready") is True
        whole = b.eval("window.strobo.shown()")
        assert (whole["a"], whole["b"]) == (m["x0"], m["x1"])
        shot1 = b.screenshot(tmp_path / "whole.png")
        lane1 = _pixels(shot1, _box(b, 0))
        plot1 = _pixels(shot1, _box(b, 1))
        # zoom into the three steps (inline rows 50..170 of the run) from the test
        mono = table.column("mono_ns").to_numpy()
        a, z = (mono[-150] - mono[0]) / 1e9, (mono[-30] - mono[0]) / 1e9
        ms = b.eval(f"window.strobo.zoom({a}, {z})")
        assert ms > 0
        zoomed = b.eval("window.strobo.shown()")
        # one renderer for a figure's lines and one for its dots: each line in its legend's
        # colour, and each reading marked in its line's colour (few readings in view)
        drawn = b.eval(
            "(() => { const d = Bokeh.documents[0]; const l = d.get_model_by_name('lines-1');"
            " const p = d.get_model_by_name('dots-1'); return {colors: Array.from(l.data.color),"
            " lines: l.data.xs.length, dots: Array.from(p.data.color)}; })()"
        )
        shot2 = b.screenshot(tmp_path / "zoomed.png")
        lane2 = _pixels(shot2, _box(b, 0))
        plot2 = _pixels(shot2, _box(b, 1))
        errors = [c for c in b.console if not c.startswith(("log:", "info:", "debug:"))]
    assert errors == []  # no error, no warning, no exception from the page
    assert zoomed["a"] == pytest.approx(a) and zoomed["b"] == pytest.approx(z)
    # the plot area is not blank, at both zoom levels, and shows lines in colour (not only
    # the black and grey of axes, ticks and text)
    for plot in (plot1, plot2):
        assert 0.01 < (plot < 240).any(axis=1).mean() < 0.9
        assert ((plot.max(axis=1) - plot.min(axis=1)) > 80).mean() > 0.001
    # the lane shows the scopes, each name in its colour; zoomed in, each step is named
    assert _share(lane1, _rgb(colors["train"])) > 0.01
    for name in ("train", "step"):
        assert _share(lane2, _rgb(colors[name])) > 0.02, name
    assert zoomed["scopes"] >= 4 and zoomed["labels"].count("step") == 3
    assert not np.array_equal(plot1, plot2)
    assert drawn["colors"] == list(m["palette"][: drawn["lines"]])
    assert drawn["lines"] == len(m["figures"][1]["lines"])
    assert drawn["dots"] and set(drawn["dots"]) <= set(drawn["colors"])


def test_page_decodes_the_readings_of_the_table(run: Path, page: Path) -> None:
    table = pq.read_table(run)
    m = _manifest(page.read_text())
    mono = table.column("mono_ns").to_numpy().astype(np.int64)
    t_us = np.rint((mono - mono[0]) / 1000.0)  # the page's time: µs after the first row
    # half a µs outside the readings' whole µs: a bound at a reading itself, in seconds, comes
    # back from a * 1e6 a hair above or below it (0.032745 * 1e6 = 32745.000000000004)
    a, z = (float(t_us[-150]) - 0.5) / 1e6, (float(t_us[-1]) + 0.5) / 1e6
    with Browser(800, 600) as b:
        b.open(page.as_uri())
        b.eval("window.strobo.ready")
        got = {
            ln["column"]: b.eval(f"window.strobo.readings({ln['id']}, {a}, {z})")
            for ln in m["lines"]
        }
    assert len(got) >= 5
    for name, readings in got.items():
        col = table.column(name)
        ok = col.is_valid().to_numpy(zero_copy_only=False) & (t_us >= t_us[-150])
        want = col.cast(pa.float64()).to_numpy(zero_copy_only=False)[ok]
        assert readings["t_us"] == t_us[ok].tolist(), name
        stored = next(ln for ln in m["lines"] if ln["column"] == name)["values"]["dtype"]
        if stored == "f32":  # float32 where exact enough: to float32's precision
            np.testing.assert_allclose(readings["v"], want, rtol=2**-23, err_msg=name)
        else:
            assert readings["v"] == want.tolist(), name
    assert got["cpu.util_pct"]["v"] == [25.0] * len(got["cpu.util_pct"]["v"])


HOSTILE = "</script><script>window.pwned=1</script><!--"


def test_hostile_names_and_two_aligned_runs_open_as_text(tmp_path: Path) -> None:
    from _report_series import STEP_NS, series
    from stroboscope.export.report import Report

    rows = 300
    columns = {"cpu.util_pct": ("%", "rate", [float(i % 7) for i in range(rows)])}
    calls = [(HOSTILE, 1, 0, 1_000_000_000 + 10 * STEP_NS, 1_000_000_000 + 90 * STEP_NS)]
    runs = [series(n, columns, rows, calls, start_ns=k * 480 * 10**9) for k, n in enumerate("ab")]
    out = tmp_path / "r.html"
    out.write_text(Report(runs, "start").html())
    with Browser(1280, 900) as b:
        b.open(out.as_uri())
        assert b.eval("window.strobo.ready") is True
        assert b.eval("window.pwned === undefined") is True  # the name stayed text
        shown = b.eval("window.strobo.shown()")
        lane = b.eval("Bokeh.documents[0].get_model_by_name('lane').data.name")
        errors = [c for c in b.console if not c.startswith(("log:", "info:", "debug:"))]
    assert errors == []
    assert lane == [HOSTILE, HOSTILE]  # both runs' calls, overlaid from each run's start
    assert shown["a"] == 0 and shown["b"] == pytest.approx((rows - 1) * STEP_NS / 1e9)


def test_missing_bokeh_names_the_extra_and_static_still_works(
    run: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    import sys

    monkeypatch.setitem(sys.modules, "bokeh", None)  # import bokeh fails
    out = tmp_path / "r.html"
    assert main(["report", str(run), "-o", str(out)]) == 2
    assert "pip install 'stroboscope[report]'" in capsys.readouterr().err
    assert not out.exists()  # said before any work
    assert main(["report", str(run), "-o", str(out), "--static"]) == 0
    assert "<script" not in out.read_text()
