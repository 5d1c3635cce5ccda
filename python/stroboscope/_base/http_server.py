"""Serving a prometheus_client registry over HTTP: argument checks, a clear error for a port in
use, the scrape URL and shutdown. Shared by the exporter and the Prometheus sender.

The server runs in the process it measures, so it must never take what the recorder needs. It
bounds what any client can hold (:class:`MetricsServer`):

- each connection is closed ``timeout`` seconds after it was accepted, whatever it is doing (a
  client that sends nothing, or one byte at a time, or never reads the answer);
- at most ``max_connections`` are open at once (one thread and one descriptor each): when they
  are all taken, the oldest one still waiting for its request is closed to make room (a scrape
  sends its request at once, so it gets in), and when every one is being answered the new one
  is closed at once;
- no connection is accepted while the process has fewer than :func:`fd_reserve` descriptors
  left below its ``RLIMIT_NOFILE``: they stay in the kernel's queue, and the recorder's segment
  and sidecar files still open;
- an ``accept`` that fails for lack of descriptors or memory (``EMFILE``, ``ENFILE``, ...)
  pauses accepting for a growing delay (10 ms to 0.5 s) instead of spinning, and serving
  resumes when descriptors are free again.
"""

from __future__ import annotations

import contextlib
import errno
import logging
import os
import resource
import socket
import sys
import threading
import time
from dataclasses import dataclass
from socketserver import ThreadingMixIn
from typing import Any
from wsgiref.simple_server import WSGIRequestHandler, WSGIServer

from stroboscope._base.checks import check_seconds, describe
from stroboscope._base.extras import require
from stroboscope._base.ratelimit import RateLimitedLog

logger = logging.getLogger("stroboscope.cluster")

DEFAULT_PORT = 9464
"""The port OpenTelemetry's Prometheus exporter uses by default, and so do we."""
DEFAULT_TIMEOUT_S = 10.0
"""The longest a connection stays open (Prometheus's default scrape timeout is 10 s too)."""
MAX_TIMEOUT_S = 3600.0
"""The longest ``timeout`` accepted: an hour is already far beyond any scrape."""
DEFAULT_MAX_CONNECTIONS = 16
"""Connections open at once (a Prometheus server scrapes over one at a time)."""
MAX_CONNECTIONS = 1024
MIN_FD_RESERVE = 32
"""Descriptors left to the rest of the process at least (see :func:`fd_reserve`)."""
_PAUSE_S = (0.01, 0.5)  # the first and the longest pause of accepting after a refused accept
_NO_RESOURCES = frozenset({errno.EMFILE, errno.ENFILE, errno.ENOBUFS, errno.ENOMEM})


def check_port(port: object) -> int:
    """``port`` as an int in [0, 65535] (0: any free port), else ValueError."""
    if isinstance(port, bool) or not isinstance(port, int) or not 0 <= port <= 65535:
        raise ValueError(f"port must be an int in [0, 65535] (0: any free port), got {port!r}")
    return port


def check_addr(addr: object) -> str:
    """``addr`` as a non-empty str, else TypeError/ValueError."""
    if not isinstance(addr, str):
        raise TypeError(f"addr must be an address to bind (str), got {type(addr).__name__}")
    if not addr.strip():
        raise ValueError("addr must be an address to bind, such as '127.0.0.1', got ''")
    if any(ch.isspace() or not ch.isprintable() for ch in addr):
        raise ValueError(
            f"addr must be an address to bind without spaces or control characters, such as "
            f"'127.0.0.1', got {addr!r}"
        )
    return addr


def check_timeout(value: object) -> float:
    """``timeout`` as seconds in (0, :data:`MAX_TIMEOUT_S`], else TypeError/ValueError."""
    seconds = check_seconds("timeout", value)
    if seconds > MAX_TIMEOUT_S:
        raise ValueError(
            f"timeout must be at most {MAX_TIMEOUT_S:g} seconds (1 h), the longest a scrape "
            f"connection may stay open, got {describe(value)}"
        )
    return seconds


