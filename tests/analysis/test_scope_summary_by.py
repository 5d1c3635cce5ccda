"""summary(by=...): scopes grouped by name, path or chosen labels, and numeric label values
sorted as numbers; on hand-made intervals (durations known by construction) and on the README's
own example through a running Sampler."""

from __future__ import annotations

import time

import numpy as np
import pytest
import stroboscope
from _scope_tables import Call, frame, intervals
from stroboscope.analysis.scope_summary import name_durations, summary

MS = 1_000_000


def steps() -> list[Call]:
    """30 calls of "step" (labels step=k, phase eval every third, else train) of k+1 ms, each
    inside its own "epoch" call, and one "step" opened at the top level (path "step")."""
    calls: list[Call] = []
    for k in range(30):
        begin = k * 100 * MS
        phase = "eval" if k % 3 == 0 else "train"
        calls.append(("epoch", "epoch", 1, 1, 0, begin, begin + 50 * MS, {}))
        labels = {"step": str(k), "phase": phase}
        calls.append(("step", "epoch/step", 1, 1, 1, begin + MS, begin + (k + 2) * MS, labels))
    calls.append(("step", "step", 1, 2, 0, 4000 * MS, 4007 * MS, {"step": "x", "phase": "eval"}))
    return calls


SAMPLES = frame([k * MS for k in range(0, 4100, 10)], {"cpu.util_pct": [10.0] * 410})


def test_default_rows_sort_numeric_labels_as_numbers() -> None:
    df = summary(SAMPLES, intervals(steps()))
    assert df.index.names == ["scope", "phase", "step"]
    inner = df.xs("epoch/step", level="scope")
    assert list(inner.index) == [("eval", str(k)) for k in range(0, 30, 3)] + [
        ("train", str(k)) for k in range(30) if k % 3
    ]
    assert list(inner["calls"]) == [1] * 30  # the default: a row per label value
    # Numbers first, as numbers, then text (the level holds "x" too).
    by_step = summary(SAMPLES, intervals(steps()), by=["step"])
    assert list(by_step.index[:-1]) == [str(k) for k in range(30)] + ["x"]
    assert by_step.index[-1] is None or np.isnan(by_step.index[-1])  # epoch: no step label


def test_by_name_groups_every_call_of_a_name() -> None:
    df = summary(SAMPLES, intervals(steps()), by="name")
    assert df.index.name == "name" and list(df.index) == ["epoch", "step"]
    durations = np.array([(k + 1) * MS for k in range(30)] + [7 * MS]) / 1e9
    row = df.loc["step"]
    assert row["calls"] == 31 and row["total_s"] == pytest.approx(durations.sum())
    ordered = np.sort(durations)  # p50, p99: linear between order statistics, by hand
    assert row["p50_s"] == pytest.approx(ordered[15])
    assert row["p99_s"] == pytest.approx(ordered[29] + 0.7 * (ordered[30] - ordered[29]))
    assert row["cpu_pct_mean"] == pytest.approx(10.0)


def test_the_durations_without_pandas_are_summarys() -> None:
    # One home for per-scope durations: the table made without pandas (per name, in order of
    # first call; the report's scope table then) gives summary(by="name")'s figures, an open
    # call counted apart and left out of every duration.
    calls = [*steps(), ("step", "step", 1, 3, 0, 5000 * MS, None, {})]
    df = summary(SAMPLES, intervals(calls), by="name")
    names, figures = name_durations(intervals(calls).select(["name", "begin_ns", "end_ns"]))
    assert names == ["epoch", "step"]
    for i, name in enumerate(names):
        for column, values in figures.items():
            assert values[i] == df.loc[name, column], (name, column)
    step = names.index("step")
    assert (figures["calls"][step], figures["open"][step]) == (31, 1)
    durations = np.array([(k + 1) * MS for k in range(30)] + [7 * MS]) / 1e9
    assert figures["min_s"][step] == durations.min() and figures["max_s"][step] == durations.max()
    assert figures["p99_s"][step] == pytest.approx(np.percentile(durations, 99))
    # Summed in ns, as the edges are: 30 calls of 50 ms are 1.5 s, 50 ms each, exactly.
    epoch = names.index("epoch")
    assert (figures["total_s"][epoch], figures["mean_s"][epoch]) == (1.5, 0.05)


