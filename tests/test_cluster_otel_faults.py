"""OTelExporter when things go wrong: endpoint down then up, backoff, bounded close, bad input.

Waits are bounded (generous timeouts) and wait for a state, never for a time to pass.
"""

from __future__ import annotations

import re
import socket
import threading
import time
from collections.abc import Callable
from typing import Any

import pytest

pytest.importorskip("opentelemetry.sdk")
pytest.importorskip("opentelemetry.proto")  # the test receiver decodes with it
from _otlp_receiver import closing_fixture, http_receiver, point  # noqa: F401 - a fixture
from opentelemetry.sdk.metrics.export import (
    MetricExporter,
    MetricExportResult,
)
from stroboscope._base.identity import Identity
from stroboscope.cluster import _otel_export
from stroboscope.cluster._otel_export import GuardedExporter
from stroboscope.cluster.otel import OTelExporter
from stroboscope.sampling import CoreSampler as Sampler

WHO = Identity(host="node-1", rank=0, world_size=2, job="j")


def wait_until(what: Callable[[], bool], timeout: float = 60.0) -> None:
    deadline = time.monotonic() + timeout
    while not what():
        if time.monotonic() > deadline:
            raise AssertionError(f"not true after {timeout} s")
        time.sleep(0.02)


def free_port() -> int:
    """A loopback port nobody listens on (bound once, then released)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
    return port


def test_endpoint_down_then_up_the_sampler_never_stops_and_drops_are_counted(
    closing: list[Any],
) -> None:
    port = free_port()
    s = Sampler(0.005, sources={"memory": None, "network": None})
    closing.append(s)
    s.start()
    e = OTelExporter(
        s, endpoint=f"http://127.0.0.1:{port}", export_interval=0.1, identity=WHO,
        export_timeout=0.5,
    )  # fmt: skip
    closing.append(e)
    wait_until(lambda: (e.stats().exports_failed or 0) >= 2)
    stats = e.stats()
    assert stats.exports_ok == 0 and stats.consecutive_failures == stats.exports_failed
    assert stats.last_error and stats.backoff_s and stats.backoff_s > 0
    # The sampler went on all along: its ticks keep growing while the exports fail.
    ticks = s.stats().ticks_taken
    wait_until(lambda: s.stats().ticks_taken > ticks + 10)
    assert s.running

    server, got = http_receiver(port)
    try:
        (first, *_) = got.wait_for(1)
        wait_until(lambda: (e.stats().exports_ok or 0) >= 1)
        stats = e.stats()
        assert stats.consecutive_failures == 0 and stats.backoff_s == 0
        dropped = stats.exports_dropped or 0
        assert dropped >= 2 and dropped == (stats.exports_failed or 0) + (
            stats.exports_skipped or 0
        )
        # Every window was collected, delivered or not: the rows read cover the sampler's.
        assert stats.windows >= dropped + 1
        # Counters are cumulative: the first export that arrives carries the total so far.
        received = point(first, "system.network.io", network__io__direction="receive")
        table = s.snapshot().to_arrow()
        assert received in table.column("net.recv_bytes").drop_null().to_pylist()
        s.stop()
        e.close(timeout=30)
        assert e.stats().rows == s.stats().rows_written
    finally:
        server.shutdown()
        server.server_close()


class _Clock:
    """Stands in for the time module of _otel_export: monotonic() reads ``now[0]``."""

    def __init__(self, now: list[float]) -> None:
        self.now = now

    def monotonic(self) -> float:
        return self.now[0]


class _Failing(MetricExporter):
    """An exporter whose answer the test scripts, counting the calls it gets."""

    def __init__(self) -> None:
        super().__init__()
        self.calls = 0
        self.answer = MetricExportResult.FAILURE

    def export(self, metrics_data: Any, timeout_millis: float = 10_000, **kw: Any) -> Any:
        self.calls += 1
        if self.answer is None:
            raise ConnectionError("refused")
        return self.answer

    def force_flush(self, timeout_millis: float = 10_000) -> bool:
        return True

    def shutdown(self, timeout_millis: float = 30_000, **kwargs: Any) -> None:
        pass


def test_backoff_doubles_across_collections_and_a_success_resets_it(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    now = [1000.0]
    monkeypatch.setattr(_otel_export, "time", _Clock(now))
    inner = _Failing()
    guard = GuardedExporter(inner, interval_s=10.0)
    attempted = []
    for tick in range(40):  # one collection every 10 s, the endpoint always down
        now[0] = 1000.0 + 10.0 * tick
        before = inner.calls
        guard.export(None)  # type: ignore[arg-type]
        attempted.append(inner.calls > before)
    # Tried at ticks 0 and 1, then after pauses of 2, 4, 8 and 16 intervals.
    assert [t for t, a in enumerate(attempted) if a] == [0, 1, 3, 7, 15, 31]
    assert guard.failed == 6 and guard.skipped == 34 and guard.ok == 0
    assert guard.backoff_s() == 300.0  # 2**5 intervals (320 s) capped at 5 minutes
    # The endpoint comes back: the next attempt succeeds and the pause is gone.
    inner.answer = MetricExportResult.SUCCESS
    now[0] += guard.backoff_s()
    assert guard.export(None) == MetricExportResult.SUCCESS  # type: ignore[arg-type]
    assert guard.consecutive_failures == 0 and guard.backoff_s() == 0
    now[0] += 10.0
    calls = inner.calls
    guard.export(None)  # type: ignore[arg-type]
    assert inner.calls == calls + 1
    # An exception from the SDK exporter is a failure too, with its reason kept.
    inner.answer = None  # type: ignore[assignment]
    assert guard.export(None) == MetricExportResult.FAILURE  # type: ignore[arg-type]
    assert guard.last_error == "ConnectionError: refused"


def test_close_is_bounded_when_the_endpoint_is_down(closing: list[Any]) -> None:
    s = Sampler(0.01, sources={"memory": None})
    closing.append(s)
    e = OTelExporter(
        s, endpoint=f"http://127.0.0.1:{free_port()}", export_interval=3600, export_timeout=1.0
    )
    s.tick_now(3)
    start = time.monotonic()
    e.close(timeout=2.0)
    # Bounded: the final export's retries stop at the export timeout (a generous margin here
    # for a loaded machine; without the bound the SDK would retry for its default 10 s+).
    assert time.monotonic() - start < 30
    assert e.closed and e.stats().exports_failed == 1
    e.close()  # harmless twice


def test_bad_arguments_are_named(closing: list[Any]) -> None:
    s = Sampler(0.01, sources={"memory": None})
    closing.append(s)
    with pytest.raises(TypeError, match="sampler must be a stroboscope Sampler"):
        OTelExporter(object())  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="protocol must be one of http/protobuf, grpc"):
        OTelExporter(s, protocol="http/json")
    with pytest.raises(ValueError, match=r"export_interval must be in \(0, 86400\]"):
        OTelExporter(s, export_interval=0)
    with pytest.raises(TypeError, match="export_interval must be a number of seconds"):
        OTelExporter(s, export_interval="10")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="export_timeout must be in"):
        OTelExporter(s, export_timeout=float("nan"))
    with pytest.raises(ValueError, match="endpoint must be an http:// or https:// URL"):
        OTelExporter(s, endpoint="127.0.0.1:4318")
    with pytest.raises(ValueError, match="endpoint has an invalid port"):
        OTelExporter(s, endpoint="http://127.0.0.1:99999")
    with pytest.raises(TypeError, match="endpoint must be a URL string"):
        OTelExporter(s, endpoint=4318)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="identity must be an Identity"):
        OTelExporter(s, identity={"rank": 0})  # type: ignore[arg-type]
    from opentelemetry.sdk.metrics import MeterProvider

    with pytest.raises(TypeError, match="meter_provider must be an OpenTelemetry MeterProvider"):
        OTelExporter(s, meter_provider="sdk")  # type: ignore[arg-type]
    provider = MeterProvider()
    with pytest.raises(ValueError, match="endpoint and protocol must be None with a meter_prov"):
        OTelExporter(s, meter_provider=provider, endpoint="http://127.0.0.1:4318")
    provider.shutdown()


def test_endpoint_defaults_and_environment(
    closing: list[Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    for var in ("OTEL_EXPORTER_OTLP_ENDPOINT", "OTEL_EXPORTER_OTLP_METRICS_ENDPOINT",
                "OTEL_EXPORTER_OTLP_PROTOCOL", "OTEL_EXPORTER_OTLP_METRICS_PROTOCOL",
                "OTEL_SERVICE_NAME", "OTEL_RESOURCE_ATTRIBUTES"):  # fmt: skip
        monkeypatch.delenv(var, raising=False)
    s = Sampler(0.01, sources={"memory": None})
    closing.append(s)
    quick: dict[str, Any] = {"export_interval": 3600, "export_timeout": 0.5, "identity": WHO}
    e = OTelExporter(s, **quick)
    closing.append(e)
    assert (e.protocol, e.endpoint) == ("http/protobuf", "http://127.0.0.1:4318/v1/metrics")
    assert e.resource().attributes["service.name"] == "stroboscope"
    g = OTelExporter(s, protocol="grpc", **quick)
    closing.append(g)
    assert g.endpoint == "http://127.0.0.1:4317"
    full = OTelExporter(s, endpoint="http://127.0.0.1:4318/custom/path", **quick)
    closing.append(full)
    assert full.endpoint == "http://127.0.0.1:4318/custom/path"
    # The OTLP environment the SDK honours: the endpoint is left to it, the protocol is read,
    # and the user's service name and resource attributes win over ours.
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_ENDPOINT", "http://127.0.0.1:4317")
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_PROTOCOL", "grpc")
    monkeypatch.setenv("OTEL_SERVICE_NAME", "trainer")
    monkeypatch.setenv("OTEL_RESOURCE_ATTRIBUTES", "stroboscope.job=from-env,team=ml")
    env = OTelExporter(s, **quick)
    closing.append(env)
    assert (env.protocol, env.endpoint) == ("grpc", None)
    attrs = env.resource().attributes
    assert attrs["service.name"] == "trainer" and attrs["team"] == "ml"
    assert attrs["stroboscope.job"] == "from-env" and attrs["stroboscope.rank"] == 0


def test_rows_overwritten_before_a_collection_are_counted_and_the_rest_summarised(
    closing: list[Any],
) -> None:
    from opentelemetry.sdk.metrics import MeterProvider
    from opentelemetry.sdk.metrics.export import InMemoryMetricReader

    reader = InMemoryMetricReader()
    provider = MeterProvider(metric_readers=[reader])
    closing.append(provider)
    s = Sampler(0.01, sources={"memory": None, "process": None}, capacity=16)
    closing.append(s)
    e = OTelExporter(s, meter_provider=provider, identity=WHO)
    closing.append(e)
    s.tick_now(40)  # a ring of 16 rows: the first 24 are gone before the first collection
    data: Any = reader.get_metrics_data()
    kept = s.copy_since(0).to_arrow()
    assert kept.num_rows == 16 and kept.column("mono_ns")[0].as_py() > 0
    stats = e.stats()
    assert (stats.rows, stats.rows_lost, stats.windows) == (16, 24, 1)
    found: dict[str, Any] = {
        m.name: m.data.data_points
        for rm in data.resource_metrics
        for sm in rm.scope_metrics
        for m in sm.metrics
    }
    rss = kept.column("proc.rss_bytes").drop_null().to_numpy()
    assert found["process.memory.usage"][0].value == pytest.approx(rss.mean())
    # The first rate kept covers rows that were lost: it only starts the CPU-time integral.
    rows = kept.filter(kept.column("proc.cpu_pct").is_valid())
    pct = rows.column("proc.cpu_pct").to_numpy()
    mono = rows.column("mono_ns").to_numpy().astype(float)
    expected = float((pct[1:] / 100 * (mono[1:] - mono[:-1]) / 1e9).sum())
    assert found["process.cpu.time"][0].value == pytest.approx(expected)


BAD_TIMEOUTS: list[object] = [-1, 0, float("nan"), float("inf"), 1e300, 10**400, "x", True]


def _reader_threads() -> int:
    return sum(t.name == "OtelPeriodicExportingMetricReader" for t in threading.enumerate())


def test_bad_close_and_flush_timeouts_are_refused_before_anything_stops(
    closing: list[Any],
) -> None:
    s = Sampler(0.01, sources={"memory": None})
    closing.append(s)
    before = _reader_threads()
    e = OTelExporter(s, endpoint=f"http://127.0.0.1:{free_port()}", export_interval=3600)
    closing.append(e)
    assert _reader_threads() == before + 1
    for bad in BAD_TIMEOUTS:
        kind = TypeError if isinstance(bad, (str, bool)) else ValueError
        accepted = (
            r"a number of seconds \(int or float\)"
            if kind is TypeError
            else r"in \(0, 3600\] seconds"
        )
        for call in (e.close, e.force_flush):
            with pytest.raises(kind, match=rf"^timeout must be {accepted}, got "):
                call(timeout=bad)  # type: ignore[arg-type]
        # Nothing changed: the exporter is open and its reader thread runs.
        assert not e.closed
        assert _reader_threads() == before + 1
    e.close(timeout=5)
    assert e.closed and _reader_threads() == before


@pytest.mark.parametrize(
    "endpoint",
    [
        "http://h\n:1",
        "http://h:1\n",
        "http://a b:4318",
        "http://h\t:1",
        "http://h\x00:1",
        "http://h\u2028:1",
        "http://[::1:4318",
        "http://h%0a:1",
        "http://:4318",
        "http://h:1/v1/metrics#x",
    ],
)
def test_malformed_endpoints_are_refused(closing: list[Any], endpoint: str) -> None:
    s = Sampler(0.01, sources={"memory": None})
    closing.append(s)
    before = _reader_threads()
    with pytest.raises(ValueError, match=r"^endpoint must .*got " + re.escape(repr(endpoint))):
        OTelExporter(s, endpoint=endpoint)
    assert _reader_threads() == before
