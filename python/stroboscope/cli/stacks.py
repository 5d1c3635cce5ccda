"""``stroboscope stacks RUN.parquet [--weight cpu|wall|COLUMN] [--format
collapsed|speedscope|pprof] [-o FILE] [--from T] [--to T] [--scope NAME]``: a flame graph of the
Python stacks recorded with ``record --stacks``, each stack weighted by its thread's CPU time, by
wall time or by a metric column of the rows it fell in (:func:`stroboscope.export.flame_graph`).

The graph goes to ``-o FILE`` or standard output; what its weights mean goes to standard error
(folded stacks have no room for it)."""

from __future__ import annotations

import argparse
import os
import sys
from typing import Any


def run(args: argparse.Namespace) -> int:
    """The ``stacks`` command; returns the exit code."""
    from stroboscope._base.files import replace_private
    from stroboscope.export import BINARY_FORMATS, flame_bytes, flame_weights, time_range_ns

    binary = args.format in BINARY_FORMATS
    if args.output is not None:
        _check_output(args.output, args.force, args.recording)
    elif binary and sys.stdout.isatty():
        raise ValueError(
            f"--format {args.format} is binary: give -o FILE, or send standard output to a "
            "file or a pipe"
        )
    begin, end = time_range_ns(args.recording, args.start, args.end)
    weights = flame_weights(
        args.recording, args.weight, begin_ns=begin, end_ns=end, scope=args.scope
    )
    data = flame_bytes(weights, args.format)
    samples = int(sum(weights.stacks.column("samples").to_pylist()))
    print(
        f"stacks: {samples} samples in {weights.stacks.num_rows} stacks, weight "
        f"{weights.total:.6g} {weights.unit}. {weights.rule}",
        file=sys.stderr,
    )
    if samples == 0:
        print("stacks: no sample lies in the selection: the graph is empty", file=sys.stderr)
    if args.output is not None:
        with replace_private(args.output) as f:
            f.write(data)
        print(f"wrote {args.output}")
    else:
        sys.stdout.flush()
        sys.stdout.buffer.write(data)
    return 0


def _check_output(output: str, force: bool, recording: str) -> None:
    """``-o``: writable, in an existing directory, not the recording or a file written with it
    (its scopes, its stacks), and not an existing file unless ``--force``."""
    from stroboscope.export.report import check_not_an_input, check_output_path

    check_not_an_input(check_output_path(output), [recording])
    if os.path.lexists(output) and not force:
        raise ValueError(
            f"-o {output!r} already exists; give --force to replace it, or another path"
        )


def add_parser(sub: Any) -> None:
    """Add ``stacks`` to the subcommands."""
    from stroboscope.export import FLAME_FORMATS

    p = sub.add_parser(
        "stacks",
        help="a flame graph of the Python stacks recorded with record --stacks",
        description="Write a flame graph of the Python stacks of a recording made with "
        "`stroboscope record --stacks`: each stack weighted by its thread's CPU time (cpu), "
        "by wall time (wall) or by a metric column of the rows it fell in (gpu.0.power_w: the "
        "energy drawn while it ran; a row's value is shared between the threads sampled in it "
        "in proportion to their CPU time). What the weights mean is printed on stderr.",
    )
    p.add_argument("recording", metavar="RUN", help="the recording (RUN.parquet)")
    p.add_argument(
        "--weight",
        default="cpu",
        metavar="cpu|wall|COLUMN",
        help="what a stack weighs: its thread's CPU time (default), wall time, a metric "
        "column of the recording (gpu.0.power_w: J; disk.read_bytes: bytes; ...), or "
        "COLUMN:growth, the column's rises (proc.rss_bytes:growth: the bytes grown)",
    )
    p.add_argument(
        "--format",
        default="collapsed",
        choices=FLAME_FORMATS,
        help="collapsed: folded stacks (flamegraph.pl, inferno, speedscope; default); "
        "speedscope: speedscope's JSON; pprof: profile.proto, gzipped",
    )
    p.add_argument(
        "-o", "--output", default=None, metavar="FILE", help="write FILE (default: stdout)"
    )
    p.add_argument("--force", action="store_true", help="replace an existing -o FILE")
    p.add_argument(
        "--from",
        dest="start",
        default=None,
        metavar="TIME",
        help="first time kept: seconds after the first row (30, 1.5s, 2m) or ISO-8601",
    )
    p.add_argument("--to", dest="end", default=None, metavar="TIME", help="last time kept")
    p.add_argument(
        "--scope",
        default=None,
        metavar="NAME",
        help="only the samples of the thread that ran NAME, taken while it was open",
    )
    p.set_defaults(func=run)
