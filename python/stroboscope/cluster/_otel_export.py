"""The OTLP exporter behind :class:`stroboscope.cluster.otel.OTelExporter`, and its guard.

The SDK's OTLP exporters retry a failed request with exponential backoff *inside* one
``export()`` call, until their ``timeout`` (seconds) has passed. We pass that timeout
explicitly, so one export blocks the SDK's reader thread for at most about ``timeout`` (never
the sampler: it has its own C++ thread and the exporter only copies rows out of its ring).
:class:`GuardedExporter` wraps the SDK exporter: it counts exports that succeeded and failed,
and after consecutive failures it backs off across collections (skipping exports for
``interval * 2**(k-1)``, at most :data:`MAX_BACKOFF_INTERVALS` intervals or 5 minutes), so a
collector that is down for an hour costs a connection attempt every few minutes, not every
interval. Each skipped or failed export is a dropped export: the gauge values of its window
are lost; counters are cumulative, so the next export that arrives carries their totals.
"""

from __future__ import annotations

import ipaddress
import os
import re
import threading
import time
from typing import Any
from urllib.parse import urlsplit

from opentelemetry.sdk.metrics.export import (
    MetricExporter,
    MetricExportResult,
    MetricsData,
)

PROTOCOLS = ("http/protobuf", "grpc")
DEFAULT_HTTP = "http://127.0.0.1:4318"
DEFAULT_GRPC = "http://127.0.0.1:4317"
MAX_BACKOFF_INTERVALS = 32
MAX_BACKOFF_S = 300.0
_HOST_NAME = re.compile(r"[\w-]+(\.[\w-]+)*\.?")
_ENV_ENDPOINTS = ("OTEL_EXPORTER_OTLP_METRICS_ENDPOINT", "OTEL_EXPORTER_OTLP_ENDPOINT")
_ENV_PROTOCOLS = ("OTEL_EXPORTER_OTLP_METRICS_PROTOCOL", "OTEL_EXPORTER_OTLP_PROTOCOL")


def resolve_protocol(protocol: str | None) -> str:
    """``protocol``, else the one the OTLP environment variables name, else http/protobuf."""
    if protocol is None:
        for var in _ENV_PROTOCOLS:
            if os.environ.get(var, "").strip():
                protocol = os.environ[var].strip()
                break
        else:
            return "http/protobuf"
    if not isinstance(protocol, str) or protocol not in PROTOCOLS:
        raise ValueError(f"protocol must be one of {', '.join(PROTOCOLS)}; got {protocol!r}")
    return protocol


def resolve_endpoint(endpoint: str | None, protocol: str) -> str | None:
    """The URL handed to the SDK exporter; None lets the SDK read the OTLP environment.

    For http/protobuf a base URL (no path, e.g. ``http://collector:4318``) gets the signal
    path ``/v1/metrics``, as the SDK does for ``OTEL_EXPORTER_OTLP_ENDPOINT``; a URL with a
    path is used as is. Without ``endpoint`` and without those variables: 127.0.0.1, the
    protocol's default port (4318 for HTTP, 4317 for gRPC).
    """
    if endpoint is None:
        if any(os.environ.get(var, "").strip() for var in _ENV_ENDPOINTS):
            return None
        endpoint = DEFAULT_GRPC if protocol == "grpc" else DEFAULT_HTTP
    if not isinstance(endpoint, str):
        raise TypeError(f"endpoint must be a URL string or None, got {type(endpoint).__name__}")
    if any(ch.isspace() or not ch.isprintable() for ch in endpoint):
        # urlsplit strips some of them and keeps others: the SDK would get another URL.
        raise ValueError(
            f"endpoint must be a URL without spaces or control characters, got {endpoint!r}"
        )
    try:
        parts = urlsplit(endpoint)
        host = parts.hostname or ""
    except ValueError:  # an unclosed IPv6 bracket
        parts, host = urlsplit(""), ""
    if parts.scheme not in ("http", "https") or not _valid_host(host):
        raise ValueError(
            f"endpoint must be an http:// or https:// URL with a host name or IP address "
            f"(e.g. {DEFAULT_HTTP}), got {endpoint!r}"
        )
    try:
        parts.port  # noqa: B018 - raises ValueError on a port out of range
    except ValueError:
        raise ValueError(f"endpoint has an invalid port: {endpoint!r}") from None
    if parts.fragment or endpoint.endswith("#"):
        raise ValueError(f"endpoint must not have a #fragment, got {endpoint!r}")
    if protocol == "http/protobuf" and parts.path in ("", "/"):
        return endpoint.rstrip("/") + "/v1/metrics"
    return endpoint


