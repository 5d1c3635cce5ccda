"""The column → Prometheus mapping (names, labels, units, types) and the window summaries,
checked by hand against the ecosystem's conventions and against docs/metrics.md's columns."""

from __future__ import annotations

import re
from pathlib import Path

import pyarrow as pa
import pytest
from stroboscope.cluster._prom_names import (
    ColumnInfo,
    family_names,
    plan_series,
    series_for,
    split_name,
    why_not_served,
)
from stroboscope.cluster._prom_window import summarise, summarise_column

METRICS_MD = Path(__file__).parent.parent / "docs" / "metrics.md"
NAME = re.compile(r"^[a-zA-Z_:][a-zA-Z0-9_:]*$")


def col(name: str, unit: str, kind: str = "gauge") -> ColumnInfo:
    return ColumnInfo(name, unit, kind, f"help of {name}.")


@pytest.mark.parametrize(
    ("name", "unit", "kind", "family", "max_family", "labels", "mul_div"),
    [
        (
            "cpu.util_pct",
            "%",
            "rate",
            "stroboscope_cpu_util_ratio",
            "stroboscope_cpu_util_max_ratio",
            (),
            (1, 100),
        ),
        (
            "cpu.3.util_pct",
            "%",
            "rate",
            "stroboscope_cpu_core_util_ratio",
            "stroboscope_cpu_core_util_max_ratio",
            (("cpu", "3"),),
            (1, 100),
        ),
        (
            "mem.total_bytes",
            "bytes",
            "gauge",
            "stroboscope_mem_total_bytes",
            "stroboscope_mem_total_max_bytes",
            (),
            (1, 1),
        ),
        ("net.sent_bytes", "bytes", "counter", "stroboscope_net_sent_bytes", "", (), (1, 1)),
        (
            "net.sent_bytes_per_s",
            "bytes/s",
            "rate",
            "stroboscope_net_sent_bytes_per_second",
            "stroboscope_net_sent_max_bytes_per_second",
            (),
            (1, 1),
        ),
        (
            "gpu.0.power_w",
            "W",
            "gauge",
            "stroboscope_gpu_power_watts",
            "stroboscope_gpu_power_max_watts",
            (("gpu", "0"),),
            (1, 1),
        ),
        (
            "gpu.1.energy_mj",
            "mJ",
            "counter",
            "stroboscope_gpu_energy_joules",
            "",
            (("gpu", "1"),),
            (1, 1000),
        ),
        (
            "gpu.0.temp_c",
            "celsius",
            "gauge",
            "stroboscope_gpu_temp_celsius",
            "stroboscope_gpu_temp_max_celsius",
            (("gpu", "0"),),
            (1, 1),
        ),
        (
            "gpu.7.sm_clock_mhz",
            "MHz",
            "gauge",
            "stroboscope_gpu_sm_clock_hertz",
            "stroboscope_gpu_sm_clock_max_hertz",
            (("gpu", "7"),),
            (1e6, 1),
        ),
        (
            "gpu.0.mig.2.mem_used_bytes",
            "bytes",
            "gauge",
            "stroboscope_gpu_mig_mem_used_bytes",
            "stroboscope_gpu_mig_mem_used_max_bytes",
            (("gpu", "0"), ("mig", "2")),
            (1, 1),
        ),
        (
            "threads.top1.cpu_pct",
            "%",
            "rate",
            "stroboscope_threads_top_cpu_ratio",
            "stroboscope_threads_top_cpu_max_ratio",
            (("top", "1"),),
            (1, 100),
        ),
        (
            "proc.ctx_voluntary",
            "count",
            "counter",
            "stroboscope_proc_ctx_voluntary",
            "",
            (),
            (1, 1),
        ),
        (
            "proc.threads",
            "count",
            "gauge",
            "stroboscope_proc_threads",
            "stroboscope_proc_threads_max",
            (),
            (1, 1),
        ),
        ("load.1m", "1", "gauge", "stroboscope_load_1m", "stroboscope_load_1m_max", (), (1, 1)),
        (
            "cgroup.cpu_used_cores",
            "cores",
            "rate",
            "stroboscope_cgroup_cpu_used_cores",
            "stroboscope_cgroup_cpu_used_max_cores",
            (),
            (1, 1),
        ),
        # Units no column has today (the table serves the next ones without a new line per column)
        (
            "gpu.0.throttle_ns",
            "ns",
            "counter",
            "stroboscope_gpu_throttle_seconds",
            "",
            (("gpu", "0"),),
            (1, 1e9),
        ),
        (
            "gpu.0.board_mw",
            "mW",
            "gauge",
            "stroboscope_gpu_board_watts",
            "stroboscope_gpu_board_max_watts",
            (("gpu", "0"),),
            (1, 1000),
        ),
    ],
)
def test_names_units_and_labels_follow_the_conventions(
    name: str,
    unit: str,
    kind: str,
    family: str,
    max_family: str,
    labels: tuple[tuple[str, str], ...],
    mul_div: tuple[float, float],
) -> None:
    s = series_for(col(name, unit, kind))
    assert s is not None
    assert (s.name, s.max_name, s.labels) == (family, max_family, labels)
    assert (s.mul, s.div) == mul_div
    assert s.kind == ("counter" if kind == "counter" else "gauge")
    assert s.column == name
    # A counter is exposed with _total (prometheus_client adds it to the family name).
    if kind == "counter":
        assert family_names([s]) == [family + "_total"]
        assert "Running total" in s.help
    else:
        assert "Mean over the scrape window" in s.help


