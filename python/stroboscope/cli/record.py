"""``stroboscope record``: sample to a crash-safe spool, write Parquet or CSV, print a summary.

The order of a run: check every option (``cli/_args.py``) and the paths, catch SIGTERM/SIGINT,
spawn the wrapped command held at a gate (``cli/_command.py``: it does not run yet, and dies with
this process), build the sampler (and its spool) on its pid, start the watchdog that writes the
output if this process dies, start sampling, and only once the first row exists let the command
run, so its first instant is recorded. If setup fails, the command never runs and what this run
made is removed. SIGINT and SIGTERM end the recording cleanly (passed on to the command, which is
waited for); the output is written by :func:`stroboscope.recording.finish`: the segments written
while the ring needed them, then the rows the ring still holds, every row once, in order.

The command runs with ``STROBOSCOPE_EVENTS_DIR`` naming a private directory of this run (and
``NVTX_INJECTION64_PATH`` the NVTX injection library, unless ``--no-nvtx``): the command and
every process it starts write their scope edges there, and the finish writes them as the scope
intervals beside FILE (``<stem>.scopes.parquet``) and in the dataset, then removes the directory.
A ``--pid`` process started with an events directory in its environment has it read likewise
(and left in place).

Here: the run itself (the gate, the loop, the finish). What it builds before it samples is in
``cli/_record_setup.py``; what it says at the end, in ``cli/_record_summary.py``.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import sys
import time
from typing import Any

from stroboscope._base.identity import Identity
from stroboscope._base.text import fmt_seconds
from stroboscope.cli import _args, _dataset, _exporters
from stroboscope.cli._command import Command, Events
from stroboscope.cli._publish import RecordPublisher, add_sender_arguments, check_sender_specs
from stroboscope.cli._record_setup import build_recorder, check_paths, startup_lines
from stroboscope.cli._record_summary import print_summary, scopes_line, unwritten
from stroboscope.cli._signals import WAIT_PERIOD_S, Signals, end_command, pause, say
from stroboscope.cli._status import StatusLine, wanted
from stroboscope.cli.top import check_live, start_view, stop_view
from stroboscope.formats.events_file import (
    events_dir_note,
    remove_events_dir_note,
    write_events_dir_note,
)
from stroboscope.formats.shared_events import check_events_capacity, unmade_files
from stroboscope.formats.spool_read import recover_parts
from stroboscope.formats.stacks import remove_stacks, stack_threads, write_stacks
from stroboscope.formats.stacks_sidecar import write_sidecar_stacks
from stroboscope.recording import finish
from stroboscope.recording.sampler import Sampler
from stroboscope.sampling import declined_child_events

FIRST_ROW_WAIT_S = 10.0
"""The longest the command is held back for the sampler's first row (seconds)."""


def _wait_first_row(sampler: Sampler, stop: Signals) -> None:
    """Wait until the sampler wrote its first row (taken as it starts; however long a loaded
    machine makes that, so the command's first instant is recorded). The 10 s bound is only
    for a sampler that cannot write: the command then runs anyway."""
    deadline = time.monotonic() + FIRST_ROW_WAIT_S
    while sampler.stats().rows_written == 0 and time.monotonic() < deadline:
        pause(min(sampler.interval, 0.001), stop, None)
        if stop.signum is not None:
            return


def _loop(
    args: argparse.Namespace,
    sampler: Sampler,
    publisher: RecordPublisher | None,
    command: Command | None,
    stop: Signals,
    status: StatusLine,
) -> None:
    """Sample until the duration, the command's or the process's end, or a signal."""
    started = time.monotonic()
    while stop.signum is None:
        wait = WAIT_PERIOD_S
        if args.duration is not None:
            wait = min(wait, args.duration - (time.monotonic() - started))
        pause(wait, stop, command)
        if publisher is not None:
            publisher.feed(sampler.drain().to_arrow())
        status.update(time.monotonic() - started)
        if command is not None and command.poll() is not None:
            return
        if command is None and args.pid is not None and _gone(args.pid, sampler):
            return
        if args.duration is not None and time.monotonic() - started >= args.duration:
            return


def _gone(pid: int, sampler: Sampler) -> bool:
    """Whether the ``--pid`` process has exited: the process sources say so, or (when none is
    recorded) /proc shows it gone or a zombie."""
    if sampler.stats().process_exited:
        return True
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            state = f.read().rpartition(b")")[2].split()[:1]
    except (FileNotFoundError, ProcessLookupError):
        return True
    return state in ([b"Z"], [b"X"])