def _valid_host(host: str) -> bool:
    """A DNS name (letters, digits, ``-``, ``_``, dots) or an IP address (IPv6 unbracketed)."""
    if not host:
        return False
    try:
        ipaddress.ip_address(host)
        return True
    except ValueError:
        return _HOST_NAME.fullmatch(host) is not None


def build_sdk_exporter(protocol: str, endpoint: str | None, timeout_s: float) -> MetricExporter:
    """The SDK's OTLP metric exporter for ``protocol``, its retries bounded by ``timeout_s``."""
    if protocol == "grpc":
        from opentelemetry.exporter.otlp.proto.grpc.metric_exporter import (
            OTLPMetricExporter as GrpcExporter,
        )

        kwargs: dict[str, Any] = {"timeout": timeout_s}
        if endpoint is not None:
            kwargs["endpoint"] = endpoint
            kwargs["insecure"] = endpoint.startswith("http://")
        exporter: MetricExporter = GrpcExporter(**kwargs)
        return exporter
    from opentelemetry.exporter.otlp.proto.http.metric_exporter import (
        OTLPMetricExporter as HttpExporter,
    )

    http: MetricExporter = HttpExporter(endpoint=endpoint, timeout=timeout_s)
    return http


class GuardedExporter(MetricExporter):
    """Counts exports and backs off across collections after failures (see the module doc)."""

    def __init__(self, inner: MetricExporter, interval_s: float) -> None:
        super().__init__(
            preferred_temporality=inner._preferred_temporality,
            preferred_aggregation=inner._preferred_aggregation,
        )
        self._inner = inner
        self._interval = interval_s
        self._lock = threading.Lock()
        self.ok = 0
        self.failed = 0
        self.skipped = 0
        self.consecutive_failures = 0
        self.retry_at = 0.0  # time.monotonic() before which exports are skipped
        self.last_error: str | None = None
        self.final = False  # set by close(): the last export is tried whatever the backoff

    def backoff_s(self) -> float:
        """The pause after the current run of consecutive failures (0 without one)."""
        k = self.consecutive_failures
        if k == 0:
            return 0.0
        cap = min(MAX_BACKOFF_INTERVALS * self._interval, MAX_BACKOFF_S)
        return float(min(self._interval * 2 ** min(k - 1, 30), max(cap, self._interval)))

    def export(
        self, metrics_data: MetricsData, timeout_millis: float = 10_000, **kwargs: Any
    ) -> MetricExportResult:
        now = time.monotonic()
        with self._lock:
            if not self.final and now < self.retry_at:
                self.skipped += 1
                return MetricExportResult.FAILURE
        try:
            result = self._inner.export(metrics_data, timeout_millis=timeout_millis, **kwargs)
            error = None if result == MetricExportResult.SUCCESS else "export failed"
        except Exception as exc:  # the reader would only log it; we count it too
            result, error = MetricExportResult.FAILURE, f"{type(exc).__name__}: {exc}"
        with self._lock:
            if result == MetricExportResult.SUCCESS:
                self.ok += 1
                self.consecutive_failures = 0
                self.retry_at = 0.0
            else:
                self.failed += 1
                self.consecutive_failures += 1
                self.last_error = error
                # Half an interval of slack: the first failure skips nothing, the second one
                # export, then 3, 7, ... (the reader ticks once per interval).
                self.retry_at = time.monotonic() + self.backoff_s() - self._interval / 2
        return result

    def force_flush(self, timeout_millis: float = 10_000) -> bool:
        flushed: bool = self._inner.force_flush(timeout_millis=timeout_millis)
        return flushed

    def shutdown(self, timeout_millis: float = 30_000, **kwargs: Any) -> None:
        self._inner.shutdown(timeout_millis=timeout_millis, **kwargs)
