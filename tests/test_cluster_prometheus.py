"""PrometheusExporter against a real Prometheus server, and its windows and faults on their own.

The server (Debian's ``prometheus``; ``.ci/run`` installs it) scrapes the exporter every second
on loopback; the test waits for scrapes (bounded, generous), reads the stored samples back
through the HTTP API and recomputes every checked value from the sampler's own rows: the
exporter's ``stroboscope_sampler_rows_total`` at each scrape says which rows the window held.
"""

from __future__ import annotations

import gc
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pytest
from _prometheus_server import Prometheus, prometheus
from stroboscope._base.identity import Identity, detect_identity
from stroboscope.cluster.prometheus import PrometheusExporter
from stroboscope.sampling import CoreSampler as Sampler

UUIDS = ["GPU-aaaaaaaa-0000-0000-0000-000000000000", "GPU-bbbbbbbb-0000-0000-0000-000000000000"]
ENV = {"RANK": "1", "WORLD_SIZE": "2", "LOCAL_RANK": "1", "LOCAL_WORLD_SIZE": "2"}


def identity() -> Identity:
    return detect_identity({**ENV, "STROBOSCOPE_JOB": "train-42"}, host="node-a")


LABELS = {"job": "train-42", "hostname": "node-a", "rank": "1", "local_rank": "1"}


def script() -> str:
    rng = np.random.default_rng(7)
    # The fake serves at most 64 values per key, then repeats the last: 64 readings vary.
    power = " ".join(str(int(v)) for v in rng.integers(100_000, 400_000, 64))  # mW
    energy = " ".join(str(1000 * k) for k in range(64))  # mJ, +1 J per reading
    return (
        f"devices 2\nuuid 0 {UUIDS[0]}\nuuid 1 {UUIDS[1]}\n"
        f"set 0 power {power}\nset 0 energy {energy}\nset 0 clock_reasons 1 4 1 0 4\n"
        "set 1 power 90000\nset 0 temp 65\n"
    )


