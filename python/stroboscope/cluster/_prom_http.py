"""Serving a prometheus_client registry over HTTP: argument checks, a clear error for a port in
use, the scrape URL and shutdown. Shared by the exporter and the Prometheus sender."""

from __future__ import annotations

import errno
import threading
from typing import Any

DEFAULT_PORT = 9464
"""The port OpenTelemetry's Prometheus exporter uses by default, and so do we."""


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


def serve(registry: Any, port: int, addr: str, *, who: str) -> tuple[Any, threading.Thread, int]:
    """Serve ``registry`` at ``http://addr:port/metrics`` on a daemon thread.

    Returns ``(server, thread, bound port)``. A port already in use raises :class:`OSError`
    (``errno.EADDRINUSE``) whose message names the port and address and what to do.
    """
    try:
        from prometheus_client import start_http_server
    except ImportError as exc:
        err = ImportError(
            f"{who} needs prometheus_client, which is not installed ({exc}); "
            "install it with: pip install 'stroboscope[prometheus]'"
        )
        err.name = exc.name
        raise err from exc
    try:
        started = start_http_server(port, addr=addr, registry=registry)
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
    if not isinstance(started, tuple):  # prometheus_client < 0.17 returns None
        raise ImportError(
            f"{who} needs prometheus_client >= 0.17; "
            "install it with: pip install -U 'stroboscope[prometheus]'"
        )
    server, thread = started
    return server, thread, int(server.server_port)


def scrape_url(addr: str, port: int) -> str:
    """``http://addr:port/metrics`` (an IPv6 address in brackets)."""
    host = f"[{addr}]" if ":" in addr else addr
    return f"http://{host}:{port}/metrics"


def shutdown(server: Any, thread: threading.Thread) -> None:
    """Stop serving, release the port and join the server thread."""
    server.shutdown()
    server.server_close()
    thread.join(timeout=5.0)
