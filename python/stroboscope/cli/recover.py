"""``stroboscope recover SPOOL -o FILE``: every row of a spool and its segments, to a file, and
the scope calls of its events sidecar to ``<stem>.scopes.parquet`` beside it."""

from __future__ import annotations

import argparse
import sys
from typing import Any

from stroboscope.analysis.scope_edges import recovered_intervals
from stroboscope.cli import _args
from stroboscope.formats.provenance import from_schema
from stroboscope.formats.spool_header import spool_in_use
from stroboscope.formats.spool_read import recover_parts
from stroboscope.formats.writers import output_format, write_parts
from stroboscope.recording._finish import write_scopes_beside


def run(args: argparse.Namespace) -> int:
    """The ``recover`` command; returns the exit code."""
    output_format(args.output)  # a bad suffix fails before the spool is read
    _args.check_output_not_spool(args.output, args.spool, "SPOOL")  # said first: the worse
    _args.check_output(args.output, args.force)
    writer = spool_in_use(args.spool)
    if writer is not None:  # read all the same: a look at a run still going is a fair ask
        print(
            f"stroboscope recover: note: {args.spool} is still being written (pid {writer}): "
            f"these are its rows so far",
            file=sys.stderr,
        )
    got = recover_parts(args.spool)  # one segment in memory at a time, however long the run
    fmt = write_parts(got.schema, got.parts, args.output)
    print(f"recovered {got.rows} rows from {args.spool} to {args.output} ({fmt})")
    # The scopes of its events sidecar, beside the rows as a clean end writes them.
    intervals = recovered_intervals(got.events)
    scopes = write_scopes_beside(intervals, args.output, from_schema(got.schema) or {})
    if scopes is not None:
        print(f"recovered {intervals.num_rows} scope calls to {scopes}")
    if got.rows_lost:
        print(
            f"{got.rows_lost} rows were lost (overwritten in the ring before a segment took them)"
        )
    for why in got.skipped:
        print(f"left out: {why}")
    return 0


def add_parser(sub: Any) -> None:
    """Add ``recover`` to the subcommands."""
    p = sub.add_parser("recover", help="write every row of a spool (and its segments) to a file")
    p.add_argument("spool", help="the spool file (Sampler(spool=...) or record's FILE.spool)")
    p.add_argument("-o", "--output", required=True, help=".parquet/.pq or .csv")
    p.add_argument(
        "--force",
        action="store_true",
        help="replace an existing output file (and the scope intervals beside it)",
    )
    p.set_defaults(func=run)
