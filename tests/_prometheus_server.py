"""A real Prometheus server for tests: loopback only, generated config, storage in tmp_path."""

from __future__ import annotations

import json
import socket
import subprocess
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from _binaries import binary

WAIT_S = 180.0  # generous: the suite runs with both cores busy; polls return as soon as ready


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class Prometheus:
    """A running server: ``query()`` calls its HTTP API (``/api/v1/...``)."""

    def __init__(self, url: str, process: subprocess.Popen[bytes], log: Path) -> None:
        self.url = url
        self.process = process
        self.log = log

    def api(self, path: str, **params: str) -> Any:
        query = urllib.parse.urlencode(params)
        with urllib.request.urlopen(f"{self.url}/api/v1/{path}?{query}", timeout=30) as r:
            body = json.loads(r.read())
        assert body["status"] == "success", body
        return body["data"]

    def query(self, promql: str) -> list[dict[str, Any]]:
        """Result of an instant query (a list of series: ``metric`` labels and ``value`` or
        ``values`` for a range selector)."""
        result: list[dict[str, Any]] = self.api("query", query=promql)["result"]
        return result

    def wait_for(self, what: str, ready: Any, timeout: float = WAIT_S) -> Any:
        """Poll ``ready()`` until it returns something truthy; fail with the server's log."""
        deadline = time.monotonic() + timeout
        while True:
            assert self.process.poll() is None, f"prometheus exited: {self.log.read_text()}"
            value = ready()
            if value:
                return value
            if time.monotonic() > deadline:
                raise AssertionError(f"waited {timeout:.0f} s for {what}; log:\n{self.tail()}")
            time.sleep(0.2)

    def tail(self) -> str:
        return "\n".join(self.log.read_text(errors="replace").splitlines()[-30:])


def _ready(url: str) -> bool:
    try:
        with urllib.request.urlopen(f"{url}/-/ready", timeout=5) as r:
            return bool(r.status == 200)
    except (urllib.error.URLError, OSError):
        return False


@contextmanager
def prometheus(tmp: Path, targets: list[str], *, honor_labels: bool = True) -> Iterator[Prometheus]:
    """Run ``prometheus`` scraping ``targets`` (host:port) every second, on loopback."""
    program = binary("prometheus", install="apt-get install prometheus")
    config = tmp / "prometheus.yml"
    target_list = ", ".join(f"'{t}'" for t in targets)
    config.write_text(
        "global:\n  scrape_interval: 1s\n  scrape_timeout: 1s\n"
        "scrape_configs:\n"
        "  - job_name: stroboscope\n"
        f"    honor_labels: {'true' if honor_labels else 'false'}\n"
        f"    static_configs:\n      - targets: [{target_list}]\n"
    )
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    log = tmp / "prometheus.log"
    with open(log, "wb") as out:
        process = subprocess.Popen(
            [
                program,
                f"--config.file={config}",
                f"--storage.tsdb.path={tmp / 'tsdb'}",
                f"--web.listen-address=127.0.0.1:{port}",
                "--storage.tsdb.retention.time=1h",
            ],
            stdout=out,
            stderr=subprocess.STDOUT,
        )
    server = Prometheus(url, process, log)
    try:
        server.wait_for("prometheus to be ready", lambda: _ready(url))
        yield server
    finally:
        process.terminate()
        try:
            process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
