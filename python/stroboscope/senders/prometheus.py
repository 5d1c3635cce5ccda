"""Prometheus sender: the latest value of each metric as a gauge, served over HTTP."""

from __future__ import annotations

import logging
import re
import threading
from typing import Any

from stroboscope.cluster._prom_http import (
    DEFAULT_MAX_CONNECTIONS,
    DEFAULT_PORT,
    DEFAULT_TIMEOUT_S,
    check_addr,
    check_max_connections,
    check_port,
    check_timeout,
    scrape_url,
    serve,
    shutdown,
)
from stroboscope.senders._base import BuiltinSender, StatsDict, flatten_event, missing_extra

logger = logging.getLogger("stroboscope.senders")

_NOT_ALLOWED = re.compile(r"[^a-zA-Z0-9_:]")
__all__ = ["DEFAULT_PORT", "PrometheusSender", "metric_name"]


def metric_name(key: str, prefix: str = "stroboscope_") -> str:
    """The Prometheus name of an event key: ``rank0.gpu.0.powerWatts`` →
    ``stroboscope_rank0_gpu_0_powerWatts`` (characters outside ``[a-zA-Z0-9_:]`` become ``_``)."""
    name = _NOT_ALLOWED.sub("_", prefix + key)
    return name if not name[:1].isdigit() else "_" + name


class PrometheusSender(BuiltinSender):
    """Serve each metric's latest published value as a Prometheus gauge at ``/metrics``.

    Parameters
    ----------
    port : int
        TCP port of the HTTP endpoint (default 9464; 0 picks a free one, see :attr:`port`).
    addr : str
        Address to bind (default ``"127.0.0.1"``: only this machine can scrape; pass
        ``"0.0.0.0"`` to let a Prometheus server elsewhere reach it).
    prefix : str
        Put in front of every metric name (default ``"stroboscope_"``).
    timeout : float
        Seconds a scrape connection may stay open (default 10, at most 3600), whatever the
        client does.
    max_connections : int
        Connections open at once (default 16, at most 1024); the oldest one still waiting for
        its request makes room for a new one. The server never takes the descriptors the rest
        of the process needs (see ``docs/prometheus.md``).

    Each sender has its own registry, so its endpoint shows only its gauges. A key's gauge is
    created the first time the key is published; the help text names the original key.
    """

    def __init__(
        self,
        port: int = DEFAULT_PORT,
        *,
        addr: str = "127.0.0.1",
        prefix: str = "stroboscope_",
        timeout: float = DEFAULT_TIMEOUT_S,
        max_connections: int = DEFAULT_MAX_CONNECTIONS,
    ) -> None:
        super().__init__()
        try:
            from prometheus_client import CollectorRegistry, Gauge
        except ImportError as exc:
            raise missing_extra("PrometheusSender", "prometheus", exc) from exc
        port = check_port(port)
        addr = check_addr(addr)
        timeout = check_timeout(timeout)
        max_connections = check_max_connections(max_connections)
        self._gauge_cls = Gauge
        self.registry = CollectorRegistry(auto_describe=True)
        self.prefix = prefix
        self._gauges: dict[str, Any] = {}  # key → its gauge, or None when its name is taken
        self._names: dict[str, str] = {}  # metric name → the key that owns it
        self._lock = threading.Lock()
        self._closed = False
        # A port in use: OSError naming the port (shared with the cluster exporter).
        self._server, self._thread, self.port = serve(
            self.registry,
            port,
            addr,
            who="PrometheusSender",
            timeout=timeout,
            max_connections=max_connections,
        )
        self.addr = addr

    @property
    def url(self) -> str:
        """The scrape URL, e.g. ``http://127.0.0.1:9464/metrics``."""
        return scrape_url(self.addr, self.port)

    def publish(self, event: StatsDict, **kwargs: Any) -> None:
        """Set the gauge of every metric in ``event`` to its value."""
        flat = flatten_event(event)
        with self._lock:
            if self._closed:
                raise RuntimeError(f"PrometheusSender({self.url}) is closed")
            for key, value in flat.items():
                if key in self._gauges:
                    gauge = self._gauges[key]
                else:
                    gauge = self._gauges[key] = self._new_gauge(key)
                if gauge is not None:  # None: a key whose name another key already holds
                    gauge.set(value)

    def _new_gauge(self, key: str) -> Any:
        name = metric_name(key, self.prefix)
        owner = self._names.get(name)
        if owner is not None:
            logger.warning(
                "stroboscope: keys %r and %r both map to Prometheus metric %s; %r is not served",
                owner,
                key,
                name,
                key,
            )
            return None
        gauge = self._gauge_cls(name, f"stroboscope metric {key}", registry=self.registry)
        self._names[name] = key
        return gauge

    def close(self) -> None:
        """Stop serving and release the port (idempotent)."""
        with self._lock:
            if self._closed:
                return
            self._closed = True
        shutdown(self._server, self._thread)

    def __repr__(self) -> str:
        return f"PrometheusSender({self.url!r})"