def check_max_connections(value: object) -> int:
    """``max_connections`` as an int in [1, :data:`MAX_CONNECTIONS`], else TypeError/ValueError."""
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(f"max_connections must be an int, got {describe(value)}")
    if not 1 <= value <= MAX_CONNECTIONS:
        raise ValueError(
            f"max_connections must be within [1, {MAX_CONNECTIONS}], got {describe(value)}"
        )
    return value


def fd_reserve(soft_limit: int) -> int:
    """Descriptors the server leaves to the rest of the process: an eighth of the soft
    ``RLIMIT_NOFILE``, at least :data:`MIN_FD_RESERVE`."""
    return max(MIN_FD_RESERVE, soft_limit // 8)


class _FdCount:
    """How many descriptors the process may still open, counted without taking one of the
    recorder's: the listing of ``/proc/self/fd`` needs a descriptor, so the server holds one
    (of ``/dev/null``) from its start and gives it up for the time of each listing. Only the
    accepting thread counts."""

    def __init__(self) -> None:
        self._spare: int | None = None
        self._keep_spare()

    def _keep_spare(self) -> None:
        if self._spare is None:
            try:
                self._spare = os.open(os.devnull, os.O_RDONLY | os.O_CLOEXEC)
            except OSError:  # none left now: the next count takes one, as before
                self._spare = None

    def left(self) -> int | None:
        """Descriptors this process may still open before its soft ``RLIMIT_NOFILE``, less the
        reserve (0 when not even the listing could be opened); None where that is not known."""
        soft = resource.getrlimit(resource.RLIMIT_NOFILE)[0]
        if soft == resource.RLIM_INFINITY:
            return None
        if self._spare is not None:
            os.close(self._spare)  # the listing takes its place
            self._spare = None
        try:
            in_use = len(os.listdir("/proc/self/fd")) - 1  # less the listing's own descriptor
        except FileNotFoundError:  # no procfs: not known
            return None
        except OSError:  # EMFILE, ENFILE: none left
            return 0
        finally:
            self._keep_spare()
        held = 0 if self._spare is None else 1  # the spare, taken again after the listing
        return int(soft) - in_use - held - fd_reserve(int(soft))

    def close(self) -> None:
        if self._spare is not None:
            os.close(self._spare)
            self._spare = None


@dataclass(frozen=True)
class ServerStats:
    """What the server did since it started (counts of connections)."""

    accepted: int
    open: int
    evicted: int
    refused: int
    timed_out: int
    accept_paused: int


class _Handler(WSGIRequestHandler):
    """One connection: reads with the server's timeout, logs nothing per request."""

    def setup(self) -> None:
        self.request.settimeout(self.server.timeout_s)  # type: ignore[attr-defined]
        super().setup()

    def parse_request(self) -> bool:
        ok = super().parse_request()  # the request line and the headers are in
        if ok:
            self.server.mark_busy(self.connection)  # type: ignore[attr-defined]
        return ok

    def log_message(self, format: str, *args: Any) -> None:
        pass


class MetricsServer(ThreadingMixIn, WSGIServer):
    """A thread per connection, within the bounds of the module docstring."""

    daemon_threads = True
    block_on_close = False  # close() shuts the connections down instead of waiting for them
    # Connections the kernel holds until they are accepted (5 by default): a burst of clients
    # waits there, taking no descriptor of this process, instead of retrying a second later.
    request_queue_size = 128

    def __init__(self, address: tuple[str, int], family: int, timeout_s: float, cap: int) -> None:
        self.address_family = family
        self.timeout_s = timeout_s
        self.max_connections = cap
        self._lock = threading.Lock()
        # connection -> (deadline on the monotonic clock, busy: its request is being answered)
        self._open: dict[socket.socket, tuple[float, bool]] = {}
        self._evicted: set[socket.socket] = set()
        self._wake = threading.Event()  # set by shutdown(): ends a pause of accepting at once
        self._pause = 0.0
        self._fds: _FdCount | None = None
        self._log = RateLimitedLog(logger)  # faults of the server's own, not of its clients
        self._counts = dict.fromkeys(
            ("accepted", "evicted", "refused", "timed_out", "accept_paused"), 0
        )
        super().__init__(address, _Handler)
        self._fds = _FdCount()  # after the bind: a failed one closes the server, and keeps none

    def stats(self) -> ServerStats:
        """Counts since the server started; ``open``: connections open now."""
        with self._lock:
            return ServerStats(open=len(self._open), **self._counts)

    # -- accepting ---------------------------------------------------------------------------

    def get_request(self) -> tuple[socket.socket, Any]:
        left = self._fds.left() if self._fds is not None else None
        if left is not None and left < 1:
            self._pause_accepting()
            raise OSError(errno.EMFILE, "descriptors kept for the recorder")
        try:
            request = super().get_request()
        except OSError as exc:
            if exc.errno in _NO_RESOURCES:
                self._pause_accepting()
            raise  # the serve loop drops it and selects again
        self._pause = 0.0
        return request

    def _pause_accepting(self) -> None:
        self._pause = min(max(self._pause * 2, _PAUSE_S[0]), _PAUSE_S[1])
        with self._lock:
            self._counts["accept_paused"] += 1
        self._wake.wait(self._pause)

    def process_request(self, request: Any, client_address: Any) -> None:
        with self._lock:
            admitted = self._admit(request)
        if admitted:
            super().process_request(request, client_address)
        else:
            self.shutdown_request(request)

    def _admit(self, request: socket.socket) -> bool:
        """Whether ``request`` gets a thread (called with the lock held)."""
        if len(self._open) - len(self._evicted) >= self.max_connections:
            waiting = [
                c for c, (_, busy) in self._open.items() if not busy and c not in self._evicted
            ]
            # Evicted connections keep their descriptor until their thread closes it (at once):
            # no more than max_connections of them at a time.
            if not waiting or len(self._evicted) >= self.max_connections:
                self._counts["refused"] += 1
                return False
            oldest = min(waiting, key=lambda c: self._open[c][0])
            self._evicted.add(oldest)
            self._counts["evicted"] += 1
            _hang_up(oldest)
        self._open[request] = (time.monotonic() + self.timeout_s, False)
        self._counts["accepted"] += 1
        return True

    def mark_busy(self, request: socket.socket) -> None:
        with self._lock:
            if request in self._open:
                self._open[request] = (self._open[request][0], True)

    def process_request_thread(self, request: Any, client_address: Any) -> None:
        try:
            super().process_request_thread(request, client_address)
        finally:
            with self._lock:
                self._open.pop(request, None)
                self._evicted.discard(request)

    def handle_error(self, request: Any, client_address: Any) -> None:
        # A client gone or too slow (timeouts, resets, a hang-up by the deadline) is an OSError:
        # not worth a traceback on stderr, the next scrape is another connection. Anything else
        # is the server's own fault and every scrape may hit it: a warning, once a period.
        if isinstance(sys.exc_info()[1], OSError):
            logger.debug(
                "stroboscope: /metrics connection from %s ended", client_address, exc_info=True
            )
            return
        self._log(
            logging.WARNING,
            "stroboscope: /metrics connection from %s failed in the server, the scrape got no "
            "answer: %s",
            client_address,
            _name_of(sys.exc_info()[1]),
            exc_info=True,
        )

    # -- deadlines and closing ---------------------------------------------------------------

    def service_actions(self) -> None:
        """Hang up connections past their deadline (run by the serve loop between selects)."""
        now = time.monotonic()
        with self._lock:
            late = [c for c, (deadline, _) in self._open.items() if deadline <= now]
            for conn in late:
                self._open[conn] = (float("inf"), True)  # hung up once
                self._counts["timed_out"] += 1
        for conn in late:
            _hang_up(conn)

    def shutdown(self) -> None:
        self._wake.set()
        super().shutdown()

    def server_close(self) -> None:
        super().server_close()
        if self._fds is not None:
            self._fds.close()
        with self._lock:
            still = list(self._open)
        for conn in still:  # their threads see the end at once and close their descriptor
            _hang_up(conn)


def _name_of(exc: BaseException | None) -> str:
    return f"{type(exc).__name__}: {exc}" if exc is not None else "unknown error"


def _hang_up(conn: socket.socket) -> None:
    """End a connection another thread serves: its reads see the end, its writes fail, and that
    thread closes the descriptor (closing it here could close a descriptor reused meanwhile)."""
    with contextlib.suppress(OSError):  # already closed by its thread, or the peer is gone
        conn.shutdown(socket.SHUT_RDWR)


def serve(
    registry: Any,
    port: int,
    addr: str,
    *,
    who: str,
    timeout: float = DEFAULT_TIMEOUT_S,
    max_connections: int = DEFAULT_MAX_CONNECTIONS,
) -> tuple[MetricsServer, threading.Thread, int]:
    """Serve ``registry`` at ``http://addr:port/metrics`` on a daemon thread.

    ``timeout`` (seconds) bounds each connection's life and ``max_connections`` how many are
    open at once (see the module docstring). Returns ``(server, thread, bound port)``. A port
    already in use raises :class:`OSError` (``errno.EADDRINUSE``) whose message names the port
    and address and what to do.
    """
    timeout = check_timeout(timeout)
    max_connections = check_max_connections(max_connections)
    make_wsgi_app = require("prometheus_client", who, "prometheus").make_wsgi_app
    try:
        infos = socket.getaddrinfo(addr, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)
        family, _, _, _, sockaddr = infos[0]
        server = MetricsServer((str(sockaddr[0]), port), family, timeout, max_connections)
    except OSError as exc:
        if exc.errno == errno.EADDRINUSE:
            raise OSError(
                errno.EADDRINUSE,
                f"{who} cannot serve /metrics on port {port} of {addr}: the port is already in "
                "use (another exporter or process listens there); pass another port, or "
                "port=0 for any free one",
            ) from exc
        raise OSError(
            exc.errno, f"{who} cannot serve /metrics on port {port} of {addr}: {exc.strerror}"
        ) from exc
    server.set_app(_metrics_only(make_wsgi_app(registry)))
    # The serve loop checks the deadlines between selects: a few times per timeout.
    poll = min(0.5, timeout / 4)
    thread = threading.Thread(
        target=server.serve_forever, args=(poll,), name="stroboscope-metrics", daemon=True
    )
    thread.start()
    return server, thread, int(server.server_port)


METRICS_PATH = "/metrics"
"""The one path a scrape reads (:func:`scrape_url`); every other path is answered 404."""


def _metrics_only(app: Any) -> Any:
    """``app`` (a WSGI application that collects on every call) served at
    :data:`METRICS_PATH` alone: any other path (``/health``, ``/``, ``/favicon.ico``) gets a
    404 without calling it, so only a scrape runs a collection (an exporter's window moves)."""

    def routed(environ: dict[str, Any], start_response: Any) -> Any:
        if environ.get("PATH_INFO") == METRICS_PATH:
            return app(environ, start_response)
        body = f"not found: the metrics are at {METRICS_PATH}\n".encode()
        start_response(
            "404 Not Found",
            [("Content-Type", "text/plain; charset=utf-8"), ("Content-Length", str(len(body)))],
        )
        return [body]

    return routed


def scrape_url(addr: str, port: int) -> str:
    """``http://addr:port/metrics`` (an IPv6 address in brackets)."""
    host = f"[{addr}]" if ":" in addr else addr
    return f"http://{host}:{port}{METRICS_PATH}"


def shutdown(server: Any, thread: threading.Thread) -> None:
    """Stop serving, release the port, end the open connections and join the server thread."""
    server.shutdown()
    server.server_close()
    thread.join(timeout=5.0)
