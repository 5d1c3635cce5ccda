"""A small OTLP metrics receiver for tests: OTLP/HTTP (POST /v1/metrics, protobuf, gzip or
not) on 127.0.0.1, and OTLP/gRPC (MetricsService/Export). Each request is decoded with
opentelemetry-proto into an ``ExportMetricsServiceRequest`` and kept, in arrival order.

No OpenTelemetry Collector binary can be installed here (none on PyPI; Debian packages only the
Go SDK, golang-opentelemetry-otel-dev), so the tests speak to this one instead.
"""

from __future__ import annotations

import gzip
import http.server
import threading
import time
import zlib
from collections.abc import Iterator
from concurrent import futures
from typing import Any

import pytest
from opentelemetry.proto.collector.metrics.v1 import metrics_service_pb2 as svc
from opentelemetry.proto.common.v1.common_pb2 import AnyValue

Attrs = dict[str, Any]


def _value(v: AnyValue) -> Any:
    kind = v.WhichOneof("value")
    return getattr(v, kind) if kind else None


def attrs_of(kvs: Any) -> Attrs:
    return {kv.key: _value(kv.value) for kv in kvs}


class Received:
    """Requests kept so far, with waits bounded by a timeout."""

    def __init__(self) -> None:
        self.requests: list[svc.ExportMetricsServiceRequest] = []
        self.encodings: list[str] = []
        self._cond = threading.Condition()

    def add(self, request: svc.ExportMetricsServiceRequest, encoding: str) -> None:
        with self._cond:
            self.requests.append(request)
            self.encodings.append(encoding)
            self._cond.notify_all()

    def wait_for(self, count: int, timeout: float = 60.0) -> list[svc.ExportMetricsServiceRequest]:
        deadline = time.monotonic() + timeout
        with self._cond:
            while len(self.requests) < count:
                left = deadline - time.monotonic()
                if left <= 0:
                    raise AssertionError(f"{len(self.requests)} OTLP requests after {timeout} s")
                self._cond.wait(left)
            return list(self.requests)


def resource(request: svc.ExportMetricsServiceRequest) -> Attrs:
    (rm,) = request.resource_metrics
    return attrs_of(rm.resource.attributes)


def metrics(request: svc.ExportMetricsServiceRequest) -> dict[str, Any]:
    """Metric name -> the proto Metric (one resource, any scopes)."""
    out = {}
    for rm in request.resource_metrics:
        for sm in rm.scope_metrics:
            for m in sm.metrics:
                out[m.name] = m
    return out


def points(metric: Any) -> list[tuple[float, Attrs]]:
    """(value, attributes) of each data point of a gauge or sum."""
    data = getattr(metric, metric.WhichOneof("data"))
    out = []
    for p in data.data_points:
        v = p.as_double if p.WhichOneof("value") == "as_double" else p.as_int
        out.append((float(v), attrs_of(p.attributes)))
    return out


def point(request: svc.ExportMetricsServiceRequest, name: str, **want: Any) -> float:
    """The value of the one point of ``name`` whose attributes include ``want`` (dots as __)."""
    wanted = {k.replace("__", "."): v for k, v in want.items()}
    found = [
        v
        for v, a in points(metrics(request)[name])
        if all(a.get(k) == x for k, x in wanted.items())
    ]
    assert len(found) == 1, f"{name} {wanted}: {found}"
    return found[0]


class _Handler(http.server.BaseHTTPRequestHandler):
    received: Received

    def do_POST(self) -> None:
        body = self.rfile.read(int(self.headers.get("Content-Length", "0")))
        encoding = self.headers.get("Content-Encoding", "") or "identity"
        if encoding == "gzip":
            body = gzip.decompress(body)
        elif encoding == "deflate":
            body = zlib.decompress(body)
        if self.path != "/v1/metrics":
            self.send_response(404)
            self.end_headers()
            return
        request = svc.ExportMetricsServiceRequest()
        request.ParseFromString(body)
        self.received.add(request, encoding)
        reply = svc.ExportMetricsServiceResponse().SerializeToString()
        self.send_response(200)
        self.send_header("Content-Type", "application/x-protobuf")
        self.send_header("Content-Length", str(len(reply)))
        self.end_headers()
        self.wfile.write(reply)

    def log_message(self, format: str, *args: Any) -> None:
        pass


def http_receiver(port: int = 0) -> tuple[http.server.ThreadingHTTPServer, Received]:
    """Start an OTLP/HTTP receiver on 127.0.0.1:``port`` (0: any); shut it down when done."""
    received = Received()
    handler = type("Handler", (_Handler,), {"received": received})
    server = http.server.ThreadingHTTPServer(("127.0.0.1", port), handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server, received


def grpc_receiver() -> Iterator[tuple[int, Received]]:
    """An OTLP/gRPC receiver on 127.0.0.1 (a generator: for a pytest fixture)."""
    import grpc  # type: ignore[import-untyped]
    from opentelemetry.proto.collector.metrics.v1 import metrics_service_pb2_grpc as svc_grpc

    received = Received()

    class Service(svc_grpc.MetricsServiceServicer):  # type: ignore[misc,unused-ignore]
        def Export(self, request: Any, context: Any) -> Any:
            received.add(request, "grpc")
            return svc.ExportMetricsServiceResponse()

    server = grpc.server(futures.ThreadPoolExecutor(max_workers=2))
    svc_grpc.add_MetricsServiceServicer_to_server(Service(), server)  # type: ignore[no-untyped-call]
    port = server.add_insecure_port("127.0.0.1:0")
    server.start()
    try:
        yield port, received
    finally:
        server.stop(grace=None)


@pytest.fixture(name="closing")
def closing_fixture() -> Iterator[list[Any]]:
    """Exporters and samplers to close at teardown, newest first, even when the test failed
    (an exporter left open would retry its final export at interpreter exit)."""
    things: list[Any] = []
    yield things
    for thing in reversed(things):
        if hasattr(thing, "stats") and hasattr(thing, "force_flush"):  # an OTelExporter
            thing.close(timeout=5)
        elif hasattr(thing, "shutdown"):  # a MeterProvider
            thing.shutdown()
        else:
            thing.close()
