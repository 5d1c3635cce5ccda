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
"""

from __future__ import annotations

import argparse
import contextlib
import os
import shlex
import sys
import time
from typing import Any, NoReturn

from stroboscope._base.checks import check_path
from stroboscope._base.identity import Identity
from stroboscope.analysis.column_stats import fmt_seconds
from stroboscope.cli import _args, _dataset, _exporters
from stroboscope.cli._command import Command, Events
from stroboscope.cli._publish import RecordPublisher, add_sender_arguments, check_sender_specs
from stroboscope.cli._signals import WAIT_PERIOD_S, Signals, end_command, pause, say
from stroboscope.cli._status import StatusLine, wanted
from stroboscope.formats.dataset import part_seconds
from stroboscope.formats.segments import segment_seconds
from stroboscope.formats.spool_read import recover_parts, remove_spool
from stroboscope.formats.writers import output_format
from stroboscope.recording import _finish
from stroboscope.recording.sampler import Sampler
from stroboscope.recording.segments import SegmentStatus
from stroboscope.recording.watchdog import DumpJob, Watchdog
from stroboscope.sampling import SamplerStats
from stroboscope.sampling._checks import check_capacity
from stroboscope.scopes._outside import nvtx_taken_by

FIRST_ROW_WAIT_S = 10.0
"""The longest the command is held back for the sampler's first row (seconds)."""


def _check_paths(args: argparse.Namespace) -> tuple[str | None, str, str | None]:
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


def _build(
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
        segment_seconds(ring_rows, args.interval)
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
        )
    else:  # a rank of a dataset: its role's sources (host-wide ones once per node)
        sampler = _dataset.rank_sampler(
            args, who, pid=pid, capacity=args.capacity, spool=spool, segment_seconds=segment_s
        )
    _finish.prepare(sampler)  # its last rows go from the ring to FILE, not to a segment first
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


def _print_summary(
    args: argparse.Namespace,
    fmt: str | None,
    rows: int,
    columns: int,
    span_s: float,
    sampled_s: float,
    stats: SamplerStats,
    summary: str,
    segments: SegmentStatus | None = None,
    dataset: SegmentStatus | None = None,
    who: Identity | None = None,
    scopes: str | None = None,
) -> None:
    where = f"{args.output} ({fmt})" if args.output is not None else f"{args.dataset} (dataset)"
    print(
        f"recorded {rows} rows x {columns} columns over {fmt_seconds(span_s)} (first to last "
        f"row) to {where}"
    )
    print(
        f"sampler: interval {fmt_seconds(args.interval)}, sampled for {fmt_seconds(sampled_s)}, "
        f"ticks taken {stats.ticks_taken}, "
        f"missed {stats.ticks_missed}, lateness p50/p99 "
        f"{stats.lateness_p50_ns / 1e3:.1f}/{stats.lateness_p99_ns / 1e3:.1f} µs, "
        f"cost/tick {stats.cost_mean_ns / 1e3:.1f} µs, "
        f"sampler CPU {100 * stats.thread_cpu_ns / 1e9 / max(sampled_s, 1e-9):.2f} %, "
        f"rows lost {stats.segment_rows_lost or 0}"
    )
    if segments is not None and segments.errors:
        print(
            f"segment writes failed {segments.errors} times (last: {segments.last_error}); "
            f"the output was read from the spool, which held those rows"
        )
    if args.dataset is not None and dataset is not None and who is not None:
        for line in _dataset.status_lines(args, who, dataset):
            print(line)
    for src in stats.sources:
        if src.reason:
            print(f"source {src.name}: {src.reason} ({src.failures} failed reads)")
    if scopes is not None:
        print(scopes)
    print()
    print(summary)


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
    who = _dataset.check(args)  # conflicting rank variables fail before anything is made
    _dataset.per_rank_output(args)  # -o NAME-{rank}.parquet: this rank's own file
    fmt, spool, private = _check_paths(args)
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
        return _record_with(args, command_argv, fmt, spool, stop, who, events)
    finally:
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
        sampler, publisher, watchdog = _build(
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
    if not args.quiet:  # every option and path is checked, the sampler built: now say what runs
        _startup_lines(args, sampler, command, events)
    started = time.monotonic()
    sampled_s: float | None = None  # seconds sampled, once sampling stopped before the end
    exit_code = 0
    status = StatusLine(sys.stderr, sampler, enabled=wanted(sys.stderr, args.quiet))
    try:
        sampler.start()
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
    try:
        done = _finish.finish(
            sampler,
            args.output,
            command=command_argv or None,
            keep_spool=args.keep_spool or stranded,  # rows in no part and no FILE: keep it
            column_stats=True,
            watchdog=watchdog,
            events_dir=events.dir,
            remove_events=events.owned,
        )
    except OSError as exc:
        if args.output is None:
            raise
        _unwritten(exc, args.output, spool, recover_parts(spool).rows, watchdog)
    if stranded and exit_code == 0:
        exit_code = 1
    _print_summary(
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
        None if events.dir is None else _scopes_line(args, done),
    )
    return exit_code


def _scopes_line(args: argparse.Namespace, done: _finish.Finished) -> str:
    """The summary's line on the scopes the recorded processes called."""
    if done.scope_calls == 0:
        return (
            "scopes: none called (stroboscope.annotate, or NVTX ranges, in the command and the "
            "processes it starts are recorded)"
        )
    where = [p for p in (done.scopes,) if p is not None]
    if args.dataset is not None:
        where.append(f"the scopes of dataset {args.dataset}")
    return f"scopes: {done.scope_calls} calls recorded" + (
        f" to {' and '.join(where)}" if where else ""
    )


def _unwritten(
    exc: OSError, output: str, spool: str, rows: int, watchdog: Watchdog | None
) -> NoReturn:
    """FILE could not be written at the end: stop the watchdog (this process did not die; it
    would try the same write again), keep the spool, and say how to recover the rows."""
    if watchdog is not None:
        watchdog.stop()
    reason = exc.strerror or str(exc)
    raise RuntimeError(
        f"cannot write -o {output!r} ({reason}); the {rows} rows are safe in the spool "
        f"{spool!r}: write them with: stroboscope recover {shlex.quote(spool)} -o FILE"
    ) from None


def _startup_lines(
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
