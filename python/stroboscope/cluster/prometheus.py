"""A Prometheus endpoint over a running sampler: windowed summaries at every scrape.

At each scrape the exporter copies the rows the sampler wrote since the previous scrape
(``Sampler.copy_since``, its own cursor; the sampler's drain cursor is left alone) and serves,
per column, the mean and the maximum over that window for gauges, the latest running total for
counters, in the ecosystem's names and base units (see ``docs/prometheus.md`` and
:mod:`stroboscope.cluster._prom_names`), with the labels that join dcgm-exporter's and
node_exporter's series.

Why at the scrape and not on a timer: the window is then exactly the scrape interval, whatever
it is set to in Prometheus (a timer's window would be another interval, its summary up to one
period stale, and windows between scrapes would be lost or need merging); nothing runs while no
one scrapes; and the work is one pass over the rows written since the last scrape, so scraping
more often costs no more in all. The copy releases the GIL and the sampler thread never waits
for it (the ring is read with a seqlock), so a slow or failing scrape cannot slow the sampler.
"""

from __future__ import annotations

import contextlib
import logging
import threading
from collections.abc import Iterable, Mapping
from types import TracebackType
from typing import TYPE_CHECKING, Any

from stroboscope._base import lifecycle as _lifecycle
from stroboscope._base.extras import require
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
from stroboscope._base.ratelimit import RateLimitedLog
from stroboscope.cluster._prom_names import ColumnInfo, PromSeries, plan_series
from stroboscope.cluster._prom_window import Summary, summarise

if TYPE_CHECKING:
    from stroboscope._base.identity import Identity
    from stroboscope.sampling import CoreSampler as Sampler

logger = logging.getLogger("stroboscope.cluster")

__all__ = ["PrometheusExporter"]

_PREFIX_OK = frozenset("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_")


def _check_prefix(prefix: object) -> str:
    if not isinstance(prefix, str):
        raise TypeError(f"prefix must be a str, got {type(prefix).__name__}")
    if prefix and (not set(prefix) <= _PREFIX_OK or prefix[0].isdigit()):
        raise ValueError(
            "prefix must be a valid start of a Prometheus metric name ([a-zA-Z_] then "
            f"[a-zA-Z0-9_]*; colons are for recording rules), got {prefix!r}"
        )
    return prefix


def _check_sampler(sampler: object) -> Any:
    needed = ("copy_since", "columns", "stats", "provenance")
    missing = [name for name in needed if not hasattr(sampler, name)]
    if missing:
        raise TypeError(
            "sampler must be a stroboscope Sampler (stroboscope.Sampler, "
            f"stroboscope.sampling.CoreSampler), got {type(sampler).__name__} "
            f"(it lacks {', '.join(missing)})"
        )
    return sampler


def gpu_labels(provenance: Mapping[str, Any], host: str) -> dict[str, dict[str, str]]:
    """Column label of each GPU (``gpu.LABEL.*``) → the labels dcgm-exporter gives that GPU:
    ``gpu`` (the NVML index), ``UUID`` and ``Hostname``."""
    gpus = provenance.get("gpus") or {}
    out: dict[str, dict[str, str]] = {}
    for device in gpus.get("devices") or []:
        out[str(device["label"])] = {
            "gpu": str(device["index"]),
            "UUID": str(device.get("uuid") or ""),
            "Hostname": host,
        }
    return out


LabelSet = tuple[tuple[str, ...], tuple[str, ...]]  # label names, values


def label_sets(
    series: Iterable[PromSeries], identity: Identity, provenance: Mapping[str, Any]
) -> tuple[LabelSet, dict[str, LabelSet]]:
    """The identity's labels, and per column the labels of its series: the identity's, those
    its name gives (``cpu``, ``top``, ``mig``) and, for a GPU, dcgm-exporter's ``gpu`` (NVML
    index), ``UUID`` and ``Hostname``."""
    base = {k: str(v) for k, v in identity.labels().items()}
    host = base.get("hostname") or str(getattr(identity, "host", "") or "")
    gpus = gpu_labels(provenance, host)
    out: dict[str, LabelSet] = {}
    for s in series:
        own = dict(s.labels)
        if "gpu" in own:
            extra = gpus.get(own["gpu"], {"gpu": own["gpu"], "UUID": "", "Hostname": host})
            own = {**own, **extra}
        labels = {**base, **own}
        out[s.column] = (tuple(labels), tuple(labels.values()))
    return (tuple(base), tuple(base.values())), out


