"""PrometheusExporter without a Prometheus server: exact windows on rows made with tick_now(),
a ring that overflows between scrapes, collections that fail while the sampler keeps going, a
port in use, labels from Kubernetes and from CUDA ordinals, and bad arguments."""

from __future__ import annotations

import errno
import gc
import os
import socket
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest

pytest.importorskip("prometheus_client")  # the prometheus extra
from prometheus_client import generate_latest
from prometheus_client.parser import text_string_to_metric_families
from stroboscope._base.identity import detect_identity
from stroboscope.cluster.prometheus import PrometheusExporter
from stroboscope.sampling import CoreSampler as Sampler

ME = detect_identity({"RANK": "0", "WORLD_SIZE": "1", "STROBOSCOPE_JOB": "j7"}, host="h1")
Scrape = dict[tuple[str, tuple[tuple[str, str], ...]], float]


def parse(text: str) -> Scrape:
    """``{(sample name, sorted labels): value}`` of an exposition."""
    out: Scrape = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            out[(sample.name, tuple(sorted(sample.labels.items())))] = float(sample.value)
    return out


def scrape(exporter: PrometheusExporter) -> Scrape:
    return parse(generate_latest(exporter.registry).decode())


def value(scraped: Scrape, name: str, **labels: str) -> float | None:
    want = {"hostname": "h1", "job": "j7", "rank": "0", **labels}
    return scraped.get((name, tuple(sorted(want.items()))))


def column(s: Sampler, name: str, rows: slice) -> np.ndarray[Any, Any]:
    frame = s.snapshot()
    cells = frame.to_arrow().column(name).to_numpy(zero_copy_only=False)
    first = frame.first_row
    return np.asarray(cells[rows.start - first : rows.stop - first], dtype=np.float64)


def test_windows_follow_the_rows_exactly_and_count_overwritten_ones() -> None:
    s = Sampler(0.001, sources={"memory": None, "network": None}, capacity=16)
    with PrometheusExporter(s, port=0, identity=ME) as exporter:
        first = scrape(exporter)  # no rows yet: no gauges, no totals
        assert value(first, "stroboscope_exporter_window_rows") == 0
        assert value(first, "stroboscope_mem_available_bytes") is None
        assert value(first, "stroboscope_net_recv_bytes_total") is None
        assert value(first, "stroboscope_exporter_errors_total") == 0

        assert s.tick_now(10) == 10
        second = scrape(exporter)
        mem = column(s, "mem.available_bytes", slice(0, 10))
        assert value(second, "stroboscope_mem_available_bytes") == pytest.approx(mem.mean())
        assert value(second, "stroboscope_mem_available_max_bytes") == mem.max()
        recv = column(s, "net.recv_bytes", slice(9, 10))
        assert value(second, "stroboscope_net_recv_bytes_total") == recv[-1]
        assert value(second, "stroboscope_sampler_rows_total") == 10
        assert value(second, "stroboscope_exporter_window_rows") == 10

        s.tick_now(40)  # rows 10..49 into a ring of 16: rows 10..33 are overwritten unread
        third = scrape(exporter)
        assert value(third, "stroboscope_exporter_rows_lost_total") == 24
        assert value(third, "stroboscope_exporter_window_rows") == 16
        mem = column(s, "mem.available_bytes", slice(34, 50))
        assert value(third, "stroboscope_mem_available_bytes") == pytest.approx(mem.mean())
        assert value(third, "stroboscope_sampler_rows_total") == 50

        fourth = scrape(exporter)  # nothing new: gauges leave, the counter keeps its total
        assert value(fourth, "stroboscope_exporter_window_rows") == 0
        assert value(fourth, "stroboscope_mem_available_bytes") is None
        recv_total = column(s, "net.recv_bytes", slice(49, 50))[-1]
        assert value(fourth, "stroboscope_net_recv_bytes_total") == recv_total
        assert value(fourth, "stroboscope_exporter_rows_lost_total") == 24


def http_scrape(exporter: PrometheusExporter) -> Scrape:
    with urllib.request.urlopen(exporter.url, timeout=30) as response:
        assert response.status == 200
        return parse(response.read().decode())


def rows_written(s: Sampler) -> int:
    return s.stats().rows_written


def wait_for_rows(s: Sampler, after: int) -> int:
    deadline = time.monotonic() + 60
    while rows_written(s) <= after:
        assert time.monotonic() < deadline, "the sampler wrote no row in 60 s"
        time.sleep(0.01)
    return rows_written(s)