def run(args: argparse.Namespace) -> int:
    """The ``record`` command; returns the exit code (the wrapped command's, when one ran)."""
    command_argv: list[str] = list(args.command or [])
    if command_argv and command_argv[0] == "--":
        command_argv = command_argv[1:]
    if args.output is None and args.dataset is None:
        misplaced = [
            a for a in command_argv if a in ("-o", "--output") or a.startswith("--output=")
        ]
        hint = (
            f"; {misplaced[0]} after the command is the command's own argument: put "
            f"-o FILE before the command"
            if misplaced
            else ""
        )
        raise ValueError(f"the output file is required: give -o FILE (or --dataset ROOT){hint}")
    if command_argv and args.pid is not None:
        raise ValueError("record: give either --pid or a command after --, not both")
    if args.live:
        check_live()  # a terminal and the live extra, before anything starts
    if command_argv:  # a ring size its processes would not take, said before anything runs
        check_events_capacity(os.environ)
    who = _dataset.check(args)  # conflicting rank variables fail before anything is made
    _dataset.per_rank_output(args)  # -o NAME-{rank}.parquet: this rank's own file
    fmt, spool, private = check_paths(args)
    _exporters.check_libraries(args)  # a missing extra is named before anything starts
    check_sender_specs(args.sender)
    args.spool_path = spool  # for the summary's recover hint
    try:
        with Signals() as stop:
            return _record(args, command_argv, fmt, spool, stop, who)
    finally:
        if not os.path.lexists(spool):  # kept when it holds rows that reached no part
            _dataset.remove_private(private)


def _record(
    args: argparse.Namespace,
    command_argv: list[str],
    fmt: str | None,
    spool: str,
    stop: Signals,
    who: Identity | None,
) -> int:
    events = Events(args, bool(command_argv))
    try:
        with declined_child_events():  # the sampler here makes no directory of its own
            return _record_with(args, command_argv, fmt, spool, stop, who, events)
    finally:
        if os.path.lexists(spool) and events_dir_note(spool) is not None:
            events.stop_drain()  # the end failed: kept with the spool, for recover to read
        else:
            events.remove()  # read by the finish; here when it did not come to that