class _Collector:
    """The registry's collector: each collect() is one window (see the module docstring)."""

    def __init__(self, exporter: PrometheusExporter) -> None:
        self._exporter = exporter

    def describe(self) -> list[Any]:
        return []  # no collection at registration: the first window starts at the first scrape

    def collect(self) -> Iterable[Any]:
        return self._exporter._collect()


class PrometheusExporter:
    """Serve a running sampler's metrics at ``/metrics`` for Prometheus, summarised per scrape.

    Only a request for ``/metrics`` is a scrape: it summarises the rows since the previous one
    (the window). Any other path (``/health``, ``/``, ``/favicon.ico``) is answered 404 and
    leaves the window alone.

    Parameters
    ----------
    sampler : stroboscope.Sampler
        A sampler (running, or started later); the exporter only reads its rows, with a cursor
        of its own, and never stops it.
    port : int
        TCP port (default 9464; 0 picks a free one, see :attr:`port`). A port in use raises
        :class:`OSError` naming the port.
    addr : str
        Address to bind (default ``"127.0.0.1"``: only this machine can scrape; pass
        ``"0.0.0.0"`` for a Prometheus server elsewhere).
    identity : stroboscope.cluster.Identity, optional
        Who this process is (default: the sampler's own ``identity``, which
        :func:`stroboscope.cluster.rank_sampler` always sets, else
        :func:`stroboscope.cluster.identity`); its
        labels (``job``, ``hostname``, ``rank``, ``local_rank``, ``pod``, ``namespace``,
        ``container``, those known) go on every series.
    prefix : str
        Put in front of every metric name (default ``"stroboscope_"``).
    timeout : float
        Seconds a scrape connection may stay open (default 10, at most 3600), whatever the
        client does.
    max_connections : int
        Connections open at once (default 16, at most 1024). When all are taken, the oldest
        one still waiting for its request is closed; the server never takes the descriptors
        the recorder needs (see ``docs/prometheus.md``).

    Every scrape serves, for the rows written since the previous scrape: each gauge's mean (the
    plain name) and maximum (``…_max_<unit>``), each counter's running total (``…_total``),
    and the exporter's own counters (``stroboscope_exporter_errors_total``: collections that
    failed and served no window; ``stroboscope_exporter_rows_lost_total``: rows overwritten in
    the ring before a scrape read them; ``stroboscope_sampler_rows_total``: the sampler's row
    count at the end of the window; ``stroboscope_exporter_window_rows``: rows in the window).
    A gauge without a value in the window is left out of that scrape; a counter keeps its last
    total. Columns that map to no metric are listed in :attr:`skipped`.
    """

    def __init__(
        self,
        sampler: Sampler,
        *,
        port: int = DEFAULT_PORT,
        addr: str = "127.0.0.1",
        identity: Identity | None = None,
        prefix: str = "stroboscope_",
        timeout: float = DEFAULT_TIMEOUT_S,
        max_connections: int = DEFAULT_MAX_CONNECTIONS,
    ) -> None:
        self._sampler = _check_sampler(sampler)
        port = check_port(port)
        self.addr = check_addr(addr)
        self.prefix = _check_prefix(prefix)
        timeout = check_timeout(timeout)
        max_connections = check_max_connections(max_connections)
        if identity is None:
            from stroboscope._base.identity import Identity, detect_identity

            # A sampler of cluster.rank_sampler knows whose rows it records: the same labels.
            known = getattr(sampler, "identity", None)
            identity = known if isinstance(known, Identity) else detect_identity()
        if not callable(getattr(identity, "labels", None)):
            raise TypeError(
                "identity must be a stroboscope Identity (see stroboscope.cluster.identity()), "
                f"got {type(identity).__name__}"
            )
        self.identity = identity
        columns = [ColumnInfo(c.name, c.unit, c.kind, c.help) for c in sampler.columns]
        self._series, skipped = plan_series(columns, prefix)
        self.skipped: dict[str, str] = skipped
        self._base_labels, self._labels = label_sets(self._series, identity, sampler.provenance())
        self._lock = threading.Lock()
        self._cursor = int(sampler.stats().rows_written)
        self._totals: dict[str, float] = {}
        self._errors = 0
        self._rows_lost = 0
        self._window_rows = 0
        self._log = RateLimitedLog(logger)
        self._closed = False
        client = require("prometheus_client", "PrometheusExporter", "prometheus")
        self.registry = client.CollectorRegistry(auto_describe=False)
        self.registry.register(_Collector(self))
        self._server, self._thread, self.port = serve(
            self.registry,
            port,
            self.addr,
            who="PrometheusExporter",
            timeout=timeout,
            max_connections=max_connections,
        )
        _lifecycle.register(self)  # a forked child lets go of the listening socket

    # -- one scrape ---------------------------------------------------------------------------

    def _window(self) -> dict[str, Summary]:
        """The rows since the previous collection, summarised; moves the cursor."""
        frame = self._sampler.copy_since(self._cursor)
        table = frame.to_arrow()
        summaries = summarise(table, self._series)
        self._rows_lost += int(frame.rows_lost)
        self._cursor = int(frame.first_row) + len(frame) if len(frame) else self._cursor
        self._window_rows = len(frame)
        for s in self._series:
            if s.kind == "counter" and s.column in summaries:
                self._totals[s.column] = summaries[s.column].value
        return summaries

    def _collect(self) -> list[Any]:
        with self._lock:
            try:
                window = self._window()
            except Exception as exc:  # never let a failed window stop the endpoint
                self._errors += 1
                self._window_rows = 0
                self._log(logging.WARNING, "stroboscope: Prometheus collection failed: %r", exc)
                window = {}
            try:
                families = self._families(window)
            except Exception as exc:
                self._errors += 1
                self._log(logging.WARNING, "stroboscope: Prometheus exposition failed: %r", exc)
                families = []
            return families + self._own_families()

    def _families(self, window: Mapping[str, Summary]) -> list[Any]:
        from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily

        families: dict[str, Any] = {}

        def family(name: str, s: PromSeries, names: tuple[str, ...], counter: bool) -> Any:
            fam = families.get(name)
            if fam is None:
                cls = CounterMetricFamily if counter else GaugeMetricFamily
                help_text = s.help if name != s.max_name else _max_help(s.help)
                fam = families[name] = cls(name, help_text, labels=names, unit=s.unit)
            return fam

        for s in self._series:
            names, values = self._labels[s.column]
            if s.kind == "counter":
                total = self._totals.get(s.column)
                if total is not None:
                    family(s.name, s, names, True).add_metric(values, total)
                continue
            summary = window.get(s.column)
            if summary is None:
                continue
            family(s.name, s, names, False).add_metric(values, summary.value)
            if s.max_name and summary.max is not None:
                family(s.max_name, s, names, False).add_metric(values, summary.max)
        return list(families.values())

    def _own_families(self) -> list[Any]:
        from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily

        names, values = self._base_labels
        p = self.prefix
        out: list[Any] = []
        for name, help_text, value, counter in (
            (
                f"{p}exporter_errors",
                "Collections that failed (the sampler keeps running; that scrape served no "
                "window).",
                self._errors,
                True,
            ),
            (
                f"{p}exporter_rows_lost",
                "Rows overwritten in the sampler's ring before a scrape read them (scrape more "
                "often or give the sampler a larger capacity).",
                self._rows_lost,
                True,
            ),
            (
                f"{p}sampler_rows",
                "Rows the sampler had written at the end of the latest window (the window's "
                "rows are those since the previous scrape's value).",
                self._cursor,
                True,
            ),
            (
                f"{p}exporter_window_rows",
                "Rows summarised by the latest scrape.",
                self._window_rows,
                False,
            ),
        ):
            cls = CounterMetricFamily if counter else GaugeMetricFamily
            fam = cls(name, help_text, labels=names)
            fam.add_metric(values, float(value))
            out.append(fam)
        return out

    # -- lifecycle ---------------------------------------------------------------------------

    @property
    def url(self) -> str:
        """The scrape URL, e.g. ``http://127.0.0.1:9464/metrics``."""
        return scrape_url(self.addr, self.port)

    @property
    def series(self) -> list[PromSeries]:
        """The column → metric mapping served (one entry per column)."""
        return list(self._series)

    @property
    def closed(self) -> bool:
        """Whether :meth:`close` was called."""
        return self._closed

    def close(self) -> None:
        """Stop serving and release the port (idempotent). The sampler is left running."""
        with self._lock:
            if self._closed:
                return
            self._closed = True
        shutdown(self._server, self._thread)
        _lifecycle.unregister(self)

    def _after_fork_in_child(self) -> None:
        # The server thread is the parent's; the child has only a copy of the listening socket
        # (a DataLoader worker, say). Close it, so the port is free once the parent closes its
        # own, and serve nothing from here.
        self._closed = True
        with contextlib.suppress(OSError):
            self._server.socket.close()

    def __enter__(self) -> PrometheusExporter:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    def __repr__(self) -> str:
        state = "closed" if self._closed else "serving"
        return f"<stroboscope.cluster.PrometheusExporter {self.url} {state}>"


def _max_help(help_text: str) -> str:
    return help_text.replace("Mean over the scrape window", "Maximum over the scrape window")
