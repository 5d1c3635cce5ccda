"""``stroboscope report`` in the terminal: the summary's figures checked against the recorded
data (a run on the fake /proc tree and fake NVML library with known values), and bad input."""

from __future__ import annotations

import re
import sys
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from _report_run import INLINE_ROWS, SENT_PER_ROW, record_run
from stroboscope._base.text import fmt_seconds, fmt_value
from stroboscope.analysis.column_stats import column_stats, column_stats_text
from stroboscope.cli import main
from stroboscope.export.report import build_report


@pytest.fixture(scope="module")
def run(tmp_path_factory: pytest.TempPathFactory, fake_libs: dict[str, Path]) -> Path:
    return record_run(tmp_path_factory.mktemp("report"), fake_libs["new"])


def _row(text: str, column: str) -> list[str]:
    """The cells of ``column``'s row in a printed table (split on 2+ spaces)."""
    for line in text.splitlines():
        if line.startswith(column + " "):
            return re.split(r"\s{2,}", line.strip())
    raise AssertionError(f"no row for {column} in:\n{text}")


def _valid(table: pa.Table, name: str) -> np.ndarray:
    return np.asarray(table.column(name).drop_null().to_numpy(zero_copy_only=False), float)


def test_terminal_summary_matches_the_data(run: Path, capsys: pytest.CaptureFixture[str]) -> None:
    table = pq.read_table(run)
    assert main(["report", str(run)]) == 0
    out = capsys.readouterr().out
    n = table.num_rows
    mono = table.column("mono_ns").to_numpy()
    assert f"{n} rows over {(mono[-1] - mono[0]) / 1e9:.3f} s of data" in out
    # Levels: samples explained as k/n, mean/min/max/last from the data; known values.
    cpu = _row(out, "cpu.util_pct")
    cpu_values = _valid(table, "cpu.util_pct")
    assert cpu[2:4] == ["rate", f"{len(cpu_values)}/{n}"]
    assert set(cpu_values) == {25.0} and cpu[5:] == ["25.00"] * 4
    cpu_mono = table.filter(table.column("cpu.util_pct").is_valid()).column("mono_ns")
    assert cpu[4] == fmt_seconds(float(np.median(np.diff(cpu_mono.to_numpy()))) / 1e9)
    gpu = _row(out, "gpu.0.util_pct")
    assert gpu[5:] == ["42.00"] * 4
    assert _row(out, "gpu.0.mem_used_bytes")[5] == "27.94 Gi"  # 30e9 bytes
    assert _row(out, "gpu.0.power_w")[5] == "250.00"
    assert _row(out, "gpu.0.temp_c")[5] == "65.00"
    rss = _valid(table, "proc.rss_bytes")
    assert _row(out, "proc.rss_bytes")[3] == f"{len(rss)}/{n}"
    assert _row(out, "proc.rss_bytes")[5] == fmt_value(float(rss.mean()), "bytes")
    # Counters: the total over the rows and its rate, never a mean of the running total.
    sent = _valid(table, "net.sent_bytes")
    total = sent[-1] - sent[0]
    assert total == SENT_PER_ROW * (INLINE_ROWS - 1)  # by construction of the fake tree
    row = _row(out, "net.sent_bytes")
    assert row[1:] == [
        "bytes",
        f"{len(sent)}/{n}",
        row[3],
        fmt_value(total, "bytes"),
        f"{fmt_value(total / ((mono[-1] - mono[0]) / 1e9), 'bytes')}/s",
        f"0 → {fmt_value(total, 'bytes')}",
    ]
    assert "net.sent_bytes " not in out.split("column  ")[1].split("column  ")[0]  # not a level
    # What was not there, and why; the sampler's own figures; the scopes.
    assert "no value in any row: " in out and "gpu.0.fan_pct" in out
    assert "gpus: fake NVML: 1 of 2 GPUs" in out
    assert "provenance: cmdline of the monitored process not known" in out
    assert "ticks_missed: 3" in out and "clock.anchor_uncertainty_ns: 17" in out
    assert "source cpu: every 0.004 s, reads /proc/stat" in out and "rows_lost: 0" in out
    assert "lateness_histogram" not in out  # drawn in the HTML, not listed
    assert _row(out, "train/step")[1] == "3"  # the per-scope summary, by path
    assert _row(out, "train")[1] == "0"  # still open: no closed call


def test_scope_summary_is_the_analysis_one(run: Path) -> None:
    from stroboscope.analysis.scope_summary import summary
    from stroboscope.export._scope_text import format_summary

    report = build_report([str(run)])
    s = report.series[0]
    assert s.scopes is not None
    df = summary(s.table, s.scopes)
    assert format_summary(df) in report.text()
    steps = s.scopes.filter(pa.compute.equal(s.scopes.column("name"), "step"))
    d = (steps.column("end_ns").to_numpy() - steps.column("begin_ns").to_numpy()) / 1e9
    assert df.loc["train/step", "total_s"] == pytest.approx(d.sum(), abs=1e-9)


