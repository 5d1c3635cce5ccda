"""Metrics of a running sampler into an OpenTelemetry deployment, over OTLP (HTTP or gRPC).

:class:`OTelExporter` registers observable instruments on an OpenTelemetry SDK
``MeterProvider`` (its own, with a ``PeriodicExportingMetricReader`` and the OTLP exporter, or
one you pass). At each collection it reads the rows the sampler wrote since the previous one
(``Sampler.copy_since``) and reports, per column, the window's mean (gauges), its maximum where
peaks matter (``stroboscope.<name>.max``), or a counter's total. Names follow the semantic
conventions where they exist; see ``docs/opentelemetry.md`` for the table, the resource
attributes and a Collector configuration. Needs the ``otel`` extra
(``pip install 'stroboscope[otel]'``).
"""

from __future__ import annotations

import math
import os
import threading
import weakref
from dataclasses import dataclass
from types import TracebackType
from typing import Any

from stroboscope._base import lifecycle as _lifecycle
from stroboscope._base.checks import check_seconds, describe
from stroboscope._base.extras import missing_extra
from stroboscope._base.identity import Identity, detect_identity
from stroboscope.cluster._otel_names import Gpu, Metric, plan_metrics
from stroboscope.cluster._otel_window import Window
from stroboscope.sampling import CoreSampler as Sampler

try:
    from opentelemetry.metrics import CallbackOptions, MeterProvider, Observation
    from opentelemetry.sdk.metrics import MeterProvider as SdkMeterProvider
    from opentelemetry.sdk.metrics.export import PeriodicExportingMetricReader
    from opentelemetry.sdk.resources import OTELResourceDetector, Resource
except ImportError as exc:  # pragma: no cover - depends on the environment
    raise missing_extra("stroboscope.cluster.otel", "otel", exc) from exc

from stroboscope.cluster._otel_export import (
    GuardedExporter,
    build_sdk_exporter,
    resolve_endpoint,
    resolve_protocol,
)

# Providers (passed by callers) that an exporter registered its instruments on. The SDK keeps
# the first callbacks of an instrument name on a meter for the provider's life and ignores
# later ones, so a second exporter there would export nothing, silently: it is refused.
_providers_in_use: weakref.WeakSet[Any] = weakref.WeakSet()
_providers_lock = threading.Lock()

SERVICE_NAME = "stroboscope"
MAX_EXPORT_TIMEOUT_S = 10.0
COLLECT_TIMEOUT_S = 30.0


@dataclass(frozen=True)
class OTelStats:
    """What the exporter did so far.

    Attributes
    ----------
    windows, rows : int
        Collections made (one window each) and sampler rows summarised in them.
    rows_lost : int
        Rows overwritten in the sampler's ring before a collection read them (the ring is too
        small for the export interval: raise ``capacity`` or export more often).
    exports_ok, exports_failed, exports_skipped : int
        Exports the endpoint accepted; exports that failed after the SDK's own retries; exports
        not attempted while backing off after failures. None with a ``meter_provider`` you
        passed (its readers export, not this object).
    exports_dropped : int or None
        ``exports_failed + exports_skipped``: windows whose gauge values never arrived
        (counters are cumulative: the next export that arrives carries their totals).
    consecutive_failures : int or None
        Failures since the last success; ``backoff_s`` the pause they cause now.
    last_error : str or None
        Why the latest failed export failed.
    """

    windows: int
    rows: int
    rows_lost: int
    exports_ok: int | None
    exports_failed: int | None
    exports_skipped: int | None
    exports_dropped: int | None
    consecutive_failures: int | None
    backoff_s: float | None
    last_error: str | None


MAX_CLOSE_TIMEOUT_S = 3600.0
"""The longest wait :meth:`OTelExporter.close` and :meth:`OTelExporter.force_flush` accept."""


