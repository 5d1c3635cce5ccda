"""``stroboscope recover SPOOL -o FILE``: every row of a spool and its segments, to a file, and
the scope calls of its events sidecar to ``<stem>.scopes.parquet`` beside it."""

from __future__ import annotations

import argparse
import sys
from typing import TYPE_CHECKING, Any

from stroboscope.analysis.scope_edges import recovered_intervals, with_shared
from stroboscope.cli import _args
from stroboscope.formats.events_file import events_dir_of_spool, remove_events_dir_note
from stroboscope.formats.provenance import from_schema
from stroboscope.formats.shared_events import remove_events_dir
from stroboscope.formats.spool_header import spool_in_use
from stroboscope.formats.spool_read import recover_parts
from stroboscope.formats.stacks_sidecar import remove_sidecar, write_sidecar_stacks
from stroboscope.formats.writers import output_format, write_parts
from stroboscope.recording import read_shared_intervals, write_scopes_beside

if TYPE_CHECKING:
    import pyarrow as pa


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
    # The scopes of its events sidecar, beside the rows as a clean end writes them, with those
    # of a recorded command whose events directory the spool names (its recorder and watchdog
    # both died before reading it): read, then removed.
    prov = from_schema(got.schema) or {}
    intervals = recovered_intervals(got.events)
    # (not while its recorder runs: that directory is still being written and read there)
    command_dir = events_dir_of_spool(args.spool) if writer is None else None
    if command_dir is not None:
        shared = _command_scopes(command_dir)
        pid = prov.get("pid")
        intervals = with_shared(intervals, shared, pid if isinstance(pid, int) else 0)
    scopes = write_scopes_beside(intervals, args.output, prov)
    if scopes is not None:
        print(f"recovered {intervals.num_rows} scope calls to {scopes}")
    if command_dir is not None:
        remove_events_dir(command_dir)  # with what its drain kept beside it
        print(f"removed the command's events directory {command_dir} (read)")
    if writer is None:
        remove_events_dir_note(args.spool)
    # The stacks a --stacks recording drained beside it, a batch at a time.
    stacks = write_sidecar_stacks(args.spool, args.output, provenance=prov or None)
    if stacks is not None:
        print(f"recovered {stacks[0]} stack samples to {stacks[1][0]}")
        if writer is None:
            remove_sidecar(args.spool)
    if got.rows_lost or got.rows_lost_unknown:
        print(got.lost_words())
    for why in got.skipped:
        print(f"left out: {why}")
    for what in got.notes:
        print(f"note: {what}")
    return 0


def _command_scopes(events_dir: str) -> pa.Table | None:
    """The scope intervals the recorded command's processes wrote into ``events_dir`` (None,
    said on stderr, when they cannot be read: the rows are written all the same)."""
    try:
        return read_shared_intervals(events_dir)
    except Exception as exc:  # a damaged events directory never costs the recovery
        print(
            f"stroboscope recover: note: the command's scope events in {events_dir} could not "
            f"be read ({type(exc).__name__}: {exc})",
            file=sys.stderr,
        )
        return None


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
