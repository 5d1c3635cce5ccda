"""The report page's flame graph of a recording's Python stacks: the weights the page holds
equal those worked out by hand from hand-made stack tables, for every weight offered, the whole
run and each scope; in headless Chromium the graph is drawn, names its functions, and follows
the zoomed range, the weight and the scope chosen; a recording without stacks gets no graph."""

from __future__ import annotations

import base64
import io
import json
import re
import time
import zlib
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

pytest.importorskip("matplotlib")  # the report extra: the page's timing plot
pytest.importorskip("bokeh")  # the report extra: the zooming view
from _scope_tables import Call, intervals
from _stack_tables import CPU_PCT, MS, POWER, ROWS, hand_paths, stacks
from stroboscope.cli import main
from stroboscope.export import _flame_data
from stroboscope.formats.stacks import stack_frames_path, write_stacks

T0 = 1_790_000_000_000_000_000  # realtime of mono_ns 0
MONO0 = 5_000_000_000  # the first row's mono_ns
WEIGHTS = ["cpu", "wall", "proc.cpu_pct", "gpu.0.power_w"]


def write_run(directory: Path, with_stacks: bool = True) -> Path:
    """A 200-row recording (1 ms apart) with its scopes and, ``with_stacks``, its stacks."""
    mono = MONO0 + np.arange(ROWS, dtype=np.int64) * MS

    def metric(name: str, unit: str) -> pa.Field:
        return pa.field(name, pa.float64(), metadata={b"unit": unit.encode(), b"kind": b"gauge"})

    schema = pa.schema(
        [
            pa.field("time", pa.timestamp("ns", "UTC")),
            pa.field("mono_ns", pa.int64()),
            metric("proc.cpu_pct", "%"),
            metric("gpu.0.power_w", "W"),
        ]
    )
    run = directory / "run.parquet"
    arrays = [pa.array(mono + T0, pa.timestamp("ns", "UTC")), pa.array(mono)]
    arrays += [pa.array([CPU_PCT] * ROWS), pa.array(POWER)]
    pq.write_table(pa.Table.from_arrays(arrays, schema=schema), run)
    calls: list[Call] = [
        ("train", "train", 11, 11, 0, MONO0, MONO0 + 200 * MS, {}),
        ("step", "train/step", 11, 11, 1, MONO0 + 50 * MS, MONO0 + 150 * MS, {}),
        ("load", "load", 12, 12, 0, MONO0, MONO0 + 100 * MS, {}),
    ]
    pq.write_table(intervals(calls, anchor=None), directory / "run.scopes.parquet")
    if with_stacks:
        samples, frames = stacks(MONO0)
        write_stacks(samples, frames, run)
    return run


@pytest.fixture(scope="module")
def page(tmp_path_factory: pytest.TempPathFactory) -> Path:
    d = tmp_path_factory.mktemp("flame")
    out = d / "report.html"
    assert main(["report", str(write_run(d)), "-o", str(out)]) == 0
    return out


def manifest(text: str) -> dict[str, Any]:
    body = text.split('<script type="application/json" id="strobo-manifest">')[1]
    return dict(json.loads(body.split("</script>")[0]))


def blob(text: str) -> bytes:
    body = text.split('<script type="application/octet-stream" id="strobo-data">')[1]
    return zlib.decompress(base64.b64decode(body.split("</script>")[0]))


TYPES = {"i8": np.int8, "i16": np.int16, "i32": np.int32, "f32": np.float32, "f64": np.float64}


def array(raw: bytes, e: dict[str, Any]) -> np.ndarray[Any, Any]:
    """One array of the page's blob: its bytes un-shuffled (all first bytes, then all second
    bytes, ...), as ``page_data.js`` reads them."""
    dtype = np.dtype(TYPES[e["dtype"]])
    width, n = dtype.itemsize, e["n"]
    part = np.frombuffer(raw[e["at"] : e["at"] + width * n], np.uint8)
    return np.asarray(part.reshape(width, n).T.copy().view(dtype).reshape(-1))


