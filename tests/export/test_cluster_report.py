"""The cross-rank report of a dataset: 4 ranks on 2 hosts written through the dataset writer,
one straggler, known step times and known clock anchors; the report's numbers against hand
computation, the straggler named and no other, the steps put on one clock."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from _cluster_dataset import (
    ANCHOR,
    ANCHOR_UNC,
    BASE_MS,
    LOCAL,
    SYNC,
    _sync,
    _values,
    make_dataset,
    step_ms,
)
from stroboscope.cli import main
from stroboscope.export._ranks_report import scope_table
from stroboscope.export.cluster_report import (
    StragglerRule,
    build_cluster_report,
    write_cluster_report,
)


@pytest.fixture(scope="module")
def dataset(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return make_dataset(tmp_path_factory.mktemp("cluster") / "ds")


def _nanmean(v: np.ndarray) -> float:
    return float(v[~np.isnan(v)].sum() / (~np.isnan(v)).sum())


def test_step_times_per_rank_equal_hand_computation(dataset: Path) -> None:
    report = build_cluster_report(dataset)
    assert report.step == "train_step" and not report.step_given  # not forward (depth 1)
    assert [(r.host, r.rank, r.local_rank) for r in report.rows] == [
        ("alpha", 0, 0),
        ("alpha", 1, 1),
        ("beta", 2, 0),
        ("beta", 3, 1),
    ]
    for row in report.rows:
        ms = sorted(step_ms(row.rank))
        assert row.step is not None
        assert (row.step.count, row.step.open) == (10, 1)
        assert row.step.median_s == pytest.approx((ms[4] + ms[5]) / 2 / 1e3, abs=1e-12)
        # 90th percentile, linear: position 0.9 * (10 - 1) = 8.1 between the 9th and 10th
        assert row.step.p90_s == pytest.approx((ms[8] + 0.1 * (ms[9] - ms[8])) / 1e3, abs=1e-12)
        assert row.step.median_s == pytest.approx(BASE_MS[row.rank] / 1e3)
        assert row.step.p90_s == pytest.approx((BASE_MS[row.rank] + 2.1) / 1e3)
        assert row.step.mean_s == pytest.approx(sum(ms) / 10 / 1e3)


def test_the_straggler_is_named_and_no_other(dataset: Path) -> None:
    report = build_cluster_report(dataset)
    (job,) = report.jobs
    # medians 100, 104, 98, 130 ms: M = 102, |m - M| = 2, 2, 4, 28, MAD = 3
    assert job.verdict.center_s == pytest.approx(0.102)
    assert job.verdict.mad_s == pytest.approx(0.003)
    assert job.verdict.threshold_s == pytest.approx(0.102 + 3 * 1.4826 * 0.003)
    assert [r.rank for r in report.stragglers] == [3]
    assert [r.rank for r in report.rows if r.straggler] == [3]
    text = report.text()
    assert "stragglers: rank 3 on beta (median 130 ms, +27.5 %)" in text
    assert "by more than 3 x 1.4826 x MAD" in text and "more than 5 %" in text
    # The percentage alone (k = 0, 1 %) also names rank 1 (104 > 102 * 1.01); never rank 0 or 2.
    loose = build_cluster_report(dataset, rule=StragglerRule(k=0, pct=1))
    assert [r.rank for r in loose.stragglers] == [3, 1]
    # A rule that asks more than 30 %: nobody.
    assert build_cluster_report(dataset, rule=StragglerRule(pct=30)).stragglers == []


def test_resource_figures_with_the_nodes_columns(dataset: Path) -> None:
    report = build_cluster_report(dataset)
    rows = {r.rank: r for r in report.rows}
    for rank, row in rows.items():
        recorder = rank - LOCAL[rank]  # local rank 0 of its host
        gpu = LOCAL[rank]
        f = row.figures
        source = "own" if recorder == rank else f"node: rank {recorder}"
        util = _nanmean(_values(recorder, f"gpu.{gpu}.util_pct"))
        assert f["gpu_util_pct"].value == pytest.approx(util)
        assert f["gpu_util_pct"].source == f["gpu_power_w"].source == source
        power = _nanmean(_values(recorder, f"gpu.{gpu}.power_w"))
        assert f["gpu_power_w"].value == pytest.approx(power)
        mem = np.nanmax(_values(recorder, f"gpu.{gpu}.mem_used_bytes"))
        assert f["gpu_mem_peak_bytes"].value == mem
        host_cpu = _nanmean(_values(recorder, "cpu.util_pct"))
        assert f["host_cpu_pct"].value == pytest.approx(host_cpu)
        assert f["host_cpu_pct"].source == source
        # Process columns are every rank's own, never its node's.
        assert f["proc_cpu_pct"].value == pytest.approx(_nanmean(_values(rank, "proc.cpu_pct")))
        assert f["proc_rss_peak_bytes"].value == np.nanmax(_values(rank, "proc.rss_bytes"))
        assert f["proc_cpu_pct"].source == "own"
        assert row.gpus == (
            f"gpu.{gpu} (its local rank)"
            if recorder == rank
            else f"gpu.{gpu} of rank {recorder} (local rank)"
        )
    assert "* its node's value" in report.text()


def test_clock_alignment_across_two_hosts(dataset: Path) -> None:
    report = build_cluster_report(dataset)
    (job,) = report.jobs
    clocks = {c.host: c for c in job.clocks}
    alpha, beta = clocks["alpha"].anchor_ns, clocks["beta"].anchor_ns
    assert alpha is not None and beta is not None and beta - alpha == -6_000_000_000_000
    for host, ranks in (("alpha", (0, 1)), ("beta", (2, 3))):
        c = clocks[host]
        assert c.anchor_ns == ANCHOR[host] and c.anchor_spread_ns == 0
        assert c.anchor_uncertainty_ns == max(ANCHOR_UNC[r] for r in ranks)
        assert (c.synchronized, c.maxerror_ns) == (True, SYNC[host]["maxerror_ns"])
        assert c.bound_ns == c.anchor_uncertainty_ns + SYNC[host]["maxerror_ns"]
    # Realtime starts: beta 2 ms after alpha at every step; the median of (0, 0, 2, 2) is 1 ms.
    a = job.alignment
    assert (a.steps, a.skew_median_ns, a.skew_max_ns) == (11, 2_000_000, 2_000_000)
    rows = {r.rank: r for r in report.rows}
    assert {k: r.lag_ns for k, r in rows.items()} == {
        0: -1_000_000,
        1: -1_000_000,
        2: 1_000_000,
        3: 1_000_000,
    }
    both = clocks["alpha"].bound_ns + clocks["beta"].bound_ns  # type: ignore[operator]
    assert {r.lag_uncertainty_ns for r in rows.values()} == {both}
    text = report.text()
    assert "start skew median 2 ms, max 2 ms" in text
    assert "1970" not in text and "2026-" in text  # anchors shown as realtime


def test_an_unsynchronised_host_is_flagged(tmp_path: Path) -> None:
    unsync = _sync("beta", synchronized=False, state="TIME_ERROR", status=64)
    unsync.update(maxerror_ns=16_000_000_000, esterror_ns=16_000_000_000)
    report = build_cluster_report(make_dataset(tmp_path / "ds", {"beta": unsync}))
    clocks = {c.host: c for c in report.jobs[0].clocks}
    assert clocks["beta"].status() == "UNSYNCHRONISED" and clocks["beta"].bound_ns is None
    assert clocks["alpha"].status() == "synchronised"
    assert all(r.lag_ns is not None and r.lag_uncertainty_ns is None for r in report.rows)
    assert any("beta: realtime clock UNSYNCHRONISED" in n for n in report.notes)
    assert "UNSYNCHRONISED" in report.text()


def test_step_given_by_name_or_path_and_unknown(dataset: Path) -> None:
    report = build_cluster_report(dataset, step="train_step/forward")
    assert report.step_given and all(r.step and r.step.count == 20 for r in report.rows)
    assert [r.rank for r in report.stragglers] == []
    with pytest.raises(ValueError, match=r"step 'nope'.*train_step"):
        build_cluster_report(dataset, step="nope")
    with pytest.raises(TypeError, match="rule must be a StragglerRule"):
        build_cluster_report(dataset, rule=3)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="k must be a number >= 0"):
        StragglerRule(k=-1)


def test_outputs_and_the_command(
    dataset: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    report = build_cluster_report(dataset)
    assert write_cluster_report(report, tmp_path / "r.json") == "json"
    data = json.loads((tmp_path / "r.json").read_text())
    assert data["format"] == "stroboscope-cluster-report" and data["step"]["name"] == "train_step"
    assert data["jobs"][0]["stragglers"] == [3]
    assert [r["step"]["median_s"] for r in data["ranks"]] == [
        pytest.approx(BASE_MS[r] / 1e3) for r in range(4)
    ]
    assert write_cluster_report(report, tmp_path / "r.md") == "markdown"
    md = (tmp_path / "r.md").read_text()
    assert "| rank | host | local |" in md and "STRAGGLER |" in md
    assert (tmp_path / "r.md").stat().st_mode & 0o777 == 0o600
    # `stroboscope report ROOT` on a dataset: the cross-rank report, not one per series.
    assert main(["report", str(dataset), "--step", "train_step", "-o", str(tmp_path / "c.md")]) == 0
    out = capsys.readouterr().out
    assert out.startswith("== cluster report: ") and "stragglers: rank 3 on beta" in out
    assert (tmp_path / "c.md").read_text() == build_cluster_report(
        dataset, step="train_step"
    ).markdown()


def test_alignment_matches_steps_by_time_not_by_call_index() -> None:
    # Rank c began recording one step late: its first start is the others' second. Paired by
    # call index it read as a whole step (100 ms) behind; in step it is not.
    import numpy as np
    from stroboscope.export._ranks_steps import align

    ms = 1_000_000
    a = np.array([0, 100, 200, 300], dtype=np.int64) * ms
    c = np.array([100, 200, 300], dtype=np.int64) * ms
    late = np.array([2, 102, 202, 302], dtype=np.int64) * ms
    got = align({("j", "a", 0): a, ("j", "b", 1): a.copy(), ("j", "c", 2): c})
    assert got.steps == 3 and got.skew_max_ns == 0
    assert set(got.lag_ns.values()) == {0}
    got = align({("j", "a", 0): a, ("j", "b", 1): a.copy(), ("j", "c", 2): late})
    assert got.steps == 4 and got.skew_median_ns == 2 * ms
    assert got.lag_ns[("j", "c", 2)] == 2 * ms and got.lag_ns[("j", "a", 0)] == 0


def test_the_scope_table_counts_every_ranks_calls(dataset: Path) -> None:
    """Per scope name over the job's ranks: the ranks that called it, closed calls (as summary()
    counts them), open calls and the closed calls' durations (4 ranks of 10 closed train_step
    calls and one open, 20 forward calls of 1 µs and 5 data calls of 4 ms each)."""
    report = build_cluster_report(dataset)
    header, rows, _ = scope_table(report, report.jobs[0])
    assert header == ("scope", "ranks", "calls", "open", "total", "mean", "min", "max")
    by_name = {r[0]: r for r in rows}
    assert by_name["train_step"][1:4] == ("4", "40", "4")
    assert by_name["forward"][1:] == ("4", "80", "0", "80 µs", "1 µs", "1 µs", "1 µs")
    assert by_name["data"][1:] == ("4", "20", "0", "80 ms", "4 ms", "4 ms", "4 ms")
    text = report.text()
    assert "\nscopes:\n" in text and text.index("scopes:") < text.index("clocks:")
    assert "| forward | 4 | 80 |" in report.markdown()