def _record_with(
    args: argparse.Namespace,
    command_argv: list[str],
    fmt: str | None,
    spool: str,
    stop: Signals,
    who: Identity | None,
    events: Events,
) -> int:
    command = Command(command_argv, env=events.env) if command_argv else None
    exporters = contextlib.ExitStack()
    try:
        sampler, publisher, watchdog = build_recorder(
            args,
            command.pid if command else args.pid,
            spool,
            fmt,
            who,
            exporters,
            events.dir if events.owned else None,
        )
    except BaseException:
        if command is not None:  # setup failed: the command never runs
            command.kill()
        raise
    if events.owned and events.dir is not None:  # where recover finds the command's scopes
        write_events_dir_note(spool, events.dir)
    if not args.quiet:  # every option and path is checked, the sampler built: now say what runs
        startup_lines(args, sampler, command, events)
    started = time.monotonic()
    sampled_s: float | None = None  # seconds sampled, once sampling stopped before the end
    exit_code = 0
    status = StatusLine(
        sys.stderr, sampler, enabled=wanted(sys.stderr, args.quiet) and not args.live
    )
    view = None
    try:
        sampler.start()
        if args.live:
            view = start_view(spool)  # reads the spool as `stroboscope top` does
        if command is not None:
            _wait_first_row(sampler, stop)  # the command's first instant is recorded
            if stop.signum is None:
                command.release()
            else:  # stopped before it ran: it never runs, and ends as if the signal killed it
                command.kill()
                exit_code = 128 + stop.signum
        if stop.signum is None:
            _loop(args, sampler, publisher, command, stop, status)
        if command is not None and command.released:
            if stop.signum is None and command.poll() is None:
                sampler.stop()  # --duration is up: recording ends; the command runs to its end
                sampled_s = time.monotonic() - started
                status.clear()
                say(
                    f"--duration {fmt_seconds(args.duration)} is up: recording stopped; waiting "
                    f"for the command (pid {command.pid}) to exit (Ctrl-C or SIGTERM is passed "
                    f"on to it)"
                )
            exit_code = end_command(command, stop, status)
        elif command is None and stop.signum is not None:
            exit_code = 128 + stop.signum
    except BaseException:
        if command is not None and not command.released:
            command.kill()  # it never runs unrecorded
        raise
    finally:
        stop_view(view)
        status.clear()
        sampler.stop()  # the recording ends here, not after a slow endpoint's last flush
        exporters.close()  # the last window goes out while the sampler still holds it
        sampler.close()
        if sampled_s is None:
            sampled_s = time.monotonic() - started
        if publisher is not None:
            publisher.feed(sampler.drain().to_arrow())
            publisher.close()
    # The segments and the ring, every row once and in order, to the output one segment at a
    # time, with what the sampler knows of the run (the spool's header does not).
    parts = sampler.dataset_status
    stranded = args.output is None and parts is not None and parts.rows_unwritten > 0
    unmade = 0  # processes of the command that could not make their events file
    if args.output is not None:
        # FILE's stacks beside it, from the spool's sidecar (before the finish removes the
        # sidecar with the spool; the sampler is stopped: its last batch is in it).
        _stacks_beside(args, sampler, command_argv)
    try:
        events.stop_drain()  # the command's edges drained once more, then read by the finish
        unmade = 0 if events.dir is None else len(unmade_files(events.dir))
        done = finish(
            sampler,
            args.output,
            command=command_argv or None,
            keep_spool=args.keep_spool or stranded,  # rows in no part and no FILE: keep it
            column_stats=True,
            watchdog=watchdog,
            events_dir=events.dir,
            remove_events=events.owned,
        )
        remove_events_dir_note(spool)  # the events are read (and their directory gone)
    except Exception as exc:  # the rows are in the spool: say how to write them
        if args.output is None and isinstance(exc, OSError):
            raise
        got = recover_parts(spool)  # the rows it holds, and those lost (a full disk)
        kept = events.dir if events.owned and events_dir_note(spool) is not None else None
        unwritten(exc, args.output, spool, got.rows, watchdog, got.lost_words(), kept)
    if stranded and exit_code == 0:
        exit_code = 1
    print_summary(
        args,
        fmt,
        done.rows,
        done.columns,
        done.span_s or 0.0,  # the span of the rows recorded, not how long this process ran
        sampled_s,
        sampler.stats(),
        done.column_stats or "",
        sampler.segments,
        sampler.dataset_status,
        sampler.identity,  # with the job id a single-process run was given
        None if events.dir is None else scopes_line(args, done, unmade),
    )
    return exit_code


def _stacks_beside(args: argparse.Namespace, sampler: Sampler, command_argv: list[str]) -> None:
    """``--stacks``: the stack tables beside FILE; without it, stale ones of an earlier run on
    the same FILE removed."""
    if not args.stacks:
        remove_stacks(args.output)
        return
    provenance = sampler.provenance(command=command_argv or None)
    # Every sample is in the spool's sidecar (the sampler keeps only the latest in memory):
    # streamed from there, a batch at a time, however long the run.
    done = write_sidecar_stacks(args.spool_path, args.output, provenance=provenance)
    if done is None:  # no sidecar (not expected of a recording: its spool always has one)
        samples, frames = sampler.stacks()
        done = samples.num_rows, write_stacks(samples, frames, args.output, provenance=provenance)
    rows, paths = done
    if not args.quiet:
        stats = sampler.stats().stacks
        skipped = (
            ""
            if stats is None or not stats.skipped
            else (f"; not read: {', '.join(f'pid {pid} ({why})' for pid, why in stats.skipped)}")
        )
        threads, processes = stack_threads(paths[0])
        say(
            f"stacks: {rows} samples of {threads} threads in {processes} process(es) "
            f"-> {paths[0]}{skipped}"
        )


def add_parser(sub: Any) -> None:
    """Add ``record`` to the subcommands."""
    rec = sub.add_parser(
        "record",
        help="record metrics to a Parquet or CSV file and print a summary",
        usage="stroboscope record [options] (-o FILE | --dataset ROOT) [-- COMMAND ARGS...]",
        description="Record metrics to FILE, and/or as this rank's parts of the dataset ROOT. "
        "Options come before `--`; everything after it is the command to run and monitor.",
    )
    _args.add_record_arguments(rec)
    _exporters.add_arguments(rec)
    add_sender_arguments(rec)
    rec.set_defaults(func=run)
