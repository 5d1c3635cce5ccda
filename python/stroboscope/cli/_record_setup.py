"""What ``stroboscope record`` builds before it samples: the output and spool paths checked, the
sampler (and its spool) on the command's pid, the publisher, the exporters and the watchdog that
writes the output if this process dies; and the lines that say what is about to run.

Part of :mod:`stroboscope.cli.record` (which imports these names); a failed build removes what it
made, so the command, held at its gate, never runs.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import sys

from stroboscope._base.checks import check_path
from stroboscope._base.identity import Identity
from stroboscope.cli import _args, _dataset, _exporters
from stroboscope.cli._command import Command, Events
from stroboscope.cli._publish import RecordPublisher
from stroboscope.cli._signals import say
from stroboscope.formats.dataset import part_seconds
from stroboscope.formats.spool_read import remove_spool
from stroboscope.formats.writers import output_format
from stroboscope.recording import prepare
from stroboscope.recording.sampler import Sampler, ring_segment_seconds
from stroboscope.recording.watchdog import DumpJob, Watchdog
from stroboscope.sampling import check_capacity
from stroboscope.scopes import nvtx_taken_by


def check_paths(args: argparse.Namespace) -> tuple[str | None, str, str | None]:
    """The output's format (None with ``--dataset`` alone), the spool, and the private
    directory of a temporary spool (to remove at the end; None when there is none)."""
    if args.output is None:
        spool, private = _dataset.private_spool(args)
        return None, spool, private
    fmt = output_format(args.output)  # a bad suffix fails before anything is recorded
    _args.check_output(args.output, args.force)
    spool = f"{args.output}.spool" if args.spool is None else check_path("--spool", args.spool)
    _args.check_output_not_spool(args.output, spool, "--spool")
    return fmt, spool, None


def build_recorder(
    args: argparse.Namespace,
    pid: int | None,
    spool: str,
    fmt: str | None,
    who: Identity | None,
    exporters: contextlib.ExitStack,
    events_dir: str | None = None,
) -> tuple[Sampler, RecordPublisher | None, Watchdog | None]:
    # The segment writer must drain before the ring wraps: every quarter of the ring, so the
    # ring keeps three quarters in hand. A segment only when the ring needs it: a run the ring
    # holds writes none, its rows go once to FILE (the dataset's parts: at most every 10 s).
    ring_rows = check_capacity(args.capacity, "--capacity")
    segment_s = (
        ring_segment_seconds(ring_rows, args.interval)
        if args.dataset is None
        else part_seconds(ring_rows, args.interval)
    )
    if who is None:
        sampler = Sampler(
            args.interval,
            pid=pid,
            sources=args.sources,
            capacity=args.capacity,
            spool=spool,
            segment_seconds=segment_s,
            stacks=args.stacks,
        )
    else:  # a rank of a dataset: its role's sources (host-wide ones once per node)
        if args.stacks:
            raise ValueError("--stacks is written beside -o FILE; a --dataset rank has none yet")
        sampler = _dataset.rank_sampler(
            args, who, pid=pid, capacity=args.capacity, spool=spool, segment_seconds=segment_s
        )
    prepare(sampler)  # its last rows go from the ring to FILE, not to a segment first
    if args.pid is not None:
        sampler.provenance()  # --pid: its command line, read as soon as its files are open
    publisher = None
    try:
        publisher = RecordPublisher.from_args(args, sampler.columns)
        for line in _exporters.start(args, sampler, exporters):  # a port in use fails here
            print(line, file=sys.stderr)
        # If this process dies (SIGKILL, OOM, a crash), the watchdog writes FILE from the spool,
        # then removes the spool as a clean run does (only once FILE is complete), so the next
        # run on FILE is not blocked by it.
        watchdog = None
        if args.output is not None and fmt is not None:  # --dataset alone: parts, no FILE
            job = DumpJob(
                "spool",
                spool,
                dump=args.output,
                format=fmt,
                remove_source=not args.keep_spool,
                events_dir=events_dir,  # the command's scopes, beside FILE
            )
            watchdog = Watchdog([job])
            try:
                watchdog.start()
            except OSError as exc:  # its pipes and child process: out of descriptors, ...
                raise OSError(
                    exc.errno, f"cannot start the watchdog process that writes -o: {exc.strerror}"
                ) from exc
    except BaseException:
        exporters.close()
        if publisher is not None:
            publisher.abandon()
        sampler.close()
        remove_spool(spool)  # this run made it and nothing was recorded
        raise
    return sampler, publisher, watchdog


def startup_lines(
    args: argparse.Namespace, sampler: Sampler, command: Command | None, events: Events
) -> None:
    """What the recording is about to do, when it is not obvious from the command line."""
    if events.env is not None and not args.no_nvtx:
        other = nvtx_taken_by(events.env)
        if other is not None:
            say(
                f"NVTX_INJECTION64_PATH is set to {other!r} (another tool's): the command's NVTX "
                f"ranges go to it, not to this recording"
            )
    if command is None and args.pid is None:
        if args.duration is None:
            say("recording until Ctrl-C (use --duration S to stop by itself)")
        if any(c.name.startswith("proc.") for c in sampler.columns):
            say(
                f"no --pid or command: the proc.* columns describe this recorder (pid "
                f"{os.getpid()}); give --pid PID, or a command after --, to record another process"
            )
