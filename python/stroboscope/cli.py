"""The ``stroboscope`` command: ``record`` metrics to Parquet/CSV, ``info`` on what works here."""

from __future__ import annotations

import argparse
import contextlib
import math
import signal
import subprocess
import sys
import time
from collections.abc import Sequence
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from stroboscope._frame import output_format, write_table
from stroboscope._gpu import gpu_status
from stroboscope._sampler import Sampler, available_sources
from stroboscope.senders.cli import RecordPublisher, add_sender_arguments
from stroboscope.spool import recover, remove_spool
from stroboscope.watchdog import DumpJob, Watchdog

WAIT_PERIOD_S = 0.25


def _parse_sources(text: str | None) -> dict[str, float | None] | None:
    """``"cpu,memory,disk=1"`` → ``{"cpu": None, "memory": None, "disk": 1.0}``."""
    if text is None:
        return None
    out: dict[str, float | None] = {}
    for part in text.split(","):
        part = part.strip()
        if not part:
            continue
        name, _, every = part.partition("=")
        try:
            out[name.strip()] = float(every) if every else None
        except ValueError:
            raise SystemExit(
                f"--sources: {every!r} in {part!r} is not a number of seconds"
            ) from None
    return out


def _fmt(value: float, unit: str) -> str:
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "-"
    magnitude = abs(value)
    if unit in ("bytes", "bytes/s"):
        for scale, suffix in ((1 << 30, "Gi"), (1 << 20, "Mi"), (1 << 10, "Ki")):
            if magnitude >= scale:
                return f"{value / scale:.2f} {suffix}"
        return f"{value:.0f}"
    if magnitude >= 1e6 or (magnitude < 1e-2 and magnitude != 0):
        return f"{value:.3g}"
    return f"{value:.2f}"


def summarize(table: pa.Table, units: dict[str, str]) -> str:
    """A plain-text table: per metric column its unit, samples, mean, min, max and last value."""
    header = ("column", "unit", "samples", "mean", "min", "max", "last")
    rows: list[tuple[str, ...]] = []
    for name in table.column_names:
        if name in ("time", "mono_ns"):
            continue
        col = table.column(name)
        valid = col.drop_null()
        unit = units.get(name, "")
        if len(valid) == 0:
            rows.append((name, unit, "0", "-", "-", "-", "-"))
            continue
        as_float = valid.cast(pa.float64())
        mm = pc.min_max(as_float)
        rows.append(
            (
                name,
                unit,
                str(len(valid)),
                _fmt(pc.mean(as_float).as_py(), unit),
                _fmt(mm["min"].as_py(), unit),
                _fmt(mm["max"].as_py(), unit),
                _fmt(as_float[-1].as_py(), unit),
            )
        )
    widths = [
        max(len(h), *(len(r[i]) for r in rows)) if rows else len(h) for i, h in enumerate(header)
    ]
    lines = ["  ".join(h.ljust(w) for h, w in zip(header, widths))]
    lines.append("  ".join("-" * w for w in widths))
    for r in rows:
        lines.append(
            "  ".join(
                (v.ljust(w) if i < 2 else v.rjust(w)) for i, (v, w) in enumerate(zip(r, widths))
            )
        )
    return "\n".join(lines)


def _record(args: argparse.Namespace) -> int:
    output_format(args.output)  # a bad suffix fails before anything is recorded
    command: list[str] = list(args.command or [])
    if command and command[0] == "--":
        command = command[1:]
    if command and args.pid is not None:
        raise SystemExit("record: give either --pid or a command after --, not both")
    if not command and args.duration is None:
        print("recording until Ctrl-C (use --duration S to stop by itself)", file=sys.stderr)

    child: subprocess.Popen[bytes] | None = None
    pid = args.pid
    if command:
        try:
            child = subprocess.Popen(command)
        except OSError as exc:
            raise SystemExit(f"record: cannot run {command[0]!r}: {exc}") from None
        pid = child.pid

    fmt = output_format(args.output)
    spool = args.spool or f"{args.output}.spool"
    # The segment writer must drain before the ring wraps: a quarter of the ring, at most 10 s.
    ring_rows = 1 << (max(args.capacity, 2) - 1).bit_length()
    segment_s = min(10.0, max(args.interval, ring_rows * args.interval / 4))
    try:
        sampler = Sampler(
            args.interval,
            pid=pid,
            sources=_parse_sources(args.sources),
            capacity=args.capacity,
            spool=spool,
            segment_seconds=segment_s,
        )
        units = {c.name: c.unit for c in sampler.schema}
        publisher = RecordPublisher.from_args(args, sampler.schema)
        # If this process dies (SIGKILL, OOM, a crash), the watchdog writes FILE from the spool.
        watchdog = Watchdog([DumpJob("spool", spool, dump=args.output, format=fmt)])
        watchdog.start()
    except BaseException:
        if child is not None:  # setup failed: do not leave the command running unattended
            child.kill()
            child.wait()
        raise
    exit_code = 0
    interrupted = False
    started = time.monotonic()
    sampler.start()
    try:
        while True:
            wait = WAIT_PERIOD_S
            if args.duration is not None:
                wait = min(wait, args.duration - (time.monotonic() - started))
            if child is not None:
                with contextlib.suppress(subprocess.TimeoutExpired):
                    child.wait(timeout=max(wait, 0.0))
            elif wait > 0:
                time.sleep(wait)
            if publisher is not None:
                publisher.feed(sampler.drain().to_arrow())
            if child is not None and child.poll() is not None:
                break
            if args.duration is not None and time.monotonic() - started >= args.duration:
                break
    except KeyboardInterrupt:
        interrupted = True
    finally:
        sampler.close()
        if publisher is not None:
            publisher.feed(sampler.drain().to_arrow())
            publisher.close()
        if child is not None:
            if interrupted and child.poll() is None:
                child.send_signal(signal.SIGINT)
            exit_code = child.wait()
    table = recover(spool)  # the segments and the ring: every row once, in order
    write_table(table, args.output)
    watchdog.stop()
    if not args.keep_spool:
        remove_spool(spool)
    elapsed = time.monotonic() - started
    stats = sampler.stats()
    print(
        f"recorded {table.num_rows} rows x {table.num_columns} columns over {elapsed:.2f} s "
        f"to {args.output} ({fmt})"
    )
    print(
        f"sampler: interval {args.interval * 1e3:g} ms, ticks taken {stats['ticks_taken']}, "
        f"missed {stats['ticks_missed']}, lateness p50/p99 "
        f"{stats['lateness_p50_ns'] / 1e3:.1f}/{stats['lateness_p99_ns'] / 1e3:.1f} µs, "
        f"cost/tick {stats['cost_mean_ns'] / 1e3:.1f} µs, "
        f"sampler CPU {100 * stats['thread_cpu_ns'] / 1e9 / max(elapsed, 1e-9):.2f} %, "
        f"rows lost {stats['segment_rows_lost']}"
    )
    for src in stats["sources"]:
        if src["reason"]:
            print(f"source {src['name']}: {src['reason']} ({src['failures']} failed reads)")
    print()
    print(summarize(table, units))
    return exit_code


