"""The HTML report and PNG plots of a recorded fixture run: figures in the page checked against
the data, the page opened in headless Chromium (loads without console errors, every plot image
decodes, the screenshot shows plots), written whole or not at all, and the missing extra."""

from __future__ import annotations

import dataclasses
import html
import io
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

pytest.importorskip("matplotlib")  # the report extra: the page's plots and the PNGs
import PIL.Image as PIL_Image  # Pillow comes with matplotlib (the report and test extras)
from _chromium import chromium
from _report_run import record_run
from stroboscope._base.files import replace_private
from stroboscope._base.text import fmt_value
from stroboscope.cli import main
from stroboscope.export import report as report_mod
from stroboscope.export._plots import MissingExtraError


@pytest.fixture(scope="module")
def run(tmp_path_factory: pytest.TempPathFactory, fake_libs: dict[str, Path]) -> Path:
    return record_run(tmp_path_factory.mktemp("report_html"), fake_libs["new"])


@pytest.fixture(scope="module")
def page(run: Path) -> Path:
    out = run.parent / "report.html"
    argv = ["report", str(run), "-o", str(out), "--static", "--png", str(run.parent / "png")]
    assert main(argv) == 0  # the page of PNG plots (the zooming page: test_page.py)
    return out


def _cells(text: str, column: str) -> list[str]:
    """The cells of the HTML table row whose first cell is ``column``."""
    start = text.index(f"<tr><td>{html.escape(column)}</td>")
    row = text[start : text.index("</tr>", start)]
    return [html.unescape(c.split(">", 1)[1]) for c in row.split("</td>")[:-1]]


def test_page_holds_the_figures_of_the_data(run: Path, page: Path) -> None:
    text = page.read_text()
    table = pq.read_table(run)
    assert oct(os.stat(page).st_mode & 0o777) == "0o600"
    assert "http://" not in text and "https://" not in text and "<script" not in text
    ids = [line.split('"')[1] for line in text.split("<figure id=")[1:]]
    keys = ("scopes", "cpu", "memory", "gpu-0", "network", "process", "timing")
    assert ids == [f"plot-{k}" for k in keys]  # the scope lane above the plots
    assert text.count('src="data:image/png;base64,') == len(ids)
    gpu = _cells(text, "gpu.0.util_pct")
    assert gpu[1:3] == ["%", "gauge"] and gpu[5:] == ["42.00"] * 4
    cpu_values = table.column("cpu.util_pct").drop_null()
    assert _cells(text, "cpu.util_pct")[3] == f"{len(cpu_values)}/{table.num_rows}"
    sent = table.column("net.sent_bytes").to_numpy()
    assert _cells(text, "net.sent_bytes")[4] == fmt_value(float(sent[-1] - sent[0]), "bytes")
    assert _cells(text, "train/step")[1] == "3"  # the per-scope table, an HTML table
    assert "gpu.0.fan_pct: no value in any row" in text
    assert "gpus: fake NVML: 1 of 2 GPUs" in text
    assert _cells(text, "ticks_missed")[1] == "3"
    assert _cells(text, "host")[1] == "testhost"  # provenance, flattened
    assert _cells(text, "cmdline")[1] == '["python", "train.py"]'


def _figures(run: Path, monkeypatch: pytest.MonkeyPatch) -> dict[str, Any]:
    """The report's figures as drawn (captured as each is saved) and their PNG, by plot key."""
    from stroboscope.export import _plots

    drawn: dict[str, Any] = {}
    save = _plots.figure_png

    def capture(fig: Any, key: str, title: str) -> Any:
        plot = save(fig, key, title)  # laid out and saved: its transforms are the PNG's
        drawn[key] = (fig, plot.png)
        return plot

    monkeypatch.setattr(_plots, "figure_png", capture)
    report_mod.build_report([str(run)]).plots()
    return drawn


def _rgb(color: Any) -> np.ndarray[Any, Any]:
    from matplotlib.colors import to_rgb

    return np.array(to_rgb(color)) * 255


def _tint(pixels: np.ndarray[Any, Any], color: np.ndarray[Any, Any]) -> np.ndarray[Any, Any]:
    """How much of ``color`` each pixel of a short column shows over the column's background
    (its median: white, or a scope's shading), as an anti-aliased thin line blends with it:
    the share along background→colour, 0 where the pixel is off that segment (grey text,
    a grid line, another colour)."""
    back = np.median(pixels, axis=0)
    share = (back - pixels) @ (back - color) / float((back - color) @ (back - color))
    off = np.linalg.norm(back - pixels - np.outer(share, back - color), axis=1)
    return np.where(off < 20, share, 0.0)


