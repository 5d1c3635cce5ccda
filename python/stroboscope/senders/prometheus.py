"""Prometheus sender: the latest value of each metric as a gauge, served over HTTP.

A key that is a column (its name ends in a unit, ``gpu.0.power_w``) is named and scaled as the
cluster exporter names and scales that column (:func:`stroboscope.analysis.prom_names.prom_name`:
``stroboscope_gpu_power_watts{gpu="0"}``, a ``%`` as a 0 to 1 ``_ratio``); any other key
(``rank0.cpu``, ``gpu.0.powerWatts``) keeps its own name, with characters Prometheus does not
allow replaced (:func:`metric_name`).
"""

from __future__ import annotations

import logging
import re
import threading
from typing import Any

from stroboscope._base.extras import missing_extra
from stroboscope._base.http_server import (
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
from stroboscope.analysis.prom_names import prom_name, unit_of
from stroboscope.senders._base import BuiltinSender, StatsDict, flatten_event

logger = logging.getLogger("stroboscope.senders")

_NOT_ALLOWED = re.compile(r"[^a-zA-Z0-9_:]")
__all__ = ["DEFAULT_PORT", "PrometheusSender", "gauge_name", "metric_name"]


def metric_name(key: str, prefix: str = "stroboscope_") -> str:
    """The Prometheus name of an event key: ``rank0.gpu.0.powerWatts`` →
    ``stroboscope_rank0_gpu_0_powerWatts`` (characters outside ``[a-zA-Z0-9_:]`` become ``_``)."""
    name = _NOT_ALLOWED.sub("_", prefix + key)
    return name if not name[:1].isdigit() else "_" + name


def gauge_name(
    key: str, prefix: str = "stroboscope_"
) -> tuple[str, tuple[tuple[str, str], ...], float]:
    """The gauge family, labels and factor of an event key: a column (its name ends in a unit)
    as the cluster exporter names it (``cpu.3.util_pct`` →
    ``("stroboscope_cpu_core_util_ratio", (("cpu", "3"),), 0.01)``), any other key by
    :func:`metric_name`, without labels, unscaled."""
    unit = unit_of(key)
    if unit is None:
        return metric_name(key, prefix), (), 1.0
    named = prom_name(key, unit, prefix)
    return named.name, named.labels, named.factor


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
    created the first time the key is published (named by :func:`gauge_name`: a column as the
    cluster exporter names it, in base units); the help text names the key.
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
        # key → (its gauge or labelled child, factor), or None when its name is taken
        self._gauges: dict[str, tuple[Any, float] | None] = {}
        self._families: dict[str, tuple[Any, tuple[str, ...]]] = {}  # name → gauge, label names
        self._names: dict[tuple[str, tuple[str, ...]], str] = {}  # (name, labels) → owning key
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
                    gauge[0].set(value * gauge[1])

    def _new_gauge(self, key: str) -> tuple[Any, float] | None:
        name, labels, factor = gauge_name(key, self.prefix)
        label_names = tuple(label for label, _ in labels)
        values = tuple(value for _, value in labels)
        owner = self._names.get((name, values))
        family = self._families.get(name)
        if owner is None and family is not None and family[1] != label_names:
            owner = self._names[next(k for k in self._names if k[0] == name)]
        if owner is not None:
            logger.warning(
                "stroboscope: keys %r and %r both map to Prometheus metric %s; %r is not served",
                owner,
                key,
                name,
                key,
            )
            return None
        if family is None:
            help_text = f"stroboscope metric {key}"
            if label_names:
                help_text = f"stroboscope metric {_generic(key)}"
            gauge = self._gauge_cls(name, help_text, label_names, registry=self.registry)
            family = self._families[name] = (gauge, label_names)
        self._names[(name, values)] = key
        return (family[0].labels(*values) if label_names else family[0]), factor

    def close(self) -> None:
        """Stop serving and release the port (idempotent)."""
        with self._lock:
            if self._closed:
                return
            self._closed = True
        shutdown(self._server, self._thread)

    def __repr__(self) -> str:
        return f"PrometheusSender({self.url!r})"


def _generic(key: str) -> str:
    """``gpu.0.power_w`` → ``gpu.{i}.power_w``: the key a labelled family's help names."""
    return ".".join("{i}" if token.isdigit() else token for token in key.split("."))
