"""NVTX capture: NVTX's own C API (through the ``nvtx`` package from PyPI, on the CPU) loads
stroboscope's injection library from ``NVTX_INJECTION64_PATH`` and its ranges, marks, domains and
categories come back from the events directory as scopes, with the child's pid, thread ids,
nesting and clock; and ``torch.autograd.profiler.emit_nvtx`` wherever this torch routes it
through NVTX."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import pytest
from _binaries import REQUIRE_VARIABLE  # CI names the library there: it cannot pass by skipping
from stroboscope.analysis.scope_edges import shared_intervals
from stroboscope.formats.shared_events import EVENTS_DIR_ENV, NVTX_INJECTION_ENV, read_events_dir
from stroboscope.scopes import nvtx_injection_path
from stroboscope.scopes.nvtx_capture import NVTX_LIBRARY_NAME


def _library() -> str:
    path = nvtx_injection_path()
    if path is not None:
        return path
    message = f"{NVTX_LIBRARY_NAME} is not installed beside stroboscope._core (build the C++)"
    if NVTX_LIBRARY_NAME in os.environ.get(REQUIRE_VARIABLE, "").split():
        pytest.fail(f"{message}, and {REQUIRE_VARIABLE} says this run needs it")
    pytest.skip(message)


def _run(script: str, env: dict[str, str]) -> dict[str, Any]:
    """Runs ``script`` in a fresh interpreter with ``env`` added; returns the JSON it prints."""
    done = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(script)],
        env={**os.environ, **env},
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    result: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    return result


def _events(events_dir: Path) -> list[dict[str, Any]]:
    rows: list[dict[str, Any]] = read_events_dir(events_dir).to_pylist()
    return [r for r in rows if r["producer"] == "nvtx"]


NVTX_SCRIPT = """
    import json, os, threading, time
    import nvtx
    t0 = time.monotonic_ns()
    nvtx.push_range("outer")
    nvtx.push_range("inner", category="compute")
    nvtx.pop_range()
    nvtx.pop_range()
    with nvtx.annotate("step", domain="train"):
        nvtx.mark("tick", domain="train")
        with nvtx.annotate("forward", domain="train", category=5):
            pass
    rng = nvtx.start_range("load", domain="io")
    other = {}
    def finish():
        other["tid"] = threading.get_native_id()
        nvtx.end_range(rng)
    thread = threading.Thread(target=finish)
    thread.start()
    thread.join()
    print(json.dumps({"pid": os.getpid(), "tid": threading.get_native_id(),
                      "other": other["tid"], "t0": t0, "t1": time.monotonic_ns(),
                      "range": rng[0]}))
"""


def test_nvtx_ranges_marks_domains_and_categories_become_scopes(tmp_path: Path) -> None:
    pytest.importorskip("nvtx", reason="the nvtx package (the test extra) is not installed")
    library = _library()
    out = _run(NVTX_SCRIPT, {EVENTS_DIR_ENV: str(tmp_path), NVTX_INJECTION_ENV: library})
    events = _events(tmp_path)
    by_stack: dict[int, list[tuple[int, str, int, str]]] = {}
    for e in events:
        by_stack.setdefault(e["stack_id"], []).append(
            (e["kind"], e["scope"], e["depth"], e["labels"])
        )
    stacks = {tuple(s[1] for s in seq): sid for sid, seq in by_stack.items()}
    assert len(stacks) == 3  # the default domain, "train", and the start/end range
    default = by_stack[stacks[("outer", "inner", "inner", "outer")]]
    assert default == [
        (1, "outer", 0, ""),
        (1, "inner", 1, '{"category":"compute"}'),  # the category's name (nvtxNameCategory)
        (2, "inner", 1, '{"category":"compute"}'),
        (2, "outer", 0, ""),
    ]
    step, tick, forward = "train/step", "train/tick", "train/forward"
    train = by_stack[stacks[(step, tick, tick, forward, forward, step)]]
    assert [(k, d) for k, _, d, _ in train] == [(1, 0), (1, 1), (2, 1), (1, 1), (2, 1), (2, 0)]
    assert train[3][3] == '{"category":"5"}'  # a category without a name: its number
    load = [e for e in events if e["scope"] == "io/load"]
    assert [(e["kind"], e["depth"], e["thread_id"]) for e in load] == [
        (1, 0, out["tid"]),
        (2, 0, out["other"]),  # ended on another thread, on its own stack
    ]
    assert all(e["pid"] == out["pid"] for e in events)
    assert all(e["thread_id"] == out["tid"] for e in events if e["scope"] != "io/load")
    assert all(out["t0"] <= e["mono_ns"] <= out["t1"] for e in events)  # CLOCK_MONOTONIC
    # As a recorder reads them: one call per range, its path through its domain's open ranges.
    calls = shared_intervals(tmp_path).to_pylist()
    assert sorted(
        (c["name"], c["path"], c["category"], c["producer"], c["pid"]) for c in calls
    ) == [
        ("inner", "outer/inner", "compute", "nvtx", out["pid"]),
        ("io/load", "io/load", None, "nvtx", out["pid"]),
        ("outer", "outer", None, "nvtx", out["pid"]),
        ("train/forward", "train/step/train/forward", "5", "nvtx", out["pid"]),
        ("train/step", "train/step", None, "nvtx", out["pid"]),
        ("train/tick", "train/step/train/tick", None, "nvtx", out["pid"]),
    ]
    assert all(c["end_ns"] >= c["begin_ns"] for c in calls)


FORK_SCRIPT = """
    import json, os
    import nvtx
    nvtx.push_range("before fork")
    nvtx.pop_range()
    child = os.fork()
    if child == 0:
        with nvtx.annotate("w\u00e4rme", domain="worker"):
            nvtx.push_range("child")
            nvtx.pop_range()
        os._exit(0)
    os.waitpid(child, 0)
    print(json.dumps({"pid": os.getpid(), "child": child}))