def paths(
    raw: bytes, flame: dict[str, Any], table: int, weight: int
) -> dict[str, tuple[float, int]]:
    """Per path of functions from the root: the weight and samples of one table of the page
    (every bucket), each node's sum with its descendants' (as the page draws it)."""
    tree, t = flame["tree"], flame["tables"][table]
    parent, frame = array(raw, tree["parent"]), array(raw, tree["frame"])
    node = array(raw, tree["stack_node"])[array(raw, t["stack"])]
    w = np.bincount(node, array(raw, t["weights"][weight]), minlength=len(parent))
    n = np.bincount(node, array(raw, t["samples"]), minlength=len(parent))
    name: dict[int, str] = {0: ""}
    for j in range(1, len(parent)):  # breadth-first: a parent before its children
        up = name[int(parent[j])]
        name[j] = (up + ";" if up else "") + flame["tree"]["functions"][int(frame[j])]
    for j in range(len(parent) - 1, 0, -1):
        w[parent[j]] += w[j]
        n[parent[j]] += n[j]
    return {name[j]: (float(w[j]), int(n[j])) for j in range(1, len(parent)) if n[j]}


def same(got: dict[str, tuple[float, int]], want: dict[str, tuple[float, int]]) -> None:
    assert set(got) == set(want)
    for k, (w, n) in want.items():
        assert got[k][1] == n, k
        assert got[k][0] == pytest.approx(w, rel=1e-6, abs=1e-9), k  # float32 sums


def test_page_holds_the_weights_of_every_stack(page: Path) -> None:
    text = page.read_text()
    m, raw = manifest(text), blob(text)
    (flame,) = m["flames"]
    assert not re.search(r'<(script|img|link|iframe)[^>]*\s(src|href)="(?!data:)', text)  # inline
    assert "P.flames = " in text  # flame.js, inline too
    assert [w["key"] for w in flame["weights"]] == WEIGHTS
    units = [w["unit"] for w in flame["weights"]]
    assert units == ["ns", "ns", "%·s", "J"]
    for i, w in enumerate(flame["weights"]):  # each weight a choice on the page
        assert f'<option value="{i}">{w["label"]}</option>' in text
    assert (flame["first_us"], flame["bucket_us"], flame["samples"]) == (0, 1000, 2 * ROWS)
    rules = {"gpu.0.power_w": "power", "proc.cpu_pct": "cpu_pct"}
    for i, key in enumerate(WEIGHTS):
        same(paths(raw, flame, 0, i), hand_paths((11, 12), 0, ROWS, rules.get(key, key)))
    scopes = [t["scope"] for t in flame["tables"]]
    assert scopes == [None, "train", "load", "step"]  # most time inside first
    same(paths(raw, flame, 3, 0), hand_paths((11,), 50, 150))  # the thread that ran it
    same(paths(raw, flame, 2, 3), hand_paths((12,), 0, 100, "power"))
    assert '<option value="2">scope step</option>' in text
    functions = flame["tree"]["functions"]
    assert sorted(functions) == functions == ["alpha", "beta", "gamma", "main", "worker"]


def test_a_recording_without_stacks_has_no_flame_graph(tmp_path: Path) -> None:
    out = tmp_path / "report.html"
    assert main(["report", str(write_run(tmp_path, with_stacks=False)), "-o", str(out)]) == 0
    text = out.read_text()
    assert "flames" not in manifest(text) and "strobo-flame" not in text
    assert "stroboPage.flames" not in text and "P.flames = " not in text  # no flame.js


def test_stacks_that_cannot_be_read_are_named_and_the_page_is_written(tmp_path: Path) -> None:
    run = write_run(tmp_path)
    Path(stack_frames_path(run)).unlink()
    out = tmp_path / "report.html"
    assert main(["report", str(run), "-o", str(out)]) == 0
    text = out.read_text()
    assert manifest(text)["flames"] == [] and "strobo-flame-bar" not in text
    assert "run: its stacks are not shown" in text and "stack samples but no frames" in text