def test_by_path_and_chosen_labels() -> None:
    df = summary(SAMPLES, intervals(steps()), by=["path", "phase"])
    assert df.index.names == ["scope", "phase"]
    assert df.loc[("epoch/step", "eval"), "calls"] == 10
    assert df.loc[("epoch/step", "train"), "calls"] == 20
    assert df.loc[("step", "eval"), "calls"] == 1
    epoch = df.xs("epoch", level="scope")
    assert len(epoch) == 1 and np.isnan(epoch.index[0])  # no phase label: kept as NaN
    # epoch's exclusive time is its own less its direct children's, whatever the grouping.
    child = sum((k + 1) * MS for k in range(30)) / 1e9
    assert float(epoch["exclusive_s"].iloc[0]) == pytest.approx(30 * 0.05 - child)


@pytest.mark.parametrize("by", ["nope", ["name", "name"], [], 3, ["name", None]])
def test_bad_by_names_the_argument(by: object) -> None:
    accepted = r"\['path', 'name', 'phase', 'step', 'function'\]"
    with pytest.raises(ValueError, match=r"by must be one of " + accepted):
        summary(SAMPLES, intervals(steps()), by=by)  # type: ignore[arg-type]


def test_the_readme_example_groups_by_name() -> None:
    s = stroboscope.Sampler(interval=0.001, edge_rows=True, sources=["memory"])
    with s, stroboscope.labels(module="resnet50", backend="eager"):
        for step in range(12):
            with stroboscope.annotate("step", step=step):
                time.sleep(0.0005)
    per_step = s.summary()
    assert list(per_step.index.get_level_values("step")) == [str(k) for k in range(12)]
    by_name = s.summary(by="name")
    assert list(by_name.index) == ["step"] and by_name.loc["step", "calls"] == 12
    intervals_ = s.scope_intervals()
    total = sum(e - b for b, e in zip(intervals_["begin_ns"].to_pylist(),
                                      intervals_["end_ns"].to_pylist())) / 1e9  # fmt: skip
    assert by_name.loc["step", "total_s"] == pytest.approx(total)
    module = s.summary(by=["name", "module"])
    assert module.loc[("step", "resnet50"), "calls"] == 12


def test_a_label_named_like_a_column_keeps_both() -> None:
    """Labels ``calls`` and ``total_s`` (allowed: not columns of the scope tables) are index
    levels ``label.calls`` and ``label.total_s``: ``reset_index()`` keeps the counts too."""
    calls: list[Call] = [
        ("s", "s", 1, 1, 0, k * 10 * MS, (k * 10 + 2) * MS, {"calls": "5", "total_s": "x"})
        for k in range(3)
    ]
    for by in (None, ["calls"]):
        df = summary(SAMPLES, intervals(calls), by=by)
        flat = df.reset_index()
        assert list(flat["calls"]) == [3] and list(flat["label.calls"]) == ["5"]
        if by is None:
            assert df.index.names == ["scope", "label.calls", "label.total_s"]
            assert list(flat["total_s"]) == [pytest.approx(0.006)]


@pytest.mark.parametrize("by", [5, 2.5, {"name": 1}.keys()])
def test_a_samplers_summary_names_a_bad_by(by: object) -> None:
    # The sampler's own summary looks into ``by`` (for "function") before the table math does:
    # what is neither a name nor a list of names is refused there in the same words.
    s = stroboscope.Sampler(0.01, sources=["memory"])
    s.start()
    try:
        with stroboscope.annotate("x"):
            pass
    finally:
        s.stop()
    try:
        with pytest.raises(ValueError, match=r"by must be one of \['path', 'name'.* got "):
            s.summary(by=by)  # type: ignore[arg-type]
    finally:
        s.close()