"""


def test_a_forked_child_writes_its_ranges_with_its_own_pid_and_thread(tmp_path: Path) -> None:
    pytest.importorskip("nvtx", reason="the nvtx package (the test extra) is not installed")
    library = _library()
    out = _run(FORK_SCRIPT, {EVENTS_DIR_ENV: str(tmp_path), NVTX_INJECTION_ENV: library})
    events = _events(tmp_path)
    got = {(e["pid"], e["thread_id"], e["kind"], e["scope"], e["depth"]) for e in events}
    parent, child = out["pid"], out["child"]
    assert got == {
        (parent, parent, 1, "before fork", 0),
        (parent, parent, 2, "before fork", 0),
        (child, child, 1, "worker/w\u00e4rme", 0),  # a non-ASCII name, as UTF-8 text
        (child, child, 2, "worker/w\u00e4rme", 0),
        (child, child, 1, "child", 0),  # the default domain: a stack of its own
        (child, child, 2, "child", 0),
    }


NOOP_SCRIPT = """
    import json, nvtx
    nvtx.push_range("outer")
    nvtx.pop_range()
    rng = nvtx.start_range("load")
    nvtx.end_range(rng)
    print(json.dumps({"range": rng[0] if isinstance(rng, tuple) else rng}))
"""


def test_without_an_events_directory_the_library_declines_and_nvtx_is_a_no_op(
    tmp_path: Path,
) -> None:
    pytest.importorskip("nvtx", reason="the nvtx package (the test extra) is not installed")
    library = _library()
    env = {k: v for k, v in os.environ.items() if k != EVENTS_DIR_ENV}
    attached = _run(NOOP_SCRIPT, {EVENTS_DIR_ENV: str(tmp_path), NVTX_INJECTION_ENV: library})
    assert attached["range"] not in (0, None)  # the library's range id
    done = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(NOOP_SCRIPT)],
        env={**env, NVTX_INJECTION_ENV: library},
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    declined = json.loads(done.stdout.strip().splitlines()[-1])
    assert declined["range"] == 0  # NVTX's no-op: the library was found but did not attach


TORCH_SCRIPT = f"""
    import json, os, torch
    x = torch.ones(4, requires_grad=True)
    error = None
    try:
        with torch.autograd.profiler.emit_nvtx():
            (x * 2).sum().backward()
    except (AssertionError, RuntimeError) as e:
        error = str(e)
    with open("/proc/self/maps") as f:
        loaded = os.environ["{NVTX_INJECTION_ENV}"] in f.read()
    print(json.dumps({{"cuda": torch.version.cuda, "error": error, "loaded": loaded}}))
"""


def test_torch_emit_nvtx_goes_through_nvtx_where_torch_has_it(tmp_path: Path) -> None:
    pytest.importorskip("torch", reason="torch is not installed")
    library = _library()
    out = _run(TORCH_SCRIPT, {EVENTS_DIR_ENV: str(tmp_path), NVTX_INJECTION_ENV: library})
    events = _events(tmp_path)
    if out["cuda"] is None:
        # A CPU build has no NVTX: emit_nvtx refuses ("Torch not compiled with CUDA enabled"),
        # NVTX is never initialised, the library is never loaded and no range is written.
        assert out["error"] is not None and "CUDA" in out["error"]
        assert out["loaded"] is False
        assert events == []
    else:
        assert out["error"] is None
        assert any(e["scope"].startswith("aten::") for e in events)


def test_an_annotate_with_nvtx_is_recorded_once_under_our_capture(tmp_path: Path) -> None:
    # annotate(nvtx=...) opens an NVTX range for Nsight; with our injection library as the NVTX
    # tool of a recorded command, that range would come back as a second copy of the scope.
    library = _library()
    script = """
    import json
    import stroboscope
    from stroboscope.scopes.nvtx_capture import ranges_recorded_here
    with stroboscope.annotate("step", nvtx=True):
        with stroboscope.annotate("fwd", nvtx="train"):
            pass
    print(json.dumps({"here": ranges_recorded_here()}))
    """
    env = {EVENTS_DIR_ENV: str(tmp_path), NVTX_INJECTION_ENV: library}
    assert _run(script, env) == {"here": True}
    intervals = shared_intervals(tmp_path).to_pylist()
    assert sorted((r["name"], r["producer"]) for r in intervals) == [("fwd", "py"), ("step", "py")]
    # Without our capture (no events directory) the scope's NVTX range is opened as before.
    assert _run(script, {NVTX_INJECTION_ENV: library}) == {"here": False}