def test_values_are_converted_to_base_units() -> None:
    pct = series_for(col("gpu.0.util_pct", "%"))
    mj = series_for(col("gpu.0.energy_mj", "mJ", "counter"))
    mhz = series_for(col("gpu.0.sm_clock_mhz", "MHz"))
    ns = series_for(col("x.busy_ns", "ns", "counter"))
    assert pct is not None and mj is not None and mhz is not None and ns is not None
    assert pct.scaled(42.0) == pytest.approx(0.42, rel=1e-15)
    assert mj.scaled(3000) == pytest.approx(3.0, rel=1e-15)
    assert mhz.scaled(1755) == pytest.approx(1.755e9, rel=1e-15)
    assert ns.scaled(1_500_000_000) == pytest.approx(1.5, rel=1e-15)


def test_split_name() -> None:
    assert split_name("cpu.3.util_pct") == (["cpu", "core", "util_pct"], [("cpu", "3")])
    assert split_name("gpu.0.mig.1.mem_total_bytes") == (
        ["gpu", "mig", "mem_total_bytes"],
        [("gpu", "0"), ("mig", "1")],
    )
    assert split_name("load.15m") == (["load", "15m"], [])
    assert split_name("psi.memory.full_pct") == (["psi", "memory", "full_pct"], [])


def test_what_is_not_served_and_why() -> None:
    assert "clock reading" in str(why_not_served(col("gpu.read_mono_ns", "ns")))
    assert "clock reading" in str(why_not_served(col("mono_ns", "ns")))
    assert "identifier" in str(why_not_served(col("threads.top0.tid", "id")))
    assert "'furlongs'" in str(why_not_served(col("x.y_furlongs", "furlongs")))
    assert "kind 'histogram'" in str(why_not_served(col("x.y_bytes", "bytes", "histogram")))
    assert series_for(col("threads.top0.tid", "id")) is None
    bitmask = series_for(col("gpu.0.clock_event_reasons", "bitmask"))
    assert bitmask is not None and bitmask.kind == "bitmask" and bitmask.max_name == ""


def test_clashing_columns_keep_the_first_and_say_why() -> None:
    cols = [
        col("gpu.0.power_w", "W"),
        col("gpu.0.power_mw", "mW"),  # the same family and labels
        col("gpu.0.power_max_w", "W"),  # its family is gpu.0.power_w's max
    ]
    served, skipped = plan_series(cols)
    assert [s.column for s in served] == ["gpu.0.power_w"]
    assert "same labels as column gpu.0.power_w" in skipped["gpu.0.power_mw"]
    assert "already another measure's" in skipped["gpu.0.power_max_w"]


def _documented_columns() -> list[ColumnInfo]:
    rows = []
    for line in METRICS_MD.read_text().splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) == 6 and cells[0].startswith("`") and cells[2] != "type":
            name = cells[0].strip("`").replace("{i}", "0").replace("{j}", "1")
            rows.append(ColumnInfo(name, cells[1], cells[3], cells[5]))
    return rows


def test_every_documented_column_maps_or_has_a_reason() -> None:
    columns = _documented_columns()
    assert len(columns) > 80  # the whole table was read
    served, skipped = plan_series(columns)
    # Only clock readings and thread ids are left out; everything else has a family.
    clocks = {"time", "mono_ns", "gpu.read_mono_ns", "gpu.0.read_mono_ns", "gpu_gpm.read_mono_ns"}
    assert set(skipped) == clocks | {f"threads.top{i}.tid" for i in range(4)}
    assert len(served) == len(columns) - len(skipped)
    names = family_names(served)
    assert len(names) == len(set(names))
    base_units = ("_ratio", "_bytes", "_bytes_per_second", "_watts", "_celsius", "_hertz", "_cores")
    by_column = {s.column: s for s in served}
    for c in columns:
        s = by_column.get(c.name)
        if s is None:
            continue
        assert NAME.match(s.name) and s.name.startswith("stroboscope_"), s.name
        assert "." not in s.name and not re.search(r"_(pct|mj|mhz|w|c)$", s.name), s.name
        if c.kind == "counter":
            assert s.kind == "counter" and s.name.endswith(
                ("_bytes", "_joules", "_voluntary", "_involuntary")
            )
        elif c.unit in ("count", "1", "bitmask"):
            assert not s.name.endswith(base_units), s.name
        else:
            assert s.name.endswith(base_units), s.name
    # One family per measure: both GPUs' power is one family with a gpu label.
    two = plan_series([col("gpu.0.power_w", "W"), col("gpu.1.power_w", "W")])[0]
    assert {s.name for s in two} == {"stroboscope_gpu_power_watts"}
    assert [s.labels for s in two] == [(("gpu", "0"),), (("gpu", "1"),)]