def test_failed_collections_are_counted_and_the_sampler_keeps_going(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    s = Sampler(0.005, sources={"memory": 0.005})
    with s, PrometheusExporter(s, port=0, identity=ME) as exporter:
        good = http_scrape(exporter)
        cursor = value(good, "stroboscope_sampler_rows_total")
        assert cursor is not None

        def broken(first_row: int) -> Any:
            raise RuntimeError("ring unreadable")

        monkeypatch.setattr(s, "copy_since", broken)
        seen = rows_written(s)
        for failures in (1, 2, 3):
            seen = wait_for_rows(s, seen)  # the sampler moves on between failing scrapes
            failed = http_scrape(exporter)
            assert value(failed, "stroboscope_exporter_errors_total") == failures
            assert value(failed, "stroboscope_mem_available_bytes") is None
            assert value(failed, "stroboscope_exporter_window_rows") == 0
            assert s.running
        # Logged (rate-limited: the first at once, then at most once a minute).
        assert any("ring unreadable" in r.getMessage() for r in caplog.records)
        monkeypatch.undo()
        end = wait_for_rows(s, seen)
        healed = http_scrape(exporter)
        assert value(healed, "stroboscope_exporter_errors_total") == 3
        window = value(healed, "stroboscope_exporter_window_rows")
        after = value(healed, "stroboscope_sampler_rows_total")
        assert window is not None and after is not None
        assert after >= end and window == after - cursor  # the rows of the failed scrapes too
        assert value(healed, "stroboscope_mem_available_bytes") is not None


def test_port_in_use_names_the_port() -> None:
    from stroboscope.senders.prometheus import PrometheusSender

    s = Sampler(0.01, sources=["memory"])
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        with pytest.raises(OSError, match=f"port {port} of 127.0.0.1: the port is already in use"):
            PrometheusExporter(s, port=port, identity=ME)
        with pytest.raises(OSError, match=f"port {port} ") as info:
            PrometheusSender(port)
        assert info.value.errno == errno.EADDRINUSE
    with PrometheusExporter(s, port=0, identity=ME) as first:
        with pytest.raises(OSError, match=f"port {first.port} of 127.0.0.1") as info:
            PrometheusExporter(s, port=first.port, identity=ME)
        assert info.value.errno == errno.EADDRINUSE
        assert first.url == f"http://127.0.0.1:{first.port}/metrics"  # loopback by default
        assert http_scrape(first)  # the first one still serves
    # Closed (idempotently): the port is free again and the sampler untouched.
    first.close()
    with socket.socket() as again:  # (REUSEADDR: the closed connections' TIME_WAIT, not a listener)
        again.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        again.bind(("127.0.0.1", first.port))
        again.listen()
    assert first.closed and not s.closed


def test_kubernetes_labels_on_every_series() -> None:
    env = {
        "KUBERNETES_SERVICE_HOST": "10.0.0.1",
        "POD_NAME": "trainer-0",
        "POD_NAMESPACE": "ml",
        "CONTAINER_NAME": "main",
        "RANK": "0",
        "WORLD_SIZE": "1",
    }
    who = detect_identity(env, host="trainer-0")
    s = Sampler(0.01, sources=["memory"])
    with PrometheusExporter(s, port=0, identity=who) as exporter:
        s.tick_now(2)
        got = scrape(exporter)
    labels = {"pod": "trainer-0", "namespace": "ml", "container": "main", "rank": "0"}
    mem = [k for k in got if k[0] == "stroboscope_mem_total_bytes"]
    assert mem == [
        ("stroboscope_mem_total_bytes", tuple(sorted({**labels, "hostname": "trainer-0"}.items())))
    ]


@pytest.fixture
def two_gpus(
    fake_libs: dict[str, Path], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> Iterator[None]:
    gc.collect()
    path = tmp_path / "script.txt"
    path.write_text("devices 2\nuuid 0 GPU-00aa\nuuid 1 GPU-11bb\nset 1 power 123000\n")
    monkeypatch.setenv("STROBOSCOPE_NVML_LIBRARY", str(fake_libs["new"]))
    monkeypatch.setenv("FAKE_NVML_SCRIPT", str(path))
    yield
    gc.collect()


def gpu_power_series(gpu_samples: bool) -> Scrape:
    """The power series served for ``gpus="cuda"`` with CUDA_VISIBLE_DEVICES=1 (after one
    window with a GPU reading in it)."""
    s = Sampler(0.01, sources=["gpu"], gpus="cuda", gpu_samples=gpu_samples)
    assert "gpu.0.power_w" in s.schema.names and "gpu.1.power_w" not in s.schema.names
    with s, PrometheusExporter(s, port=0, identity=ME) as exporter:
        wait_for_rows(s, 0)
        deadline = time.monotonic() + 60
        got = scrape(exporter)
        while value(got, "stroboscope_exporter_window_rows") == 0 or not [
            k for k in got if k[0] == "stroboscope_gpu_power_watts"
        ]:
            assert time.monotonic() < deadline, "no GPU reading in 60 s"
            time.sleep(0.05)
            got = scrape(exporter)
    del s
    return {k: v for k, v in got.items() if k[0] == "stroboscope_gpu_power_watts"}


def test_gpu_label_is_the_nvml_index_as_in_dcgm_exporter(
    two_gpus: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "1")  # cuda:0 is NVML device 1
    labels = {"hostname": "h1", "job": "j7", "rank": "0", "Hostname": "h1"}
    want = {**labels, "gpu": "1", "UUID": "GPU-11bb"}
    served = gpu_power_series(True)
    assert served == {("stroboscope_gpu_power_watts", tuple(sorted(want.items()))): 123.0}


# Was a defect: without driver samples (gpu_samples=False) a Sampler kept no NVML index per
# column label, so gpus="cuda" columns were mapped to the wrong device (gpu.0 -> NVML 0, not 1).
def test_gpu_label_without_driver_samples(two_gpus: None, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "1")
    [(_, labels)] = gpu_power_series(False)
    assert ("UUID", "GPU-11bb") in labels and ("gpu", "1") in labels


@pytest.mark.parametrize(
    ("kwargs", "error", "match"),
    [
        ({"port": -1}, ValueError, "port must be an int in \\[0, 65535\\]"),
        ({"port": True}, ValueError, "port must be an int"),
        ({"port": "9464"}, ValueError, "port must be an int"),
        ({"addr": ""}, ValueError, "addr must be an address"),
        ({"addr": 127}, TypeError, "addr must be an address"),
        ({"addr": "127.0.0.1\n"}, ValueError, "addr must be an address .* without spaces"),
        ({"addr": "127.0.0.1 "}, ValueError, "addr must be an address .* without spaces"),
        ({"prefix": "1x_"}, ValueError, "prefix must be a valid start"),
        ({"prefix": "a-b"}, ValueError, "prefix must be a valid start"),
        ({"identity": "rank0"}, TypeError, "identity must be a stroboscope Identity"),
    ],
)
def test_bad_arguments(kwargs: dict[str, Any], error: type[Exception], match: str) -> None:
    s = Sampler(0.01, sources=["memory"])
    with pytest.raises(error, match=match):
        PrometheusExporter(s, **{"identity": ME, **kwargs})
    with pytest.raises(TypeError, match="sampler must be a stroboscope Sampler"):
        PrometheusExporter(object(), identity=ME)  # type: ignore[arg-type]


def test_a_cluster_sampler_lends_its_identity() -> None:
    from stroboscope import cluster

    who = detect_identity({"RANK": "3", "WORLD_SIZE": "4", "STROBOSCOPE_JOB": "j7"}, host="h1")
    s = cluster.rank_sampler(0.01, identity=who, sources=["memory"])
    with PrometheusExporter(s, port=0) as exporter:
        s.tick_now(2)
        got = scrape(exporter)
    assert exporter.identity is who
    assert value(got, "stroboscope_mem_total_bytes", rank="3") is not None
    s.close()


def test_a_forked_child_lets_go_of_the_port() -> None:
    # A DataLoader worker forked while the exporter serves must not keep the port bound after
    # the parent closes the exporter (a restart would then get EADDRINUSE).
    s = Sampler(0.01, sources=["memory"])
    exporter = PrometheusExporter(s, port=0, identity=ME)
    go, wait = os.pipe()
    child = os.fork()
    if child == 0:  # the child: hold on until the parent has checked the port
        try:
            os.read(go, 1)
        finally:
            os._exit(0)
    try:
        exporter.close()
        with socket.socket() as again:
            again.bind((exporter.addr, exporter.port))  # EADDRINUSE if the child held it
            again.listen(1)
    finally:
        os.write(wait, b"x")
        os.waitpid(child, 0)
        os.close(go)
        os.close(wait)
        s.close()