def test_png_plots_match_the_html(run: Path, page: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    pngs = sorted((run.parent / "png").iterdir())
    assert [p.stem for p in pngs] == sorted(
        ["scopes", "cpu", "memory", "gpu-0", "network", "process", "timing"]
    )
    for p in pngs:
        with PIL_Image.open(p) as img:
            assert img.size[0] == 1200 and img.size[1] > (100 if p.stem == "scopes" else 200)
        assert p.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    table = pq.read_table(run)
    figures = _figures(run, monkeypatch)
    assert sorted(figures) == [p.stem for p in pngs]
    span = max(table.column("mono_ns").to_pylist()) - min(table.column("mono_ns").to_pylist())
    lines = 0
    for key, (fig, _) in figures.items():
        if key in ("timing", "scopes"):
            continue
        for ax in fig.axes:
            for line in ax.get_lines():
                name = str(line.get_label())
                if name.startswith("_") or name not in table.column_names:
                    continue  # the dots of isolated readings repeat a line's points
                y = np.asarray(line.get_ydata(), dtype=float)
                x = np.asarray(line.get_xdata(), dtype=float)
                data = np.asarray(table.column(name).drop_null().to_pylist(), dtype=float)
                y, x = y[~np.isnan(y)], x[~np.isnan(y)]
                # What is drawn is the data: values it holds, its extremes kept (per-pixel
                # min/max downsampling hides no peak), within the run's time span.
                assert set(y.tolist()) <= set(data.tolist()), name
                assert (y.min(), y.max()) == (data.min(), data.max()), name
                assert x.min() >= 0 and x.max() <= span / 1e9 + 1e-9, name
                lines += 1
    assert lines >= 5
    # In the PNGs the report writes: a known level (GPU util 42 %, CPU user 25 % on every
    # reading; cpu.util_pct, also 25 %, lies under it) is drawn in its line's colour at the pixel
    # row the axes put that value on.
    checked: dict[str, int] = {}
    for key, name, level in (("gpu-0", "gpu.0.util_pct", 42.0), ("cpu", "cpu.user_pct", 25.0)):
        assert set(table.column(name).drop_null().to_pylist()) == {level}
        fig, png = figures[key]
        line = next(ln for ax in fig.axes for ln in ax.get_lines() if ln.get_label() == name)
        with PIL_Image.open(io.BytesIO(png)) as img:
            pixels = np.asarray(img.convert("RGB"), dtype=float)
        x = np.asarray(line.get_xdata(), dtype=float)
        y = np.asarray(line.get_ydata(), dtype=float)
        drawn = np.flatnonzero(~np.isnan(y[:-1]) & ~np.isnan(y[1:]))  # segments on the canvas
        assert len(drawn)
        # What may lie over the line: legends and scope names (their boxes on the canvas).
        over = [*fig.legends, *(a.get_legend() for a in fig.axes if a.get_legend()),
                *(t for a in fig.axes for t in a.texts)]  # fmt: skip
        boxes = [o.get_window_extent().expanded(1.1, 1.5) for o in over]
        hits = []
        for k in drawn[np.linspace(0, len(drawn) - 1, min(20, len(drawn))).astype(int)]:
            px, py = line.axes.transData.transform(((x[k] + x[k + 1]) / 2, level))
            if any(box.contains(px, py) for box in boxes):
                continue
            row = pixels.shape[0] - py
            column = pixels[round(row) - 8 : round(row) + 9, round(px)]
            tinted = np.flatnonzero(_tint(column, _rgb(line.get_color())) > 0.25)
            hits.append(
                bool(len(tinted)) and np.min(np.abs(tinted - 8 - (row - round(row)))) <= 1.5
            )
        assert all(hits), (key, hits)
        checked[key] = len(hits)
    assert checked["cpu"] >= 5, checked  # the GPU's few readings may all lie under the legend


def test_page_opens_in_headless_chromium(page: Path, tmp_path: Path) -> None:
    # A copy with a checking script appended: the page itself has no script. The script logs
    # how many plot images decoded (complete, with a natural size), which Chromium prints.
    probe = tmp_path / "probe.html"
    checker = (
        "<script>window.addEventListener('load',()=>{const imgs=[...document.images];"
        "const ok=imgs.filter(i=>i.complete&&i.naturalWidth>0).length;"
        "console.log('PLOTS '+ok+'/'+imgs.length);});</script>"
    )
    probe.write_text(page.read_text().replace("</body>", checker + "</body>"))
    shot = tmp_path / "shot.png"
    width, height = 1280, 2400
    got = subprocess.run(
        [
            chromium(),
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--hide-scrollbars",
            f"--user-data-dir={tmp_path / 'profile'}",  # no shared profile, no lock
            "--enable-logging=stderr",
            "--v=0",
            f"--screenshot={shot}",
            f"--window-size={width},{height}",
            probe.as_uri(),
        ],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert got.returncode == 0, got.stderr[-2000:]
    console = [line for line in got.stderr.splitlines() if ":CONSOLE" in line]
    n = page.read_text().count("<img ")
    assert any(f'"PLOTS {n}/{n}"' in line for line in console), got.stderr[-3000:]
    assert len(console) == 1, console  # nothing else: no error, no warning from the page
    img = PIL_Image.open(io.BytesIO(shot.read_bytes())).convert("RGB")
    assert img.size == (width, height)
    pixels = np.asarray(img).reshape(-1, 3).astype(int)
    not_white = (pixels < 240).any(axis=1).mean()
    assert 0.02 < not_white < 0.9  # text, axes and lines on a white page
    # matplotlib's first line colour (tab10 blue, #1f77b4) is drawn: plots are shown
    blue = (np.abs(pixels - [31, 119, 180]).sum(axis=1) < 40).sum()
    assert blue > 500


def test_html_written_whole_or_not_at_all(
    run: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "r.html"
    out.write_text("before")

    def broken(*args: object) -> str:
        raise RuntimeError("disk on fire")

    monkeypatch.setattr(report_mod.Report, "html", broken)
    assert main(["report", str(run), "-o", str(out)]) == 2
    assert "disk on fire" in capsys.readouterr().err
    assert out.read_text() == "before" and sorted(p.name for p in tmp_path.iterdir()) == ["r.html"]
    monkeypatch.undo()
    page_bytes: list[bytes] = []

    def failing_replace(path: str) -> Any:
        class Writer:
            def __enter__(self) -> Writer:
                self.cm = replace_private(path)
                self.f = self.cm.__enter__()
                return self

            def write(self, data: bytes) -> None:
                self.f.write(data[: len(data) // 2])
                page_bytes.append(data)
                raise OSError(28, "No space left on device")

            def __exit__(self, *exc: Any) -> None:
                self.cm.__exit__(*exc)

        return Writer()

    monkeypatch.setattr("stroboscope.export.report.replace_private", failing_replace)
    assert main(["report", str(run), "-o", str(out)]) == 2
    assert "No space left on device" in capsys.readouterr().err
    assert page_bytes and out.read_text() == "before"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["r.html"]


def test_missing_matplotlib_names_the_extra(
    run: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setitem(sys.modules, "matplotlib", None)  # import matplotlib fails
    with pytest.raises(MissingExtraError, match=r"stroboscope\[report\]"):
        report_mod.write_html(report_mod.build_report([str(run)]), tmp_path / "r.html")
    assert main(["report", str(run), "--png", str(tmp_path / "png")]) == 2
    err = capsys.readouterr().err
    assert "pip install 'stroboscope[report]'" in err
    assert not (tmp_path / "r.html").exists() and not (tmp_path / "png").exists()


def test_scopes_are_drawn_in_a_lane_of_their_own(run: Path) -> None:
    # The scopes are a lane above the plots; the plots themselves are the same with or
    # without the scope table (no shading over their background).
    report = report_mod.build_report([str(run)], columns=["mem.used_bytes"])
    plots = report.plots()
    assert [p.key for p in plots] == ["scopes", "memory", "timing"]
    bare = report_mod.Report([dataclasses.replace(report.series[0], scopes=None)])
    without = bare.plots()
    assert [p.key for p in without] == ["memory", "timing"]
    assert plots[1].png == without[0].png
    lane = np.asarray(PIL_Image.open(io.BytesIO(plots[0].png)).convert("RGB")).astype(int)
    coloured = (lane.max(axis=2) - lane.min(axis=2) > 60).mean()  # the bars, in colour
    assert 0.01 < coloured < 0.9
    assert isinstance(report.series[0].scopes, pa.Table)
