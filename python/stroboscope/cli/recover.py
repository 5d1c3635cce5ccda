"""``stroboscope recover SPOOL -o FILE``: every row of a spool and its segments, to a file."""

from __future__ import annotations

import argparse
from typing import Any

from stroboscope.cli import _args
from stroboscope.export.writers import output_format, write_table
from stroboscope.recording.spool import recover


def run(args: argparse.Namespace) -> int:
    """The ``recover`` command; returns the exit code."""
    output_format(args.output)  # a bad suffix fails before the spool is read
    _args.check_output_not_spool(args.output, args.spool, "SPOOL")
    frame = recover(args.spool)
    fmt = write_table(frame.to_arrow(), args.output)
    print(f"recovered {len(frame)} rows from {args.spool} to {args.output} ({fmt})")
    if frame.rows_lost:
        print(f"{frame.rows_lost} rows were overwritten in the ring before a segment took them")
    return 0


def add_parser(sub: Any) -> None:
    """Add ``recover`` to the subcommands."""
    p = sub.add_parser("recover", help="write every row of a spool (and its segments) to a file")
    p.add_argument("spool", help="the spool file (Sampler(spool=...) or record's FILE.spool)")
    p.add_argument("-o", "--output", required=True, help=".parquet/.pq or .csv")
    p.set_defaults(func=run)
