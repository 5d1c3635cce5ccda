"""samples_by_scope and summary against brute-force and hand computations.

The join is checked against a plain per-sample loop on random nested scopes from several stacks
(ties, empty and open calls included); summary figures against loops over the raw frame and
hand computations on hand-made readings (energy on real fake-NVML frames: test_scope_energy.py).
"""

from __future__ import annotations

import math
import random

import numpy as np
import pytest
from _scope_tables import Call, frame, intervals
from stroboscope.analysis.scopes import samples_by_scope, summary
from stroboscope.export._scope_text import format_summary

MS = 1_000_000


def random_calls(rng: random.Random, stacks: int, steps: int) -> list[Call]:
    """Properly nested calls per stack from a random walk of opens and closes; steps of 0 ns
    make ties, and calls left open at the end have no end."""
    calls: list[Call] = []
    for stack in range(1, stacks + 1):
        t = rng.randrange(0, 5)
        open_: list[tuple[str, int]] = []
        for _ in range(steps):
            t += rng.choice([0, 0, 1, 2, 3, 5, 8])
            if open_ and (len(open_) >= 4 or rng.random() < 0.5):
                path, begin = open_.pop()
                calls.append(
                    (
                        path.rsplit("/", 1)[-1],
                        path,
                        100 + stack,
                        stack,
                        len(open_),
                        begin,
                        t,
                        {"k": str(stack)} if rng.random() < 0.7 else {},
                    )
                )
            else:
                name = rng.choice("abc")
                path = f"{open_[-1][0]}/{name}" if open_ else name
                open_.append((path, t))
        while open_:  # the outer ones stay open
            path, begin = open_.pop()
            end = None if len(open_) == 0 and rng.random() < 0.5 else t + 1
            calls.append(
                (path.rsplit("/", 1)[-1], path, 100 + stack, stack, len(open_), begin, end, {})
            )
    return calls


def brute_join(mono: list[int], calls: list[Call], per: str) -> list[tuple[int, str | None]]:
    """Per sample and stack, the open call (begin <= t < end) that began last (deepest on ties)."""
    out: list[tuple[int, str | None]] = []
    for i, t in enumerate(mono):
        best: dict[int, Call] = {}
        for c in calls:
            end = math.inf if c[6] is None else c[6]
            if c[5] <= t < end:
                old = best.get(c[3])
                if old is None or (c[5], c[4]) > (old[5], old[4]):
                    best[c[3]] = c
        if per == "sample" and best:
            c = max(best.values(), key=lambda c: (c[5], c[4], c[3]))
            best = {c[3]: c}
        if not best:
            out.append((i, None))
        for stack in sorted(best):
            out.append((i, best[stack][1]))
    return out


@pytest.mark.parametrize("seed", range(6))
@pytest.mark.parametrize("per", ["stack", "sample"])
def test_join_matches_a_per_sample_loop(seed: int, per: str) -> None:
    rng = random.Random(seed)
    calls = random_calls(rng, stacks=3, steps=40)
    last = max(c[6] or c[5] for c in calls)
    mono = sorted(rng.randrange(-2, last + 3) for _ in range(120))
    table = samples_by_scope(frame(mono, {"x": [1.0] * len(mono)}), intervals(calls), per=per)  # type: ignore[arg-type]
    got = list(
        zip(
            [mono.index(t) for t in table.column("mono_ns").to_pylist()],
            table.column("scope").to_pylist(),
        )
    )
    # index() maps equal times to the first; compare per time instead of per row index
    expected = [(mono.index(mono[i]), path) for i, path in brute_join(mono, calls, per)]
    assert got == expected