def test_the_call_tree_keeps_each_path_once_children_by_name() -> None:
    frames = pa.table(
        {
            "stack_id": pa.array([5, 5, 5, 9, 9, 2], pa.int32()),
            "depth": pa.array([0, 1, 2, 0, 1, 0], pa.int32()),
            "function": ["main", "zeta", "a", "main", "b", "other"],
            "file": ["m.py"] * 6,
            "line": pa.array([1, 2, 3, 1, 4, 5], pa.int32()),
        }
    )
    tree = _flame_data.call_tree(frames, np.array([2, 5, 9]))
    named = ["all"] + [tree.functions[f] for f in tree.frame[1:]]
    assert named == ["all", "main", "other", "b", "zeta", "a"]  # breadth-first, by name
    assert tree.parent.tolist() == [-1, 0, 0, 1, 1, 4]
    assert tree.depth.tolist() == [0, 1, 1, 2, 2, 3]
    assert tree.stack_node.tolist() == [2, 5, 3]  # stacks 2 (other), 5 (a), 9 (b)
    assert tree.lines.tolist() == [3, 4, 1, 5, 2]  # a, b, main, other, zeta


def test_buckets_widen_to_fit_and_keep_every_weight(monkeypatch: pytest.MonkeyPatch) -> None:
    rng = np.random.default_rng(3)
    n = 50_000
    t_us = np.sort(rng.integers(0, 10_000_000, n)) // 1000 * 1000  # 10 s at 1 kHz
    stack = rng.integers(0, 40, n)
    weights = [rng.random(n), rng.integers(0, 1000, n).astype(np.float64)]
    groups = [np.flatnonzero(stack % 3 == 0)]
    monkeypatch.setattr(_flame_data, "FLAME_ENTRIES", 2_000)
    first, width, tables = _flame_data.fit_buckets(t_us, stack, groups, iter(weights))
    assert sum(len(t) for t in tables) <= 2_000
    assert width % 1000 == 0 and (width // 1000) & (width // 1000 - 1) == 0  # 1 ms x 2**k
    assert width >= 8000  # 10,000 buckets of 1 ms would be more than the budget
    for table, rows in zip(tables, [np.arange(n), groups[0]]):
        bucket = (t_us[rows] - first) // width
        key = bucket * 40 + stack[rows]
        got_key = table.bucket * 40 + table.stack
        assert np.all(np.diff(got_key) > 0)  # by bucket then stack, each once
        want_keys, inverse = np.unique(key, return_inverse=True)
        assert np.array_equal(got_key, want_keys)
        assert np.array_equal(table.samples, np.bincount(inverse))
        for got, w in zip(table.weights, weights):
            np.testing.assert_allclose(got, np.bincount(inverse, w[rows]), rtol=1e-12)
    _, small_width, small = _flame_data.fit_buckets(t_us[:300], stack[:300], [], iter([]))
    assert small_width == 1000 and len(small[0]) == len(np.unique(t_us[:300] * 40 + stack[:300]))


def test_dense_ids_without_a_sort_or_with_one() -> None:
    for ids in (np.array([7, 3, 7, 9]), np.array([2**31 - 1, 3, 3])):
        distinct, position = _flame_data.dense_ids(ids)
        assert np.array_equal(distinct[position], ids)
        assert np.array_equal(distinct, np.unique(ids))


def _pixels(shot: bytes, box: list[float]) -> np.ndarray[Any, Any]:
    import PIL.Image as PIL_Image

    img = PIL_Image.open(io.BytesIO(shot)).convert("RGB")
    left, top, right, bottom = (round(v) for v in box)
    return np.asarray(img.crop((left, top, right, bottom))).reshape(-1, 3).astype(int)


def test_flame_graph_draws_and_follows_the_page_in_chromium(page: Path, tmp_path: Path) -> None:
    from _chromium import Browser

    def nodes(b: Browser) -> dict[str, tuple[float, int]]:
        got = b.eval("window.strobo.flame.nodes(0)")
        return {n["path"]: (n["weight"], int(n["samples"])) for n in got}

    with Browser(1280, 1400) as b:
        b.open(page.as_uri())
        assert b.eval("window.strobo.ready") is True
        b.eval("document.querySelector('.strobo-flame').scrollIntoView()")
        whole = b.eval("window.strobo.flame.state(0)")
        whole_nodes = nodes(b)
        box = b.eval(
            "(() => { const r = document.querySelector('.strobo-flame').getBoundingClientRect();"
            " return [r.left, r.top, r.right, r.bottom]; })()"
        )
        shot = b.screenshot(tmp_path / "flame.png")
        b.eval("window.strobo.zoom(0.0905, 0.1095)")
        zoomed, zoomed_nodes = b.eval("window.strobo.flame.state(0)"), nodes(b)
        power = b.eval("window.strobo.flame.set(0, {weight: 3})")
        power_nodes = nodes(b)
        b.eval("window.strobo.flame.set(0, {weight: 0, scope: 2})")  # the scope "step"
        b.eval("window.strobo.zoom(0.0405, 0.0595)")
        step_nodes = nodes(b)
        b.eval("window.strobo.flame.set(0, {follow: false})")
        step_all = nodes(b)
        b.eval("window.strobo.flame.set(0, {scope: -1, follow: true})")
        b.eval("window.strobo.zoom(0, 0.2)")
        # the mouse on beta's box (depth 2, right of alpha's): the hover names it, and a
        # click widens it to the whole graph
        x, y = b.eval(
            "(() => { const v = Object.values(Bokeh.index).find("
            "(v) => v.model.x_range.name === 'flame-x-0');"
            " const e = v.el.getBoundingClientRect();"
            " return [e.left + v.frame.x_scale.compute(0.9),"
            " e.top + v.frame.y_scale.compute(2.5)]; })()"
        )
        b.call("Input.dispatchMouseEvent", session=True, type="mouseMoved", x=x, y=y)
        hover = b.eval(
            "new Promise((ok) => setTimeout(() => ok(Array.from(document.querySelectorAll('*'),"
            " (e) => (e.shadowRoot ? e.shadowRoot.textContent : '')).join(' ')), 300))"
        )
        for kind in ("mousePressed", "mouseReleased"):
            b.call(
                "Input.dispatchMouseEvent",
                session=True,
                type=kind,
                x=x,
                y=y,
                button="left",
                clickCount=1,
            )
        focused = b.eval(
            "new Promise((ok) => setTimeout(() => ok(window.strobo.flame.state(0)), 300))"
        )
        errors = [c for c in b.console if not c.startswith(("log:", "info:", "debug:"))]
    assert errors == []
    assert whole["labels"][:4] == ["all", "main", "alpha", "beta"]  # names drawn in the boxes
    assert set(whole["boxes"]) == {"all", "main", "worker", "alpha", "beta", "gamma"}
    assert whole["samples"] == 2 * ROWS and "CPU time" in whole["status"]
    same(whole_nodes, hand_paths((11, 12), 0, ROWS))
    # the zoomed range: rows 90..109 of both threads, as whole 1 ms buckets
    assert zoomed["cover"] == pytest.approx([0.090, 0.110])
    same(zoomed_nodes, hand_paths((11, 12), 90, 110))
    assert power["weight"] == 3 and "J" in power["status"]
    same(power_nodes, hand_paths((11, 12), 90, 110, "power"))
    same(step_nodes, hand_paths((11,), 50, 60))  # the scope and the range together
    same(step_all, hand_paths((11,), 50, 150))  # the scope, the range not followed
    beta = hand_paths((11, 12), 0, ROWS)["main;beta"]
    share = 100 * beta[0] / whole["total"]
    assert f"function: beta at: prog.py:20 weight: 100.000 ms ({beta[1]} samples)" in hover
    assert f"{share:.1f}% of the CPU time shown" in hover
    assert focused["focus"] > 0 and set(focused["boxes"]) == {"all", "main", "beta"}
    # drawn: the flame area holds flamegraph's warm colours (red high, blue low)
    pixels = _pixels(shot, box)
    warm = (pixels[:, 0] > 200) & (pixels[:, 2] < 80)
    assert warm.mean() > 0.05


def _busy(cpu_s: float) -> None:
    """Spin for ``cpu_s`` of this thread's own CPU time."""
    end = time.thread_time() + cpu_s
    while time.thread_time() < end:
        pass


def test_a_sampler_recording_with_stacks_gets_its_flame_graph(tmp_path: Path) -> None:
    import stroboscope

    with stroboscope.Sampler(interval=0.001, stacks=True) as s:
        time.sleep(0.05)
        cpu0 = time.thread_time_ns()
        _busy(0.2)
        spent = time.thread_time_ns() - cpu0  # this thread's own clock
        time.sleep(0.02)
    run = tmp_path / "run.parquet"
    s.snapshot().write_parquet(run)
    samples, frames = s.stacks()
    write_stacks(samples, frames, run)
    out = tmp_path / "report.html"
    assert main(["report", str(run), "-o", str(out)]) == 0
    text = out.read_text()
    (flame,) = manifest(text)["flames"]
    got = paths(blob(text), flame, 0, 0)
    busy = [(k, w) for k, (w, _) in got.items() if k.endswith(";_busy")]
    assert len(busy) == 1  # one box: called from one place
    path, weight = busy[0]
    assert path.split(";")[-2] == "test_a_sampler_recording_with_stacks_gets_its_flame_graph"
    # its samples' CPU time since their thread's previous sample, which was taken while the
    # thread slept: at most what its own clock counted, and most of it
    assert 0.5 * spent <= weight <= spent * (1 + 1e-6) + 2 * MS


HOSTILE = '<img src=x onerror="window.pwned=1"></script><!--'


def test_hostile_function_names_are_text_in_chromium(tmp_path: Path) -> None:
    from _chromium import Browser

    run = write_run(tmp_path)
    samples, frames = stacks(MONO0)
    names = [HOSTILE if f == "alpha" else f for f in frames.column("function").to_pylist()]
    frames = frames.set_column(2, "function", pa.array(names))
    write_stacks(samples, frames, run)
    out = tmp_path / "report.html"
    assert main(["report", str(run), "-o", str(out)]) == 0
    assert HOSTILE not in out.read_text()  # escaped in the manifest
    with Browser(1280, 1400) as b:
        b.open(out.as_uri())
        assert b.eval("window.strobo.ready") is True
        b.eval("document.querySelector('.strobo-flame').scrollIntoView()")
        x, y = b.eval(
            "(() => { const v = Object.values(Bokeh.index).find("
            "(v) => v.model.x_range.name === 'flame-x-0');"
            " const e = v.el.getBoundingClientRect();"
            " return [e.left + v.frame.x_scale.compute(0.2),"
            " e.top + v.frame.y_scale.compute(2.5)]; })()"
        )
        b.call("Input.dispatchMouseEvent", session=True, type="mouseMoved", x=x, y=y)
        hover = b.eval(
            "new Promise((ok) => setTimeout(() => ok(Array.from(document.querySelectorAll('*'),"
            " (e) => (e.shadowRoot ? e.shadowRoot.textContent : '')).join(' ')), 300))"
        )
        boxes = b.eval("window.strobo.flame.state(0)")["boxes"]
        pwned = b.eval("window.pwned === undefined")
    assert HOSTILE in boxes and f"function: {HOSTILE}" in hover  # shown as text
    assert pwned is True  # never run