def _check_seconds(name: str, value: object, high: float) -> float:
    """A number of seconds in (0, ``high``]: TypeError for a non-number (the checks module's
    :func:`check_seconds`), ValueError naming the range for the rest (NaN, inf, huge ints)."""
    try:
        seconds = check_seconds(name, value)
    except ValueError:
        seconds = math.nan
    if not seconds <= high:
        raise ValueError(f"{name} must be in (0, {high:g}] seconds, got {describe(value)}")
    return seconds


def _gpus(sampler: Sampler) -> list[Gpu]:
    """hw.id (UUID) and model of each GPU the sampler reads, from its provenance."""
    info = sampler.provenance().get("gpus") or {}
    out = []
    for d in info.get("devices") or []:
        label = str(d.get("label"))
        out.append(Gpu(label, str(d.get("uuid") or f"gpu{label}"), d.get("name") or None))
    return out


def _cpus_of(pid: int) -> int:
    try:
        return len(os.sched_getaffinity(pid))
    except (AttributeError, OSError):  # pragma: no cover - not Linux, or the process is gone
        return os.cpu_count() or 1


def resource_attributes(identity: Identity, pid: int) -> dict[str, str | int]:
    """The resource attributes of an exporter's metrics (before the OTEL_* environment)."""
    attrs: dict[str, str | int] = {
        "service.name": SERVICE_NAME,
        "service.instance.id": f"{identity.host}/{pid}",
        "host.name": identity.host,
        "process.pid": pid,
    }
    optional: dict[str, str | int | None] = {
        "stroboscope.job": identity.job,
        "stroboscope.rank": identity.rank,
        "stroboscope.local_rank": identity.local_rank,
        "stroboscope.world_size": identity.world_size,
        "stroboscope.local_world_size": identity.local_world_size,
        "stroboscope.node_rank": identity.node_rank,
        "stroboscope.launcher": identity.launcher,
        "k8s.pod.name": identity.pod,
        "k8s.namespace.name": identity.namespace,
        "k8s.container.name": identity.container,
    }
    attrs.update({k: v for k, v in optional.items() if v is not None})
    return attrs