def test_scope_counts_without_pandas(run: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "pandas", None)  # import pandas fails
    report = build_report([str(run)])
    s = report.series[0]
    assert s.scopes is not None
    text = report.text()
    steps = s.scopes.filter(pa.compute.equal(s.scopes.column("name"), "step"))
    d = (steps.column("end_ns").to_numpy() - steps.column("begin_ns").to_numpy()) / 1e9
    assert _row(text, "step")[1:3] == ["3", "0"]
    assert _row(text, "step")[3:] == [fmt_seconds(x) for x in (d.sum(), d.mean(), d.min(), d.max())]
    train = _row(text, "train")
    assert train[1:3] == ["0", "1"] and train[3] == "-"  # still open: no call, no duration


def test_column_stats_text_counts_from_metadata_kinds() -> None:
    # A hand-made table: a counter 0, 10, 30 over 2 s is 30 in all, 15/s; a gauge's mean.
    kinds = {"c": b"counter", "g": b"gauge"}
    schema = pa.schema(
        [pa.field("time", pa.timestamp("ns", tz="UTC")), pa.field("mono_ns", pa.int64())]
        + [
            pa.field(k, pa.int64(), metadata={b"unit": b"count", b"kind": v})
            for k, v in kinds.items()
        ]
    )
    t = pa.table(
        {
            "time": [0, 10**9, 2 * 10**9],
            "mono_ns": [0, 10**9, 2 * 10**9],
            "c": [0, 10, 30],
            "g": [1, None, 4],
        },
        schema=schema,
    )
    c, g = column_stats(t)
    assert (c.kind, c.total, c.rate, c.samples) == ("counter", 30.0, 15.0, 3)
    assert (g.kind, g.mean, g.samples, g.every_s, g.total) == ("gauge", 2.5, 2, 2.0, None)
    text = column_stats_text(t)
    assert _row(text, "c")[4:6] == ["30.00", "15.00 count/s"]
    assert _row(text, "g")[3:5] == ["2/3", "2 s"]


BAD_CASES = [
    ("not-a-recording", "is not a recording: neither a Parquet file nor a stroboscope spool"),
    ("not-ours.parquet", "is not a stroboscope recording: it has no time and no mono_ns column"),
    ("empty.parquet", "is an empty recording"),
    ("missing.parquet", "no such file or directory"),
    ("zero-bytes.parquet", "is empty (0 bytes): not a recording"),
    ("empty-dir", "holds no recording"),
]


@pytest.mark.parametrize(("name", "message"), BAD_CASES)
def test_bad_inputs_exit_2_naming_the_problem(
    run: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str], name: str, message: str
) -> None:
    (tmp_path / "not-a-recording").write_text("hello\n")
    pq.write_table(pa.table({"x": [1, 2]}), tmp_path / "not-ours.parquet")
    pq.write_table(pq.read_table(run).slice(0, 0), tmp_path / "empty.parquet")
    (tmp_path / "empty-dir").mkdir()
    (tmp_path / "zero-bytes.parquet").write_bytes(b"")
    assert main(["report", str(tmp_path / name)]) == 2
    err = capsys.readouterr().err
    assert err.startswith("stroboscope report: error: ") and message in err
    assert name in err


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--columns", "cpu.util_pct,nope.*"], "--columns: 'nope.*' matches no column"),
        (["--from", "1h"], "--from 1h (20"),
        (["--from", "1h"], ") is after the run's last row: the run spans"),
        (["--to", "2001-01-01T00:00:00Z"], "--to 2001-01-01T00:00:00Z (2001-01-01T00:00:00"),
        (["--to", "2001-01-01T00:00:00Z"], ") is before the run's first row: the run spans"),
        (["--from", "0.5s", "--to", "0.1s"], "--from (0.5s) is after --to (0.1s)"),
        (["--from", "yesterday"], "--from must be seconds after the run's start"),
        (["--scope", "nope"], "--scope 'nope' is not a scope of the recording(s); they have: "),
        (["--scopes", "missing.parquet"], "--scopes 'missing.parquet': no such file"),
        (["--png", __file__], "is a regular file, not a directory"),
    ],
)
def test_bad_selections_exit_2(
    run: Path, capsys: pytest.CaptureFixture[str], args: list[str], message: str
) -> None:
    assert main(["report", str(run), *args]) == 2
    err = capsys.readouterr().err
    assert message in err, err


def test_columns_and_time_range_select_rows(run: Path) -> None:
    table = pq.read_table(run)
    t = table.column("time").cast(pa.int64()).to_numpy()
    report = build_report([str(run)], columns=["cpu.*", "net.sent_bytes"], start="0", end="0.002s")
    got = report.series[0].table
    assert got.column_names == [
        "time",
        "mono_ns",
        *[c for c in table.column_names if c.startswith("cpu.")],
        "net.sent_bytes",
    ]
    want = int(((t >= t[0]) & (t <= t[0] + 2_000_000)).sum())
    assert got.num_rows == want