def test_window_summaries_by_hand() -> None:
    gauge = series_for(col("gpu.0.util_pct", "%"))
    counter = series_for(col("gpu.0.energy_mj", "mJ", "counter"))
    bits = series_for(col("gpu.0.clock_event_reasons", "bitmask"))
    assert gauge is not None and counter is not None and bits is not None
    util = pa.array([10.0, None, 30.0, float("nan"), 50.0])
    s = summarise_column(util, gauge)
    assert s is not None and s.count == 3
    assert s.value == pytest.approx(0.30, rel=1e-12) and s.max == pytest.approx(0.50, rel=1e-12)
    energy = pa.chunked_array([[0, 1000, None], [2500, None]], pa.int64())
    e = summarise_column(energy, counter)
    assert e is not None and e.value == 2.5 and e.max is None  # the latest total, in joules
    reasons = pa.array([1, None, 4, 1], pa.int64())
    r = summarise_column(reasons, bits)
    assert r is not None and r.value == 5.0
    assert summarise_column(pa.array([None, None], pa.float64()), gauge) is None
    table = pa.table({"gpu.0.util_pct": util, "gpu.0.energy_mj": pa.array([None] * 5, pa.int64())})
    assert set(summarise(table, [gauge, counter, bits])) == {"gpu.0.util_pct"}


def render_table() -> str:
    """The column → metric table of docs/prometheus.md, from the mapping itself."""
    lines = [
        "| column | metric (window mean or running total) | window max | type | labels from the "
        "name | factor |",
        "| --- | --- | --- | --- | --- | --- |",
    ]
    served, skipped = plan_series(_documented_columns())
    by_column = {s.column: s for s in served}
    for c in _documented_columns():
        generic = ".".join(
            "{i}" if t == "0" else "{j}" if t == "1" else t for t in c.name.split(".")
        )
        s = by_column.get(c.name)
        if s is None:
            lines.append(f"| `{generic}` | not served: {skipped[c.name]} | | | | |")
            continue
        labels = ", ".join(name for name, _ in s.labels) or "-"
        name = s.name + ("_total" if s.kind == "counter" else "")
        top = f"`{s.max_name}`" if s.max_name else "-"
        factor = (
            "1"
            if (s.mul, s.div) == (1.0, 1.0)
            else (f"x {s.mul:g}" if s.div == 1 else f"/ {s.div:g}")
        )
        lines.append(f"| `{generic}` | `{name}` | {top} | {s.kind} | {labels} | {factor} |")
    return "\n".join(lines) + "\n"


def test_docs_table_is_the_mapping() -> None:
    doc = (Path(__file__).parent.parent / "docs" / "prometheus.md").read_text()
    begin, end = "<!-- table: begin -->\n", "<!-- table: end -->"
    assert begin in doc and end in doc
    committed = doc[doc.index(begin) + len(begin) : doc.index(end)]
    assert committed == render_table(), (
        "docs/prometheus.md's table is out of date:\n" + render_table()
    )


def test_disk_paths_are_a_mountpoint_label_not_part_of_the_name() -> None:
    # node_exporter's convention: one family per measure, the filesystem as a label.
    from stroboscope.sampling import CoreSampler as Sampler

    s = Sampler(0.01, sources=["disk"], disk_paths=["/", "/tmp"])
    try:
        columns = [ColumnInfo(c.name, c.unit, c.kind, c.help) for c in s.columns]
    finally:
        s.close()
    served, _ = plan_series(columns)
    used = [x for x in served if x.column.endswith("used_pct")]
    assert {x.name for x in used} == {"stroboscope_disk_used_ratio"}
    assert sorted(dict(x.labels)["mountpoint"] for x in used) == ["/", "/tmp"]
    assert not [x for x in served if "tmp" in x.name]


def test_the_sender_names_a_column_as_the_exporter_does() -> None:
    # One naming per target: the Prometheus sender's gauge for a column key is the exporter's
    # family, with its labels, in the same base unit (a % as a 0 to 1 ratio).
    from stroboscope.analysis.prom_names import unit_of
    from stroboscope.senders.prometheus import gauge_name

    served, _ = plan_series(_documented_columns())
    checked = 0
    for s in served:
        column = next(c for c in _documented_columns() if c.name == s.column)
        if s.column.startswith("disk.") or unit_of(s.column) != column.unit:
            continue  # no unit in the name (a count), or a disk's mountpoint label
        assert gauge_name(s.column) == (s.name, s.labels, s.mul / s.div), s.column
        checked += 1
    assert checked > 40
    assert gauge_name("cpu.util_pct") == ("stroboscope_cpu_util_ratio", (), 0.01)
    assert gauge_name("cpu.3.util_pct") == (
        "stroboscope_cpu_core_util_ratio",
        (("cpu", "3"),),
        0.01,
    )
    assert gauge_name("rank0.gpu.0.gpu") == ("stroboscope_rank0_gpu_0_gpu", (), 1.0)  # not a column
