"""OTelExporter end to end: a real OTLP/HTTP (and gRPC) receiver on 127.0.0.1 decodes what the
SDK sends (opentelemetry-proto), and each value is checked against the sampler's own frame over
the same rows, computed here with numpy.

Windows are made deterministic: the sampler is stopped, rows come from ``tick_now()``, and the
test asks for the collection itself (``force_flush()``), so a window is exactly the rows ticked
since the previous one.
"""

from __future__ import annotations

import os
import time
from collections.abc import Iterator
from typing import Any

import numpy as np
import pyarrow as pa
import pytest

# Skipped before anything imports them: the otel extra, and the protobufs the receiver decodes.
pytest.importorskip("opentelemetry.sdk")
pytest.importorskip("opentelemetry.proto")
from _otlp_receiver import (  # noqa: F401 - closing_fixture is a fixture
    closing_fixture,
    grpc_receiver,
    http_receiver,
    metrics,
    point,
    points,
    resource,
)
from stroboscope._base.identity import Identity
from stroboscope.cluster.otel import OTelExporter
from stroboscope.sampling import CoreSampler as Sampler

EVERY_TICK = {
    name: None for name in ("cpu", "memory", "network", "diskio", "disk", "process", "process_io")
}
WHO = Identity(
    host="node-7", rank=3, local_rank=1, world_size=8, local_world_size=4, node_rank=0,
    job="job-42", launcher="torchrun", pod="trainer-3", namespace="ml", container="main",
)  # fmt: skip


def valid(table: pa.Table, name: str) -> np.ndarray:
    return np.asarray(table.column(name).drop_null().to_numpy(zero_copy_only=False), dtype=float)


def cpu_seconds(table: pa.Table) -> float:
    """Hand computation over all rows since the sampler's first: each valid proc.cpu_pct times
    the time since the previous valid one (the first: since row 0, the first reading)."""
    rows = table.filter(table.column("proc.cpu_pct").is_valid())
    pct = valid(rows, "proc.cpu_pct")
    mono = np.asarray(rows.column("mono_ns").to_numpy(), dtype=float)
    start = float(table.column("mono_ns")[0].as_py())
    return float(np.sum(pct / 100 * np.diff(mono, prepend=start) / 1e9))


def burn(seconds: float) -> None:
    end = time.process_time() + seconds
    while time.process_time() < end:
        pass


@pytest.fixture
def receiver() -> Iterator[tuple[str, object]]:
    server, got = http_receiver()
    yield f"http://127.0.0.1:{server.server_address[1]}", got
    server.shutdown()
    server.server_close()