@pytest.fixture
def gpus(
    fake_libs: dict[str, Path], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> Iterator[None]:
    """Two fake GPUs (tests/fake_nvml) with scripted power, energy and clock reasons."""
    gc.collect()  # the fake re-reads its script once every holder is gone
    path = tmp_path / "nvml_script.txt"
    path.write_text(script())
    monkeypatch.setenv("STROBOSCOPE_NVML_LIBRARY", str(fake_libs["new"]))
    monkeypatch.setenv("FAKE_NVML_SCRIPT", str(path))
    yield
    gc.collect()


def sampler() -> Sampler:
    sources = {"memory": 0.01, "cpu": 0.01, "network": None, "gpu": 0.05}
    return Sampler(0.01, sources=sources, gpu_samples=False, capacity=1 << 16)


def samples(
    server: Prometheus, promql: str
) -> list[tuple[dict[str, str], list[tuple[float, float]]]]:
    """Every stored sample of a range query, per series: (labels, [(time, value)])."""
    return [
        (r["metric"], [(float(t), float(v)) for t, v in r["values"]])
        for r in server.query(f"{promql}[10m]")
    ]


def windows(server: Prometheus) -> list[tuple[float, int, int]]:
    """(scrape time, first row, end row) of each scrape after the first."""
    [(labels, rows)] = samples(server, "stroboscope_sampler_rows_total")
    assert {k: labels[k] for k in LABELS} == LABELS
    ends = [(t, int(v)) for t, v in rows]
    return [(t, a, b) for (_, a), (t, b) in zip(ends, ends[1:])]


def rows_of(table: pa.Table, first_row: int, a: int, b: int, column: str) -> np.ndarray[Any, Any]:
    cells = table.column(column).slice(a - first_row, b - a).drop_null()
    return np.asarray(cells.to_numpy(zero_copy_only=False), dtype=np.float64)


def at(series: list[tuple[float, float]], t: float) -> float | None:
    return next((v for ts, v in series if ts == t), None)


def broken(first_row: int) -> Any:
    raise RuntimeError("ring unreadable")


def errors(server: Prometheus) -> float:
    [result] = server.query("stroboscope_exporter_errors_total")
    return float(result["value"][1])


def by_gpu(
    server: Prometheus, name: str
) -> dict[str, tuple[dict[str, str], list[tuple[float, float]]]]:
    return {labels["gpu"]: (labels, values) for labels, values in samples(server, name)}


def complete_windows(server: Prometheus) -> list[tuple[float, int, int]]:
    """Windows with rows whose previous scrape was stored too (a scrape that timed out took
    its window's rows with it): the stored window_rows is the difference of the row counts."""
    if not server.query("stroboscope_sampler_rows_total"):
        return []
    [(_, window_rows)] = samples(server, "stroboscope_exporter_window_rows")
    return [(t, a, b) for t, a, b in windows(server) if b > a and at(window_rows, t) == b - a]


def test_real_prometheus_stores_windowed_summaries(
    gpus: None, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    s = sampler()
    with PrometheusExporter(s, port=0, identity=identity()) as exporter:
        target = f"127.0.0.1:{exporter.port}"
        with prometheus(tmp_path, [target]) as server, s:  # sampling starts once it is up
            # Scrapes with rows in their window, however slow the machine is.
            server.wait_for("four windows", lambda: len(complete_windows(server)) >= 4)
            frame = s.snapshot()
            stored = complete_windows(server)
            power = by_gpu(server, "stroboscope_gpu_power_watts")
            power_max = by_gpu(server, "stroboscope_gpu_power_max_watts")
            energy = by_gpu(server, "stroboscope_gpu_energy_joules_total")
            reasons = by_gpu(server, "stroboscope_gpu_clock_event_reasons")
            [(mem_labels, mem)] = samples(server, "stroboscope_mem_available_bytes")
            [(_, cpu)] = samples(server, "stroboscope_cpu_util_ratio")
            [(_, cpu_max)] = samples(server, "stroboscope_cpu_util_max_ratio")
            names = server.api("label/__name__/values")
            metadata = server.api("metadata")
            up = server.query("max_over_time(up[10m])")
            # Collections that fail: still scraped (up 1), counted, and the sampler goes on.
            monkeypatch.setattr(s, "copy_since", broken)
            server.wait_for("a failed scrape", lambda: errors(server) >= 1)
            rows_at_first_failure = s.stats().rows_written
            server.wait_for("two more failed scrapes", lambda: errors(server) >= 3)
            assert s.running and s.stats().rows_written > rows_at_first_failure
            # (their errors_total was stored: those scrapes answered)
            monkeypatch.undo()
            failed = errors(server)
            server.wait_for(
                "a good scrape again", lambda: server.query("stroboscope_exporter_window_rows > 0")
            )
            # No new failures once collections work again: the count stops growing. (A failed
            # scrape that timed out was counted by the exporter but not stored by Prometheus,
            # so a stored jump of more than one is possible: compare two good scrapes.)
            settled = errors(server)
            assert settled >= failed

            def stamp() -> float:
                [latest] = server.query("timestamp(stroboscope_exporter_window_rows)")
                return float(latest["value"][1])

            seen = stamp()
            server.wait_for("a later scrape", lambda: stamp() > seen)
            assert errors(server) == settled
    table = frame.to_arrow()
    first = frame.first_row
    # Windows wholly inside the snapshot (a scrape may have come after it).
    stored = [w for w in stored if first <= w[1] and w[2] <= first + len(frame)]
    assert len(stored) >= 3
    gpu_windows = 0
    for t, a, b in stored:
        # Gauges: the mean and the max of exactly this window's rows, in base units.
        mem_rows = rows_of(table, first, a, b, "mem.available_bytes")
        assert at(mem, t) == pytest.approx(mem_rows.mean(), rel=1e-12)
        cpu_rows = rows_of(table, first, a, b, "cpu.util_pct")
        if len(cpu_rows):
            assert at(cpu, t) == pytest.approx(cpu_rows.mean() / 100, rel=1e-9, abs=1e-12)
            assert at(cpu_max, t) == pytest.approx(cpu_rows.max() / 100, rel=1e-12, abs=1e-15)
        watts = rows_of(table, first, a, b, "gpu.0.power_w")
        if len(watts):
            gpu_windows += 1
            assert at(power["0"][1], t) == pytest.approx(watts.mean(), rel=1e-12)
            assert at(power_max["0"][1], t) == watts.max()
            assert at(power["1"][1], t) == 90.0
            bits = rows_of(table, first, a, b, "gpu.0.clock_event_reasons").astype(np.int64)
            assert at(reasons["0"][1], t) == float(np.bitwise_or.reduce(bits))
        # The counter: the latest running total up to the window's end, in joules.
        total = rows_of(table, first, first, b, "gpu.0.energy_mj")
        if len(total):
            assert at(energy["0"][1], t) == total[-1] / 1000
    assert gpu_windows >= 2
    # Labels: identity on every series; dcgm-exporter's gpu / UUID / Hostname on a GPU's.
    assert {k: mem_labels[k] for k in LABELS} == LABELS and "gpu" not in mem_labels
    assert power["0"][0] == {
        **LABELS,
        "__name__": "stroboscope_gpu_power_watts",
        "instance": target,
        "gpu": "0",
        "UUID": UUIDS[0],
        "Hostname": "node-a",
    }
    assert power["1"][0]["UUID"] == UUIDS[1]
    assert [u["value"][1] for u in up] == ["1"]
    # Names: the prefix, base units, counters typed as such and named _total.
    ours = {n for n in names if n.startswith("stroboscope_")}
    assert {
        "stroboscope_mem_total_bytes",
        "stroboscope_gpu_temp_celsius",
        "stroboscope_gpu_sm_clock_hertz",
        "stroboscope_gpu_util_ratio",
        "stroboscope_net_recv_bytes_total",
        "stroboscope_exporter_errors_total",
    } <= ours
    assert not [n for n in ours if n.endswith(("_pct", "_mj", "_mhz", "_w", "_c", "_bytes_per_s"))]
    for name in ("stroboscope_gpu_energy_joules", "stroboscope_net_sent_bytes"):
        assert metadata[name][0]["type"] == "counter", metadata[name]
    assert metadata["stroboscope_gpu_power_watts"][0] == {
        "type": "gauge",
        "unit": "watts",
        "help": metadata["stroboscope_gpu_power_watts"][0]["help"],
    }
    assert "Mean over the scrape window" in metadata["stroboscope_gpu_power_watts"][0]["help"]