class OTelExporter:
    """Export a running sampler's metrics through the OpenTelemetry SDK (OTLP).

    Parameters
    ----------
    sampler : Sampler
        The sampler whose rows are exported (``stroboscope.Sampler`` or a sampling one); the
        exporter only copies rows out of its ring and never stops or slows it.
    endpoint : str, optional
        The OTLP receiver: for ``http/protobuf`` a base URL (``http://host:4318``, the path
        ``/v1/metrics`` is added) or a full one; for ``grpc`` ``http://host:4317``. Default:
        the ``OTEL_EXPORTER_OTLP_METRICS_ENDPOINT`` / ``OTEL_EXPORTER_OTLP_ENDPOINT`` variables
        the SDK honours, else ``http://127.0.0.1:4318`` (gRPC: 4317).
    protocol : "http/protobuf" or "grpc", optional
        Default: ``OTEL_EXPORTER_OTLP_(METRICS_)PROTOCOL``, else ``http/protobuf``.
    export_interval : float
        Seconds between exports (default 10): each export summarises the rows of its interval.
    identity : Identity, optional
        Host, ranks, job and pod for the resource attributes (default
        :func:`stroboscope._base.identity.detect_identity`).
    meter_provider : opentelemetry.metrics.MeterProvider, optional
        Register the instruments on this provider instead (its readers decide where and when
        metrics go; ``endpoint``/``protocol`` must then be None, and the resource is the
        provider's). Windows are then the rows between two collections of any of its readers.
        One exporter per provider: a second one is refused (the SDK would ignore its
        callbacks, which share the first one's instrument names).
    export_timeout : float, optional
        Bound on one export, the SDK exporter's own retries included (seconds; default
        ``min(export_interval, 10)``). ``close()`` waits at most this plus a second.

    Raises
    ------
    TypeError, ValueError
        For a bad argument (named in the message); ValueError also when ``identity`` is not
        given and the launcher's variables conflict (see ``detect_identity``).
    """

    def __init__(
        self,
        sampler: Sampler,
        *,
        endpoint: str | None = None,
        protocol: str | None = None,
        export_interval: float = 10.0,
        identity: Identity | None = None,
        meter_provider: MeterProvider | None = None,
        export_timeout: float | None = None,
    ) -> None:
        if not isinstance(sampler, Sampler):
            raise TypeError(f"sampler must be a stroboscope Sampler, got {type(sampler).__name__}")
        if identity is not None and not isinstance(identity, Identity):
            raise TypeError(f"identity must be an Identity or None, got {type(identity).__name__}")
        if meter_provider is not None and not callable(getattr(meter_provider, "get_meter", None)):
            raise TypeError(
                "meter_provider must be an OpenTelemetry MeterProvider or None, got "
                f"{type(meter_provider).__name__}"
            )
        self._interval = _check_seconds("export_interval", export_interval, 86400.0)
        bound = (
            min(self._interval, MAX_EXPORT_TIMEOUT_S) if export_timeout is None else export_timeout
        )
        self._timeout = _check_seconds("export_timeout", bound, 3600.0)
        self._sampler = sampler
        self._identity = identity if identity is not None else detect_identity()
        self._guard: GuardedExporter | None = None
        self._owns_provider = meter_provider is None
        self._lock = threading.Lock()
        self._closed = False
        self._metrics = plan_metrics(sampler.columns, _gpus(sampler), _cpus_of(sampler.pid))
        self._window = Window(sampler, self._metrics)
        if meter_provider is None:
            self._protocol = resolve_protocol(protocol)
            self._endpoint = resolve_endpoint(endpoint, self._protocol)
            inner = build_sdk_exporter(self._protocol, self._endpoint, self._timeout)
            self._guard = GuardedExporter(inner, self._interval)
            # The reader's timeout bounds the callbacks of a collection (the SDK's OTLP
            # exporters ignore it and keep their own, ``self._timeout``): generous, so a large
            # window on a busy machine is not dropped half-read.
            reader = PeriodicExportingMetricReader(
                self._guard,
                export_interval_millis=self._interval * 1000.0,
                export_timeout_millis=max(self._timeout, COLLECT_TIMEOUT_S) * 1000.0,
            )
            provider: MeterProvider = SdkMeterProvider(
                resource=self.resource(), metric_readers=[reader]
            )
        else:
            if endpoint is not None or protocol is not None:
                raise ValueError(
                    "endpoint and protocol must be None with a meter_provider: its readers "
                    "decide where metrics go"
                )
            with _providers_lock:
                if meter_provider in _providers_in_use:
                    raise ValueError(
                        "meter_provider already carries an OTelExporter (the SDK keeps the "
                        "first callbacks of each instrument name and would ignore a second "
                        "one's): give each exporter its own MeterProvider"
                    )
                _providers_in_use.add(meter_provider)
            self._protocol, self._endpoint = "", None
            provider = meter_provider
        self._provider = provider
        from stroboscope._base.version import __version__

        meter = provider.get_meter("stroboscope", __version__)
        for metric in self._metrics:
            self._register(meter, metric)
        _lifecycle.register(self)

    def _register(self, meter: Any, metric: Metric) -> None:
        window = self._window

        def callback(options: CallbackOptions) -> list[Observation]:
            return [Observation(v, a) for v, a in window.points_for(metric)]

        make = {
            "gauge": meter.create_observable_gauge,
            "counter": meter.create_observable_counter,
            "updowncounter": meter.create_observable_up_down_counter,
        }[metric.instrument]
        make(metric.name, callbacks=[callback], unit=metric.unit, description=metric.description)

    # -- what it exports ---------------------------------------------------------------------

    def resource(self) -> Resource:
        """The resource of this exporter's metrics: ``service.name`` ("stroboscope" unless the
        ``OTEL_SERVICE_NAME`` / ``OTEL_RESOURCE_ATTRIBUTES`` environment sets it),
        ``host.name``, ``process.pid``, the identity's ranks and job (``stroboscope.*``) and
        Kubernetes names (``k8s.*``); ``OTEL_RESOURCE_ATTRIBUTES`` wins over ours."""
        ours = Resource.create(resource_attributes(self._identity, self._sampler.pid))
        env: Resource = OTELResourceDetector().detect()
        merged: Resource = ours.merge(env)
        return merged

    @property
    def metrics(self) -> list[Metric]:
        """The planned metrics: name, instrument, unit and, per point, column and attributes."""
        return list(self._metrics)

    @property
    def endpoint(self) -> str | None:
        """The URL metrics go to (None: the SDK reads it from the OTLP environment)."""
        return self._endpoint

    @property
    def protocol(self) -> str:
        """``http/protobuf`` or ``grpc`` ("" with a meter_provider you passed)."""
        return self._protocol

    @property
    def identity(self) -> Identity:
        return self._identity

    def stats(self) -> OTelStats:
        """Windows, rows and exports so far (see :class:`OTelStats`)."""
        w, g = self._window, self._guard
        return OTelStats(
            windows=w.windows,
            rows=w.rows,
            rows_lost=w.rows_lost,
            exports_ok=g.ok if g else None,
            exports_failed=g.failed if g else None,
            exports_skipped=g.skipped if g else None,
            exports_dropped=(g.failed + g.skipped) if g else None,
            consecutive_failures=g.consecutive_failures if g else None,
            backoff_s=g.backoff_s() if g else None,
            last_error=g.last_error if g else None,
        )

    # -- lifecycle ---------------------------------------------------------------------------

    def force_flush(self, timeout: float | None = None) -> bool:
        """Collect a window now and export it (waits at most ``timeout`` s, in (0, 3600]; default
        the export timeout plus a second, at least 30 s). Returns whether the provider reported
        success (an export that failed is counted in :meth:`stats`)."""
        bound = (
            max(self._timeout + 1.0, COLLECT_TIMEOUT_S)
            if timeout is None
            else _check_seconds("timeout", timeout, MAX_CLOSE_TIMEOUT_S)
        )
        done: bool = self._provider.force_flush(timeout_millis=bound * 1000.0)  # type: ignore[attr-defined]
        return bool(done)

    def close(self, timeout: float | None = None) -> None:
        """Export the last window once and stop (harmless twice).

        With its own provider: the provider's shutdown makes the final collection and export,
        bounded by ``timeout`` seconds (in (0, 3600]; default the export timeout plus a second)
        even when the endpoint is down; a bad ``timeout`` raises before anything is stopped.
        With a provider you passed: a force-flush with the same bound, then the instruments
        report nothing more (the provider stays yours).
        """
        # Checked before anything changes: a bad timeout leaves the exporter open and running.
        bound = (
            self._timeout + 1.0
            if timeout is None
            else _check_seconds("timeout", timeout, MAX_CLOSE_TIMEOUT_S)
        )
        with self._lock:
            if self._closed:
                return
            self._closed = True
        if self._guard is not None:
            self._guard.final = True
        try:
            if self._owns_provider:
                self._provider.shutdown(timeout_millis=bound * 1000.0)  # type: ignore[attr-defined]
            else:
                self._provider.force_flush(timeout_millis=bound * 1000.0)  # type: ignore[attr-defined]
        finally:
            self._window.closed = True

    def _after_fork_in_child(self) -> None:
        # The SDK restarts its reader thread in a forked child, but the sampler's thread stays
        # in the parent: the child's copy of this exporter reports nothing (no stale rows).
        self._window.closed = True

    @property
    def closed(self) -> bool:
        return self._closed

    def __enter__(self) -> OTelExporter:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    def __repr__(self) -> str:
        state = "closed" if self._closed else "open"
        where = self._endpoint or ("environment" if self._owns_provider else "meter_provider")
        return f"<stroboscope.OTelExporter {self._protocol or 'provider'} {where} {state}>"
