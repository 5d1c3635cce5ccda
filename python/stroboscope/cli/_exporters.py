"""``record --prometheus [ADDR:]PORT`` and ``record --otlp ENDPOINT``: serve or push the run's
metrics while it records, through :class:`stroboscope.cluster.PrometheusExporter` and
:class:`stroboscope.cluster.OTelExporter` (the API does the work; this module only parses the
options and closes what it started)."""

from __future__ import annotations

import argparse
import contextlib
import importlib
from typing import Any

from stroboscope._base.extras import missing_extra
from stroboscope.cli._args import checked, seconds
from stroboscope.sampling import CoreSampler as Sampler


def _address(text: str) -> tuple[str, int]:
    """``PORT`` or ``ADDR:PORT`` (``[v6]:PORT``) → (addr, port); the address defaults to
    127.0.0.1 so that nothing is served beyond this machine unless asked."""
    addr, sep, port = text.rpartition(":")
    if not sep:
        addr, port = "127.0.0.1", text
    addr = addr.strip("[]") or "127.0.0.1"
    if not port.isdigit() or not 0 <= int(port) <= 65535:
        raise argparse.ArgumentTypeError(
            f"expected PORT or ADDR:PORT with a port in [0, 65535], got {text!r}"
        )
    return addr, int(port)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The exporter options of ``stroboscope record``."""
    group = parser.add_argument_group("exporters (cluster deployments)")
    group.add_argument(
        "--prometheus",
        type=_address,
        default=None,
        metavar="[ADDR:]PORT",
        help="serve /metrics for a Prometheus server while recording: means and maxima over each "
        "scrape interval, counters as totals (default address 127.0.0.1; docs/prometheus.md)",
    )
    group.add_argument(
        "--otlp",
        default=None,
        metavar="ENDPOINT",
        help="push metrics to an OpenTelemetry collector, e.g. http://127.0.0.1:4318/v1/metrics "
        "(OTLP/HTTP; grpc://HOST:PORT for gRPC; docs/opentelemetry.md)",
    )
    group.add_argument(
        "--otlp-interval",
        action=checked(seconds),
        default=10.0,
        metavar="S",
        help="seconds between OTLP exports (default 10)",
    )


def check_libraries(args: argparse.Namespace) -> None:
    """Refuse ``--prometheus``/``--otlp`` when the library behind it is missing, naming the option
    and the extra that installs it, before anything is started."""
    wanted = [("--prometheus", args.prometheus, "prometheus_client", "prometheus")]
    wanted.append(("--otlp", args.otlp, "stroboscope.cluster.otel", "otel"))
    for option, value, module, extra in wanted:
        if value is None:
            continue
        try:
            importlib.import_module(module)
        except ImportError as exc:
            raise ValueError(str(missing_extra(option, extra, exc))) from None


def start(args: argparse.Namespace, sampler: Sampler, stack: contextlib.ExitStack) -> list[str]:
    """Start the exporters the options ask for on ``stack`` (closed with it, before the
    sampler); return one line each for the user. A port in use or a bad endpoint raises here,
    before the monitored command runs."""
    lines: list[str] = []
    identity: Any = getattr(sampler, "identity", None)
    if args.prometheus is not None:
        from stroboscope.cluster import PrometheusExporter

        addr, port = args.prometheus
        exporter = stack.enter_context(
            PrometheusExporter(sampler, port=port, addr=addr, identity=identity)
        )
        lines.append(f"serving Prometheus metrics at {exporter.url}")
    if args.otlp is not None:
        from stroboscope.cluster import OTelExporter

        endpoint, protocol = args.otlp, "http/protobuf"
        if endpoint.startswith("grpc://"):
            endpoint, protocol = "http://" + endpoint[len("grpc://") :], "grpc"
        otel = stack.enter_context(
            OTelExporter(
                sampler,
                endpoint=endpoint,
                protocol=protocol,
                export_interval=args.otlp_interval,
                identity=identity,
            )
        )
        where = otel.endpoint or "the OTEL_EXPORTER_OTLP_* endpoint"
        lines.append(f"exporting OTLP ({protocol}) to {where} every {args.otlp_interval:g} s")
    return lines