def test_join_columns_labels_and_bare_samples() -> None:
    calls: list[Call] = [
        ("step", "step", 7, 70, 0, 10, 50, {"module": "m1"}),
        ("fwd", "step/fwd", 7, 70, 1, 20, 30, {"module": "m1", "backend": "trt"}),
        ("load", "load", 8, 80, 0, 25, 45, {}),
    ]
    table = samples_by_scope(frame([5, 22, 32, 60], {"x": [1.0, 2.0, 3.0, 4.0]}), intervals(calls))
    rows = table.select(
        [
            "mono_ns",
            "x",
            "scope",
            "scope_name",
            "thread_id",
            "stack_id",
            "scope_depth",
            "backend",
            "module",
        ]
    ).to_pylist()
    assert [tuple(r.values()) for r in rows] == [
        (5, 1.0, None, None, None, None, None, None, None),
        (22, 2.0, "step/fwd", "fwd", 7, 70, 1, "trt", "m1"),
        (32, 3.0, "step", "step", 7, 70, 0, None, "m1"),
        (32, 3.0, "load", "load", 8, 80, 0, None, None),
        (60, 4.0, None, None, None, None, None, None, None),
    ]


def test_summary_durations_and_exclusive_time() -> None:
    # step [0, 100) holds fwd [10, 40) and bwd [50, 90); fwd holds one mm [20, 25). A second
    # step [200, 260) holds fwd [210, 230). Another thread's step [0, 30) is not a child.
    calls: list[Call] = [
        ("step", "step", 1, 1, 0, 0, 100 * MS, {}),
        ("fwd", "step/fwd", 1, 1, 1, 10 * MS, 40 * MS, {}),
        ("mm", "step/fwd/mm", 1, 1, 2, 20 * MS, 25 * MS, {}),
        ("bwd", "step/bwd", 1, 1, 1, 50 * MS, 90 * MS, {}),
        ("step", "step", 1, 1, 0, 200 * MS, 260 * MS, {}),
        ("fwd", "step/fwd", 1, 1, 1, 210 * MS, 230 * MS, {}),
        ("step", "step", 2, 2, 0, 0, 30 * MS, {}),
        ("step", "step", 1, 1, 0, 300 * MS, None, {}),
    ]
    df = summary(frame([0], {"x": [0.0]}), intervals(calls))
    step, fwd, mm, bwd = (df.loc[p] for p in ("step", "step/fwd", "step/fwd/mm", "step/bwd"))
    steps = np.array([0.1, 0.06, 0.03])
    assert (step["calls"], step["open"]) == (3, 1)
    assert step["total_s"] == pytest.approx(steps.sum())
    assert step["mean_s"] == pytest.approx(steps.mean())
    assert (step["min_s"], step["max_s"]) == pytest.approx((0.03, 0.1))
    assert step["p50_s"] == pytest.approx(np.percentile(steps, 50))
    assert step["p99_s"] == pytest.approx(np.percentile(steps, 99))
    # exclusive: minus the direct children only (fwd and bwd; mm is fwd's)
    assert step["exclusive_s"] == pytest.approx(0.19 - (0.03 + 0.04 + 0.02))
    assert fwd["exclusive_s"] == pytest.approx(0.05 - 0.005)
    assert (mm["exclusive_s"], bwd["exclusive_s"]) == pytest.approx((0.005, 0.04))