def _recover(args: argparse.Namespace) -> int:
    output_format(args.output)
    table = recover(args.spool)
    fmt = write_table(table, args.output)
    lost = int((table.schema.metadata or {}).get(b"stroboscope.rows_lost", b"0"))
    print(f"recovered {table.num_rows} rows from {args.spool} to {args.output} ({fmt})")
    if lost:
        print(f"{lost} rows were overwritten in the ring before a segment took them")
    return 0


def _info(args: argparse.Namespace) -> int:
    infos = available_sources(pid=args.pid)
    width = max(len(i["name"]) for i in infos)
    print("sources:")
    for info in infos:
        state = "default" if info["default"] else ("opt-in" if info["available"] else "unavailable")
        line = f"  {info['name'].ljust(width)}  {state:<11}  {info['help']}"
        if not info["available"] and info["reason"]:
            line += f" — {info['reason']}"
        print(line)
    print()
    print("gpus:")
    for text_line in gpu_status()["text"].rstrip().splitlines():
        print(f"  {text_line}")
    return 0


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="stroboscope",
        description="Record system, process and GPU metrics at millisecond rates.",
    )
    sub = parser.add_subparsers(dest="cmd", required=True)
    rec = sub.add_parser(
        "record",
        help="record metrics to a Parquet or CSV file and print a summary",
        usage="stroboscope record [options] -o FILE [-- COMMAND ARGS...]",
    )
    rec.add_argument(
        "-o", "--output", required=True, help="output file; .parquet/.pq or .csv chooses the format"
    )
    rec.add_argument(
        "--interval",
        type=float,
        default=0.01,
        metavar="S",
        help="sampling interval in seconds (default 0.01; 0.0001 to 3600)",
    )
    rec.add_argument(
        "--duration",
        type=float,
        default=None,
        metavar="S",
        help="stop after S seconds (default: until the command exits or Ctrl-C)",
    )
    rec.add_argument("--pid", type=int, default=None, help="process to monitor")
    rec.add_argument(
        "--sources",
        default=None,
        metavar="LIST",
        help="comma-separated sources, NAME or NAME=SECONDS (see `stroboscope info`)",
    )
    rec.add_argument(
        "--capacity",
        type=int,
        default=1 << 16,
        metavar="ROWS",
        help="ring capacity in rows (default 65536)",
    )
    rec.add_argument(
        "--spool",
        default=None,
        metavar="PATH",
        help="crash-safe spool file (default: FILE.spool, removed after a clean run)",
    )
    rec.add_argument(
        "--keep-spool",
        action="store_true",
        help="keep the spool and its segments after writing FILE",
    )
    rec.add_argument(
        "command",
        nargs=argparse.REMAINDER,
        help="command to run and monitor until it exits (after --)",
    )
    add_sender_arguments(rec)
    rec.set_defaults(func=_record)
    rec_ = sub.add_parser("recover", help="write every row of a spool (and its segments) to a file")
    rec_.add_argument("spool", help="the spool file (Sampler(spool=...) or record's FILE.spool)")
    rec_.add_argument("-o", "--output", required=True, help=".parquet/.pq or .csv")
    rec_.set_defaults(func=_recover)
    info = sub.add_parser("info", help="list the sources (and GPUs) available here, and why not")
    info.add_argument(
        "--pid", type=int, default=None, help="process the process sources would read"
    )
    info.set_defaults(func=_info)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``stroboscope`` command; returns the exit code."""
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        result: Any = args.func(args)
    except (ValueError, TypeError, OSError, RuntimeError) as exc:
        print(f"stroboscope {args.cmd}: error: {exc}", file=sys.stderr)
        return 2
    return int(result)


if __name__ == "__main__":  # pragma: no cover
    raise SystemExit(main())