def test_names_units_resource_and_values_match_the_frame(
    receiver: tuple[str, object], monkeypatch: pytest.MonkeyPatch, closing: list[Any]
) -> None:
    url, got = receiver
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_METRICS_COMPRESSION", "gzip")
    s = Sampler(0.01, sources=EVERY_TICK, cpu_window=0, rate_window=0)
    closing.append(s)
    e = OTelExporter(s, endpoint=url, export_interval=3600, identity=WHO, export_timeout=30)
    closing.append(e)
    before = time.process_time()
    s.tick_now()
    after_first = time.process_time()
    for _ in range(18):
        burn(0.005)
        s.tick_now()
    burn(0.005)
    before_last = time.process_time()
    s.tick_now()
    after = time.process_time()
    assert e.force_flush()
    (request,) = got.wait_for(1)  # type: ignore[attr-defined]
    assert got.encodings == ["gzip"]  # type: ignore[attr-defined]
    table = s.copy_since(0).to_arrow()
    assert table.num_rows == 20

    res = resource(request)
    assert res["service.name"] == "stroboscope"
    assert res["host.name"] == "node-7" and res["process.pid"] == os.getpid()
    assert (res["stroboscope.rank"], res["stroboscope.local_rank"]) == (3, 1)
    assert (res["stroboscope.world_size"], res["stroboscope.node_rank"]) == (8, 0)
    assert res["stroboscope.job"] == "job-42" and res["stroboscope.launcher"] == "torchrun"
    assert res["k8s.pod.name"] == "trainer-3" and res["k8s.namespace.name"] == "ml"
    assert res["k8s.container.name"] == "main"

    got_metrics = metrics(request)
    units = {name: m.unit for name, m in got_metrics.items()}
    for name, unit in {
        "system.cpu.utilization": "1", "system.memory.usage": "By",
        "system.memory.utilization": "1", "system.network.io": "By", "system.disk.io": "By",
        "system.filesystem.usage": "By", "process.cpu.time": "s", "process.cpu.utilization": "1",
        "process.memory.usage": "By", "process.thread.count": "{thread}",
        "process.context_switches": "{context_switch}",
    }.items():  # fmt: skip
        assert units[name] == unit, name
    assert got_metrics["system.network.io"].sum.is_monotonic
    assert not got_metrics["system.memory.usage"].sum.is_monotonic
    assert got_metrics["system.cpu.utilization"].WhichOneof("data") == "gauge"

    cpu = valid(table, "cpu.util_pct")
    assert point(request, "system.cpu.utilization") == pytest.approx(cpu.mean() / 100)
    assert point(request, "stroboscope.system.cpu.utilization.max") == pytest.approx(
        cpu.max() / 100
    )
    used = valid(table, "mem.used_bytes")
    assert point(request, "system.memory.usage", system__memory__state="used") == pytest.approx(
        used.mean()
    )
    assert point(request, "stroboscope.system.memory.usage.max") == used.max()
    assert point(request, "system.memory.utilization") == pytest.approx(
        valid(table, "mem.util_pct").mean() / 100
    )
    for column, direction in (("net.sent_bytes", "transmit"), ("net.recv_bytes", "receive")):
        assert (
            point(request, "system.network.io", network__io__direction=direction)
            == valid(table, column)[-1]
        )
    assert (
        point(request, "system.disk.io", disk__io__direction="write")
        == (valid(table, "disk.write_bytes")[-1])
    )
    free, total = valid(table, "disk.free_bytes"), valid(table, "disk.total_bytes")
    mount = {"system__filesystem__mountpoint": "/"}
    assert point(
        request, "system.filesystem.usage", system__filesystem__state="free", **mount
    ) == pytest.approx(free.mean())
    assert point(
        request, "system.filesystem.usage", system__filesystem__state="used", **mount
    ) == pytest.approx(total.mean() - free.mean())

    cpus = len(os.sched_getaffinity(0))
    proc = valid(table, "proc.cpu_pct")
    assert point(request, "process.cpu.utilization") == pytest.approx(proc.mean() / 100 / cpus)
    seconds = point(request, "process.cpu.time")
    assert seconds == pytest.approx(cpu_seconds(table))
    # ... and against the process's own CPU clock: from the first tick to the last one.
    assert before_last - after_first - 0.005 <= seconds <= after - before + 0.005
    assert seconds > 0.09  # 19 x 5 ms were burnt between the ticks
    assert point(request, "process.memory.usage") == pytest.approx(
        valid(table, "proc.rss_bytes").mean()
    )
    assert point(request, "process.thread.count") == valid(table, "proc.threads")[-1]
    assert (
        point(request, "process.context_switches", process__context_switch__type="voluntary")
        == valid(table, "proc.ctx_voluntary")[-1]
    )

    # The second window holds the 10 rows ticked since, and only them; counters stay totals.
    for _ in range(10):
        burn(0.002)
        s.tick_now()
    assert e.force_flush()
    second = got.wait_for(2)[1]  # type: ignore[attr-defined]
    window = s.copy_since(20).to_arrow()
    assert window.num_rows == 10
    assert point(second, "system.cpu.utilization") == pytest.approx(
        valid(window, "cpu.util_pct").mean() / 100
    )
    assert point(second, "process.memory.usage") == pytest.approx(
        valid(window, "proc.rss_bytes").mean()
    )
    everything = s.copy_since(0).to_arrow()
    assert point(second, "process.cpu.time") == pytest.approx(cpu_seconds(everything))
    assert point(second, "process.cpu.time") > seconds
    assert (
        point(second, "system.network.io", network__io__direction="receive")
        == (valid(everything, "net.recv_bytes")[-1])
    )
    stats = e.stats()
    assert (stats.windows, stats.rows, stats.rows_lost) == (2, 30, 0)
    assert (stats.exports_ok, stats.exports_dropped) == (2, 0)
    e.close()
    s.close()