def test_summary_metric_figures_match_loops_over_the_frame() -> None:
    rng = random.Random(3)
    mono = sorted(rng.sample(range(0, 1000 * MS, MS // 2), 700))
    cpu = [None if rng.random() < 0.3 else rng.uniform(0, 400) for _ in mono]
    rss = [None if rng.random() < 0.2 else rng.randrange(1 << 20, 1 << 30) for _ in mono]
    calls = random_calls(rng, stacks=2, steps=60)
    calls = [
        (*c[:5], c[5] * 10 * MS, None if c[6] is None else c[6] * 10 * MS, c[7]) for c in calls
    ]
    df = summary(frame(mono, {"proc.cpu_pct": cpu, "proc.rss_bytes": rss}), intervals(calls))
    groups: dict[tuple[str, str | None], list[Call]] = {}
    for c in calls:
        groups.setdefault((c[1], c[7].get("k")), []).append(c)
    flat = df.reset_index()
    by_key = {
        (r["scope"], None if isinstance(r["k"], float) else r["k"]): r for _, r in flat.iterrows()
    }
    assert len(by_key) == len(groups)
    for (path, k), members in groups.items():
        row = by_key[(path, k)]
        cpu_in: list[float] = []
        growth = 0.0
        rss_in_all: list[int] = []
        for c in (m for m in members if m[6] is not None):
            cpu_in += [v for t, v in zip(mono, cpu) if c[5] <= t < c[6] and v is not None]  # type: ignore[operator]
            rss_in = [v for t, v in zip(mono, rss) if c[5] <= t < c[6] and v is not None]  # type: ignore[operator]
            growth += (rss_in[-1] - rss_in[0]) if rss_in else 0
            rss_in_all += rss_in
        assert row["cpu_pct_n"] == len(cpu_in)
        assert row["rss_bytes_n"] == len(rss_in_all)
        if cpu_in:
            assert row["cpu_pct_mean"] == pytest.approx(sum(cpu_in) / len(cpu_in))
            assert row["cpu_pct_max"] == max(cpu_in)
        else:
            assert math.isnan(row["cpu_pct_mean"]) and math.isnan(row["cpu_pct_max"])
        if rss_in_all:
            assert row["rss_bytes_max"] == max(rss_in_all)
            assert row["rss_bytes_growth"] == growth
        # (stack, depth, begin, end) of the closed calls
        closed = [(m[3], m[4], m[5], m[6]) for m in members if m[6] is not None]
        durations = [(e - b) / 1e9 for _, _, b, e in closed]
        assert (row["calls"], row["open"]) == (len(closed), len(members) - len(closed))
        if durations:
            assert row["total_s"] == pytest.approx(sum(durations))
            assert row["p50_s"] == pytest.approx(np.percentile(durations, 50))
            assert row["p99_s"] == pytest.approx(np.percentile(durations, 99))
            assert (row["min_s"], row["max_s"]) == pytest.approx((min(durations), max(durations)))
        children = 0.0
        for stack, depth, b, e in closed:
            for c in calls:
                ce = c[6]
                if ce is not None and (c[3], c[4]) == (stack, depth + 1) and b <= c[5] < e:
                    children += (ce - c[5]) / 1e9
        assert row["exclusive_s"] == pytest.approx(sum(durations) - children, abs=1e-12)
    assert df.attrs["cpu_column"] == "proc.cpu_pct"
    assert not any(c.startswith(("gpu", "power", "energy")) for c in df.columns)  # absent


def test_cpu_falls_back_to_system_cpu_and_absent_figures_are_absent() -> None:
    calls: list[Call] = [("a", "a", 1, 1, 0, 0, 10, {})]
    df = summary(frame([1, 2, 3], {"cpu.util_pct": [10.0, 30.0, None]}), intervals(calls))
    assert df.attrs["cpu_column"] == "cpu.util_pct"
    assert (df.loc["a", "cpu_pct_mean"], df.loc["a", "cpu_pct_max"], df.loc["a", "cpu_pct_n"]) == (
        20.0,
        30.0,
        2,
    )
    assert "rss_bytes_max" not in df.columns and "energy_j" not in df.columns
    text = format_summary(df)
    assert text.splitlines()[0].split()[:2] == ["scope", "calls"] and "20 / 30 [2]" in text


def test_power_integral_and_counter_on_hand_made_readings() -> None:
    # Power 100 W at 0, 300 W at 10 ms, 300 W at 20 ms (read times from gpu.read_mono_ns,
    # copied to rows 1 ms later); the counter rises by the same trapezoids (mJ).
    read = [0, 10 * MS, 20 * MS]
    table = frame(
        [r + MS for r in read],
        {
            "gpu.read_mono_ns": read,
            "gpu.0.power_w": [100.0, 300.0, 300.0],
            "gpu.0.energy_mj": [0.0, 2000.0, 5000.0],
        },
    )
    calls: list[Call] = [("a", "a", 1, 1, 0, 5 * MS, 15 * MS, {})]
    # power at 5 ms: 200 W; [5, 10] ms: (200+300)/2 * 5 ms = 1.25 J; [10, 15]: 1.5 J
    by_power = summary(table.drop_columns(["gpu.0.energy_mj"]), intervals(calls))
    assert by_power.loc["a", "energy_j"] == pytest.approx(2.75)
    assert by_power.attrs["energy_method"] == {"gpu.0": "power integral"}
    assert by_power.loc["a", "power_w_n"] == 1  # one reading (at 10 ms) inside [5, 15)
    # counter at 5 ms: 1000 mJ; at 15 ms: 3500 mJ
    by_counter = summary(table, intervals(calls))
    assert by_counter.loc["a", "energy_j"] == pytest.approx(2.5)
    assert by_counter.attrs["energy_method"] == {"gpu.0": "counter"}
    outside: list[Call] = [("b", "b", 1, 1, 0, 15 * MS, 25 * MS, {})]  # past the last reading
    assert summary(table, intervals(outside))["energy_j"].isna().all()


def test_two_gpus_sum_and_per_gpu_columns() -> None:
    table = frame(
        [0, 10 * MS, 20 * MS],
        {
            "gpu.0.power_w": [100.0, 100.0, 100.0],
            "gpu.1.power_w": [50.0, 150.0, 50.0],
            "gpu.0.util_pct": [10.0, 20.0, 30.0],
            "gpu.1.util_pct": [30.0, 40.0, 50.0],
        },
    )
    df = summary(table, intervals([("a", "a", 1, 1, 0, 0, 20 * MS, {})]))
    row = df.loc["a"]
    assert row["gpu0_energy_j"] == pytest.approx(2.0)  # 100 W * 20 ms
    assert row["gpu1_energy_j"] == pytest.approx(2.0)  # (50+150)/2*10 ms * 2
    assert row["energy_j"] == pytest.approx(4.0)
    # readings at 0 and 10 ms are inside [0, 20 ms): totals 150 W and 250 W
    assert (row["power_w_mean"], row["power_w_max"]) == pytest.approx((200.0, 250.0))
    assert (row["gpu_util_pct_mean"], row["gpu_util_pct_max"]) == pytest.approx((25.0, 30.0))
    assert row["gpu1_util_pct_max"] == 40.0


def test_bad_inputs_name_the_argument() -> None:
    good = intervals([("a", "a", 1, 1, 0, 0, 10, {})])
    with pytest.raises(TypeError, match=r"samples must be a pyarrow\.Table"):
        summary([1, 2], good)
    with pytest.raises(TypeError, match=r"intervals must be a pyarrow\.Table"):
        samples_by_scope(frame([1], {}), {"a": 1})
    with pytest.raises(ValueError, match="lacks the column"):
        summary(frame([1], {}), good.drop_columns(["depth"]))
    with pytest.raises(ValueError, match="ends before it begins"):
        summary(frame([1], {}), intervals([("a", "a", 1, 1, 0, 10, 5, {})]))
    with pytest.raises(ValueError, match="per must be"):
        samples_by_scope(frame([1], {}), good, per="thread")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="sorted by mono_ns"):
        samples_by_scope(frame([2, 1], {}), good)


def test_empty_inputs_give_empty_results() -> None:
    no_calls = intervals([])
    df = summary(frame([1, 2], {"proc.cpu_pct": [1.0, 2.0]}), no_calls)
    assert len(df) == 0 and "cpu_pct_mean" in df.columns
    assert format_summary(df).splitlines()[0].split()[:2] == ["scope", "calls"]
    joined = samples_by_scope(frame([1, 2], {}), no_calls)
    assert joined.column("scope").null_count == joined.num_rows == 2
    one: list[Call] = [("a", "a", 1, 1, 0, 0, 10, {})]
    assert summary(frame([], {}), intervals(one)).loc["a", "calls"] == 1
    assert samples_by_scope(frame([], {}), intervals(one)).num_rows == 0