def test_scope_option_keeps_rows_inside_its_spans(run: Path) -> None:
    report = build_report([str(run)], scope="step")
    scopes = report.series[0].scopes
    assert scopes is not None
    steps = scopes.filter(pa.compute.equal(scopes.column("name"), "step")).to_pylist()
    mono = pq.read_table(run).column("mono_ns").to_pylist()
    want = [m for m in mono if any(s["begin_ns"] <= m <= s["end_ns"] for s in steps)]
    assert report.series[0].table.column("mono_ns").to_pylist() == want
    by_path = build_report([str(run)], scope="train/step").series[0].table
    assert by_path.column("mono_ns").to_pylist() == want


def test_metadata_without_provenance(run: Path, tmp_path: Path) -> None:
    # A recording from before provenance: rows lost from the schema metadata, nothing else.
    table = pq.read_table(run)
    bare = tmp_path / "bare.parquet"
    pq.write_table(table.replace_schema_metadata({b"stroboscope.rows_lost": b"7"}), bare)
    text = build_report([str(bare)]).text()
    assert "rows lost (overwritten before they were kept): 7" in text
    assert "not available:" not in text and "scopes:" not in text


def test_columns_go_to_their_plots() -> None:
    from stroboscope.export._groups import plot_groups

    def f(name: str, unit: str, kind: str) -> pa.Field:
        return pa.field(
            name, pa.float64(), metadata={b"unit": unit.encode(), b"kind": kind.encode()}
        )

    schema = pa.schema(
        [
            pa.field("time", pa.timestamp("ns", tz="UTC")),
            pa.field("mono_ns", pa.int64()),
            f("cpu.util_pct", "%", "rate"),
            f("cpu.0.util_pct", "%", "rate"),
            f("cpu.1.util_pct", "%", "rate"),
            f("proc.cpu_pct", "%", "rate"),
            f("mem.used_bytes", "bytes", "gauge"),
            f("cgroup.mem_limit_bytes", "bytes", "gauge"),
            f("proc.rss_bytes", "bytes", "gauge"),
            f("gpu.1.power_w", "W", "gauge"),
            f("gpu.0.util_pct", "%", "gauge"),
            f("gpu.0.energy_mj", "mJ", "counter"),
            f("gpu.0.clock_event_reasons", "bitmask", "gauge"),
            f("gpu.read_mono_ns", "ns", "gauge"),
            f("net.sent_bytes", "bytes", "counter"),
            f("net.sent_bytes_per_s", "bytes/s", "rate"),
            f("psi.io.some_pct", "%", "rate"),
            f("proc.threads", "count", "gauge"),
        ]
    )
    got = {g.key: (g.title, dict(g.panels)) for g in plot_groups(schema)}
    assert list(got) == [
        "cpu-cores",
        "cpu",
        "memory",
        "gpu-0",
        "gpu-1",
        "network",
        "pressure",
        "process",
    ]
    assert got["cpu-cores"][1] == {"%": ("cpu.0.util_pct", "cpu.1.util_pct")}
    # One panel per unit and scale (these pinned one panel per unit: a process's 0-200 %
    # beside the machine's 0-100 %, its MiB of RSS flat at 0 beside GiB of host memory).
    assert got["cpu"][1] == {
        "% of all cores": ("cpu.util_pct",),
        "% of one core": ("proc.cpu_pct",),
    }
    assert got["memory"][1] == {
        "bytes · host": ("mem.used_bytes",),
        "bytes · cgroup": ("cgroup.mem_limit_bytes",),
        "bytes · process": ("proc.rss_bytes",),
    }
    assert got["gpu-0"] == (
        "GPU 0",
        {"%": ("gpu.0.util_pct",), "mJ (total since start)": ("gpu.0.energy_mj",)},
    )
    assert got["network"][1] == {"bytes/s": ("net.sent_bytes_per_s",)}  # the counter's rate


def test_lean_memory_pool_is_jemalloc_where_pyarrow_has_it_and_given_back(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from stroboscope.export.report import lean_memory_pool

    before = pa.default_memory_pool()
    try:
        monkeypatch.setenv("ARROW_DEFAULT_MEMORY_POOL", "system")
        with lean_memory_pool() as backend:
            assert backend == before.backend_name  # a pool the user named is kept
        monkeypatch.delenv("ARROW_DEFAULT_MEMORY_POOL")
        try:
            pa.jemalloc_memory_pool()
        except NotImplementedError:
            expected = before.backend_name
        else:
            expected = "jemalloc"
        with lean_memory_pool() as backend:
            assert backend == expected == pa.default_memory_pool().backend_name
        # Given back: a process that ran the command in-process keeps its own pool (a report
        # run inside the test suite once left jemalloc to every test after it).
        assert pa.default_memory_pool().backend_name == before.backend_name
    finally:
        pa.set_memory_pool(before)