def test_meter_provider_of_the_caller_gets_the_windows(closing: list[Any]) -> None:
    from opentelemetry.sdk.metrics import MeterProvider
    from opentelemetry.sdk.metrics.export import InMemoryMetricReader

    reader = InMemoryMetricReader()
    provider = MeterProvider(metric_readers=[reader])
    s = Sampler(0.01, sources={"memory": None, "process": None})
    closing.append(s)
    e = OTelExporter(s, meter_provider=provider, identity=WHO)
    closing.append(e)
    s.tick_now(7)

    def value(data: object, name: str) -> float:
        for rm in data.resource_metrics:  # type: ignore[attr-defined]
            for sm in rm.scope_metrics:
                for m in sm.metrics:
                    if m.name == name:
                        (p,) = m.data.data_points
                        return float(p.value)
        raise AssertionError(f"{name} not collected")

    first = reader.get_metrics_data()
    table = s.copy_since(0).to_arrow()
    assert value(first, "process.memory.usage") == pytest.approx(
        valid(table, "proc.rss_bytes").mean()
    )
    s.tick_now(3)
    second = reader.get_metrics_data()
    window = s.copy_since(7).to_arrow()
    assert value(second, "system.memory.usage") == pytest.approx(
        valid(window, "mem.used_bytes").mean()
    )
    assert e.stats().exports_ok is None and e.stats().windows == 2
    # A second exporter's callbacks would be ignored by the SDK (same instrument names).
    with pytest.raises(ValueError, match="already carries an OTelExporter"):
        OTelExporter(s, meter_provider=provider, identity=WHO)
    e.close()  # flushes through the provider, which stays the caller's
    assert e.stats().windows == 3
    provider.shutdown()
    s.close()


def test_running_sampler_exports_every_interval_and_close_sends_the_rest(
    receiver: tuple[str, object], closing: list[Any]
) -> None:
    url, got = receiver
    s = Sampler(0.005, sources={"memory": None, "network": None, "process": None})
    closing.append(s)
    s.start()
    with OTelExporter(s, endpoint=url, export_interval=0.2, export_timeout=30) as e:
        closing.append(e)
        got.wait_for(3)  # type: ignore[attr-defined]
        s.stop()
    assert e.closed
    requests = got.requests  # type: ignore[attr-defined]
    totals = [point(r, "system.network.io", network__io__direction="receive") for r in requests]
    assert totals == sorted(totals)
    table = s.snapshot().to_arrow()
    assert totals[-1] == valid(table, "net.recv_bytes")[-1]
    # The final export read every row the sampler wrote: the windows cover them all, once.
    assert e.stats().rows == s.stats().rows_written == table.num_rows
    assert e.stats().windows == len(requests)
    s.close()


@pytest.fixture
def grpc_port() -> Iterator[tuple[int, object]]:
    pytest.importorskip("grpc")
    yield from grpc_receiver()


def test_grpc_receiver_gets_the_same_metrics(
    grpc_port: tuple[int, object], closing: list[Any]
) -> None:
    port, got = grpc_port
    s = Sampler(0.01, sources={"memory": None, "process": None})
    closing.append(s)
    e = OTelExporter(
        s, endpoint=f"http://127.0.0.1:{port}", protocol="grpc", export_interval=3600,
        identity=WHO, export_timeout=30,
    )  # fmt: skip
    closing.append(e)
    assert e.protocol == "grpc"
    s.tick_now(5)
    assert e.force_flush()
    (request,) = got.wait_for(1)  # type: ignore[attr-defined]
    table = s.copy_since(0).to_arrow()
    assert resource(request)["stroboscope.rank"] == 3
    assert point(request, "process.memory.usage") == pytest.approx(
        valid(table, "proc.rss_bytes").mean()
    )
    assert point(request, "system.memory.limit") == valid(table, "mem.total_bytes")[-1]
    assert [a for _, a in points(metrics(request)["process.thread.count"])] == [{}]
    e.close()
    s.close()
