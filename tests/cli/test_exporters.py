"""``stroboscope record --prometheus`` and ``--otlp``: the command line starts the cluster
exporters on its sampler, and they are served or pushed while it records (the exporters
themselves are tested in tests/cluster/test_prometheus*.py and test_otel*.py)."""

from __future__ import annotations

import re
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pyarrow.parquet as pq
import pytest


def _record(*argv: str) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-m", "stroboscope", "record", "--quiet", *argv],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def test_record_serves_prometheus_metrics_while_it_records(tmp_path: Path) -> None:
    pytest.importorskip("prometheus_client")  # the prometheus extra
    out = tmp_path / "run.parquet"
    proc = _record("-o", str(out), "--prometheus", "0", "--duration", "300")  # ended below
    assert proc.stderr is not None
    line = proc.stderr.readline()
    found = re.search(r"serving Prometheus metrics at (http://127\.0\.0\.1:\d+/metrics)", line)
    try:
        assert found, line
        text = ""
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:  # a scrape before the first memory row: ask again
            with urllib.request.urlopen(found.group(1), timeout=30) as reply:
                text = reply.read().decode()
            if "stroboscope_mem_used_bytes{" in text:
                break
            time.sleep(0.05)
        assert f'hostname="{socket.gethostname()}"' in text
        assert re.search(r"^stroboscope_mem_used_bytes\{[^}]*\} [0-9.e+]+$", text, re.M), text
    finally:
        proc.terminate()
        _, err = proc.communicate(timeout=120)
    assert proc.returncode in (0, 143, -15), err
    assert pq.read_table(out).num_rows > 0


def test_a_prometheus_port_in_use_stops_the_record_before_the_command_runs(
    tmp_path: Path,
) -> None:
    pytest.importorskip("prometheus_client")  # the prometheus extra
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen(1)
        port = taken.getsockname()[1]
        marker = tmp_path / "ran"
        proc = _record(
            "-o", str(tmp_path / "x.parquet"), "--prometheus", str(port),
            "--", sys.executable, "-c", f"open({str(marker)!r}, 'w')",
        )  # fmt: skip
        _, err = proc.communicate(timeout=120)
    assert proc.returncode != 0
    assert str(port) in err and "in use" in err, err
    assert not marker.exists() and not (tmp_path / "x.parquet").exists()


def test_bad_prometheus_address_is_named() -> None:
    proc = _record("-o", "x.parquet", "--prometheus", "127.0.0.1:99999", "--duration", "1")
    _, err = proc.communicate(timeout=120)
    assert proc.returncode == 2 and "--prometheus" in err and "[0, 65535]" in err


def test_record_pushes_otlp_while_it_records(tmp_path: Path) -> None:
    pytest.importorskip("opentelemetry.sdk")
    pytest.importorskip("opentelemetry.proto")  # the test receiver decodes with it
    from _otlp_receiver import http_receiver, metrics, resource

    server, received = http_receiver()
    try:
        endpoint = f"http://127.0.0.1:{server.server_address[1]}/v1/metrics"
        proc = _record(
            "-o", str(tmp_path / "run.parquet"), "--otlp", endpoint, "--otlp-interval", "0.2",
            "--duration", "1",
        )  # fmt: skip
        _, err = proc.communicate(timeout=120)
        assert proc.returncode == 0, err
        requests = received.wait_for(1)
    finally:
        server.shutdown()
        server.server_close()
    names = set().union(*(metrics(r) for r in requests))
    assert {"system.memory.usage", "system.cpu.utilization"} <= names, names
    assert resource(requests[-1])["host.name"] == socket.gethostname()


@pytest.mark.parametrize("scheme", ["http", "grpc"])
def test_a_hanging_otlp_endpoint_does_not_stretch_the_recording(
    tmp_path: Path, scheme: str
) -> None:
    # An endpoint that accepts and never answers: the exporter's last flush waits out its
    # bounded timeout (2 s export + 1 s here). The sampler ran on through it, so --duration 3
    # recorded ~5 s.
    pytest.importorskip("opentelemetry.sdk")
    if scheme == "grpc":
        pytest.importorskip("opentelemetry.exporter.otlp.proto.grpc")
    import threading

    held: list[socket.socket] = []
    listener = socket.create_server(("127.0.0.1", 0))

    def hold() -> None:
        while True:
            try:
                held.append(listener.accept()[0])
            except OSError:  # shut down below
                return

    holder = threading.Thread(target=hold, daemon=True)
    holder.start()
    out = tmp_path / "run.parquet"
    endpoint = f"{scheme}://127.0.0.1:{listener.getsockname()[1]}" + (
        "/v1/metrics" if scheme == "http" else ""
    )
    duration, interval = 3.0, 0.01
    try:
        proc = _record(
            "-o", str(out), "--otlp", endpoint, "--otlp-interval", "2", "--interval",
            str(interval), "--duration", str(duration),
        )  # fmt: skip
        _, err = proc.communicate(timeout=120)
    finally:
        listener.shutdown(socket.SHUT_RDWR)  # wakes the accept (close alone leaves it blocked)
        holder.join(timeout=30)
        listener.close()
        for conn in held:
            conn.close()
    assert not holder.is_alive()
    assert proc.returncode == 0, err
    mono = pq.read_table(out, columns=["mono_ns"]).column("mono_ns").to_pylist()
    span_s = (max(mono) - min(mono)) / 1e9
    # the rows cover --duration, not the flush after it: within 0.6 s (scheduling on a busy
    # machine), where the flush alone would add 2 s or more
    assert duration - 0.6 <= span_s <= duration + 0.6, span_s
