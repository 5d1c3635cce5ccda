"""merge_into_trace on a live torch.profiler trace: our scopes and torch's ops on one clock.

Each of 200 scopes (``stroboscope.annotate``) holds exactly one small ``torch.mm``; the op begins
after the scope's begin edge and ends before its end edge, on any clock. With torch's clock minus
ours = d, the merged trace shows each begin gap as (its true gap + d) and each end gap as (its
true gap - d), true gaps >= 0: the smallest begin gap bounds d from above and the smallest end
gap from below. Both under 50 µs: the two timelines agree within 50 µs (10 to 20 µs here; the
gaps are the Python between an edge and torch's dispatch, so a heavily loaded machine stretches
them, and the smallest of many calls is the one least disturbed).
"""

from __future__ import annotations

import json
import threading
import time
from pathlib import Path

import numpy as np
import stroboscope
from _binaries import python_module
from stroboscope.export.traces import merge_into_trace

CALLS = 200


def test_scopes_and_torch_ops_agree_within_50_us(tmp_path: Path) -> None:
    torch = python_module("torch", install="pip install torch==2.13.0")
    from torch.profiler import ProfilerActivity, profile

    a = torch.randn(16, 16)
    mm = torch.mm
    with stroboscope.Sampler(0.01, sources=["process"]) as s:
        with profile(activities=[ProfilerActivity.CPU]) as prof:
            for k in range(CALLS):
                with stroboscope.annotate("mm", k=k):
                    mm(a, a)
                time.sleep(0.0002)
        intervals = s.scope_intervals()
        samples = s.snapshot().to_arrow()
    prof.export_chrome_trace(str(tmp_path / "torch.json"))
    merge_into_trace(tmp_path / "torch.json", tmp_path / "merged.json", samples, intervals)
    events = json.loads((tmp_path / "merged.json").read_text())["traceEvents"]
    scopes = sorted((e for e in events if e.get("cat") == "scope"), key=lambda e: e["ts"])
    ops = sorted(
        (e for e in events if e.get("cat") == "cpu_op" and e["name"] == "aten::mm"),
        key=lambda e: e["ts"],
    )
    assert len(scopes) == len(ops) == CALLS
    assert [e["args"]["k"] for e in scopes] == [str(k) for k in range(CALLS)]
    me = threading.get_native_id()
    assert {e["tid"] for e in scopes} == {e["tid"] for e in ops} == {me}  # one thread id too
    begin = np.array([o["ts"] - sc["ts"] for sc, o in zip(scopes, ops)])  # µs
    end = np.array([(sc["ts"] + sc["dur"]) - (o["ts"] + o["dur"]) for sc, o in zip(scopes, ops)])
    assert begin.min() < 50 and end.min() < 50, (begin, end)  # -end.min() < d < begin.min()
    assert begin.min() > -50 and end.min() > -50  # each op inside its own scope
    # ours under a pid of our own, torch's events as they were
    assert {e["pid"] for e in scopes}.isdisjoint({e["pid"] for e in ops})
