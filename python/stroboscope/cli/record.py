"""``stroboscope record``: sample to a crash-safe spool, write Parquet or CSV, print a summary.

The order of a run: check every option (``cli/_args.py``) and the paths, catch SIGTERM/SIGINT,
spawn the wrapped command held at a gate (``cli/_command.py``: it does not run yet, and dies with
this process), build the sampler (and its spool) on its pid, start the watchdog that writes the
output if this process dies, start sampling, and only once the first row exists let the command
run, so its first instant is recorded. If setup fails, the command never runs and what this run
made is removed. SIGINT and SIGTERM end the recording cleanly (passed on to the command, which is
waited for); the output is written from the spool and its segments, every row once, in order.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import signal
import sys
import threading
import time
from types import FrameType
from typing import Any

from stroboscope._identity import Identity
from stroboscope.cli import _args, _dataset, _exporters
from stroboscope.cli._command import Command
from stroboscope.cli._publish import RecordPublisher, add_sender_arguments
from stroboscope.cli._status import StatusLine, wanted
from stroboscope.export.writers import output_format
from stroboscope.recording import _finish
from stroboscope.recording.sampler import Sampler
from stroboscope.recording.segments import SegmentStatus
from stroboscope.recording.spool import remove_spool
from stroboscope.recording.watchdog import DumpJob, Watchdog
from stroboscope.sampling import SamplerStats
from stroboscope.sampling._checks import check_capacity

WAIT_PERIOD_S = 0.25
"""How often the recording loop drains, publishes and checks for the end (seconds)."""

FIRST_ROW_WAIT_S = 10.0
"""The longest the command is held back for the sampler's first row (seconds)."""

_POLL_S = 0.005
"""How often a wait looks at the command, the signals and the clock (seconds)."""

_SIGNAL_POLL_S = 0.05
"""How often a wait without a command looks at the signals (seconds)."""


class _Signals:
    """SIGTERM and SIGINT, caught while recording: they only set a flag (no exception thrown
    into whatever code runs), which the loop reads to end the recording cleanly."""

    def __init__(self) -> None:
        self.signum: int | None = None
        self.count = 0
        self._previous: dict[int, Any] = {}

    def _on_signal(self, signum: int, frame: FrameType | None) -> None:
        self.signum = signum
        self.count += 1

    def __enter__(self) -> _Signals:
        if threading.current_thread() is threading.main_thread():  # only it may set handlers
            for s in (signal.SIGTERM, signal.SIGINT):
                if signal.getsignal(s) is signal.SIG_IGN:
                    continue  # ignored (nohup, a background job): so it stays, for the command too
                self._previous[s] = signal.signal(s, self._on_signal)
        return self

    def __exit__(self, *exc: object) -> None:
        for s, handler in self._previous.items():
            signal.signal(s, handler)


def _check_paths(args: argparse.Namespace) -> tuple[str | None, str, str | None]:
    """The output's format (None with ``--dataset`` alone), the spool, and the private
    directory of a temporary spool (to remove at the end; None when there is none)."""
    if args.output is None:
        spool, private = _dataset.private_spool(args)
        return None, spool, private
    fmt = output_format(args.output)  # a bad suffix fails before anything is recorded
    spool = args.spool or f"{args.output}.spool"
    _args.check_output_not_spool(args.output, spool, "--spool")
    return fmt, spool, None


def _build(
    args: argparse.Namespace,
    pid: int | None,
    spool: str,
    fmt: str | None,
    who: Identity | None,
    exporters: contextlib.ExitStack,
) -> tuple[Sampler, RecordPublisher | None, Watchdog | None]:
    # The segment writer must drain before the ring wraps: a quarter of the ring, at most 10 s.
    ring_rows = check_capacity(args.capacity, "--capacity")
    segment_s = min(10.0, max(args.interval, ring_rows * args.interval / 4))
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
                "spool", spool, dump=args.output, format=fmt, remove_source=not args.keep_spool
            )
            watchdog = Watchdog([job])
            watchdog.start()
    except BaseException:
        exporters.close()
        if publisher is not None:
            publisher.abandon()
        sampler.close()
        remove_spool(spool)  # this run made it and nothing was recorded
        raise
    return sampler, publisher, watchdog


def _pause(seconds: float, stop: _Signals, command: Command | None) -> None:
    """Wait ``seconds``, or less when a signal came or the command exited (noticed within
    ``_POLL_S``; a signal alone within ``_SIGNAL_POLL_S``)."""
    deadline = time.monotonic() + seconds
    count = stop.count
    step = _POLL_S if command is not None else _SIGNAL_POLL_S
    while stop.count == count and (command is None or command.poll() is None):
        left = deadline - time.monotonic()
        if left <= 0:
            return
        time.sleep(min(step, left))


def _wait_first_row(sampler: Sampler, stop: _Signals) -> None:
    """Wait until the sampler wrote its first row (taken as it starts; however long a loaded
    machine makes that, so the command's first instant is recorded). The 10 s bound is only
    for a sampler that cannot write: the command then runs anyway."""
    deadline = time.monotonic() + FIRST_ROW_WAIT_S
    while sampler.stats().rows_written == 0 and time.monotonic() < deadline:
        _pause(min(sampler.interval, 0.001), stop, None)
        if stop.signum is not None:
            return


def _loop(
    args: argparse.Namespace,
    sampler: Sampler,
    publisher: RecordPublisher | None,
    command: Command | None,
    stop: _Signals,
    status: StatusLine,
) -> None:
    """Sample until the duration, the command's or the process's end, or a signal."""
    started = time.monotonic()
    while stop.signum is None:
        wait = WAIT_PERIOD_S
        if args.duration is not None:
            wait = min(wait, args.duration - (time.monotonic() - started))
        _pause(wait, stop, command)
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


def _keyboard_reaches_the_command() -> bool:
    """Whether a terminal's Ctrl-C reaches the command by itself: our process group (which the
    command shares) is the foreground group of our terminal, so the kernel sent SIGINT to both."""
    for fd in (0, 1, 2):
        try:
            if os.isatty(fd):
                return os.tcgetpgrp(fd) == os.getpgrp()
        except OSError:
            continue
    return False


def _end_command(command: Command, stop: _Signals) -> int:
    """Forward the signal that ended the recording (and each later one) to the command, wait
    for it, and return its exit code (128 + the signal when one killed it).

    A SIGINT is not forwarded when it came from our terminal's Ctrl-C, which the command got
    too: a second one would interrupt the command's own handling of the first.
    """
    forwarded = 0
    while command.poll() is None:
        if stop.count > forwarded:
            forwarded = stop.count
            assert stop.signum is not None
            if stop.signum != signal.SIGINT or not _keyboard_reaches_the_command():
                command.send_signal(stop.signum)  # the command ends as it would without us
        _pause(WAIT_PERIOD_S, stop, command)
    return command.exit_code()


def _print_summary(
    args: argparse.Namespace,
    fmt: str | None,
    rows: int,
    columns: int,
    elapsed: float,
    stats: SamplerStats,
    summary: str,
    segments: SegmentStatus | None = None,
    dataset: SegmentStatus | None = None,
    who: Identity | None = None,
) -> None:
    where = f"{args.output} ({fmt})" if args.output is not None else f"{args.dataset} (dataset)"
    print(f"recorded {rows} rows x {columns} columns over {elapsed:.2f} s to {where}")
    print(
        f"sampler: interval {args.interval * 1e3:g} ms, ticks taken {stats.ticks_taken}, "
        f"missed {stats.ticks_missed}, lateness p50/p99 "
        f"{stats.lateness_p50_ns / 1e3:.1f}/{stats.lateness_p99_ns / 1e3:.1f} µs, "
        f"cost/tick {stats.cost_mean_ns / 1e3:.1f} µs, "
        f"sampler CPU {100 * stats.thread_cpu_ns / 1e9 / max(elapsed, 1e-9):.2f} %, "
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
    if not command_argv and args.duration is None and args.pid is None and not args.quiet:
        print("recording until Ctrl-C (use --duration S to stop by itself)", file=sys.stderr)
    args.spool_path = spool  # for the summary's recover hint
    try:
        with _Signals() as stop:
            return _record(args, command_argv, fmt, spool, stop, who)
    finally:
        if not os.path.lexists(spool):  # kept when it holds rows that reached no part
            _dataset.remove_private(private)


def _record(
    args: argparse.Namespace,
    command_argv: list[str],
    fmt: str | None,
    spool: str,
    stop: _Signals,
    who: Identity | None,
) -> int:
    command = Command(command_argv) if command_argv else None
    exporters = contextlib.ExitStack()
    try:
        sampler, publisher, watchdog = _build(
            args, command.pid if command else args.pid, spool, fmt, who, exporters
        )
    except BaseException:
        if command is not None:  # setup failed: the command never runs
            command.kill()
        raise
    started = time.monotonic()
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
            exit_code = _end_command(command, stop)
        elif command is None and stop.signum is not None:
            exit_code = 128 + stop.signum
    except BaseException:
        if command is not None and not command.released:
            command.kill()  # it never runs unrecorded
        raise
    finally:
        status.clear()
        exporters.close()  # the last window goes out while the sampler still holds it
        sampler.close()
        if publisher is not None:
            publisher.feed(sampler.drain().to_arrow())
            publisher.close()
    # The segments and the ring, every row once and in order, streamed to the output one
    # segment at a time, with what the sampler knows of the run (the spool's header does not).
    prov = sampler.provenance(command=command_argv or None)
    rows, n_columns = _finish.write_output(spool, args.output, prov)
    if watchdog is not None:
        watchdog.stop()
    units = {c.name: c.unit for c in sampler.columns}
    summary = _finish.summary(spool, units)  # a few columns at a time, before the spool goes
    parts = sampler.dataset_status
    stranded = args.output is None and parts is not None and parts.rows_unwritten > 0
    if not args.keep_spool and not stranded:  # rows in no part and no FILE: keep the spool
        remove_spool(spool)
    if stranded and exit_code == 0:
        exit_code = 1
    elapsed = time.monotonic() - started
    _print_summary(
        args,
        fmt,
        rows,
        n_columns,
        elapsed,
        sampler.stats(),
        summary,
        sampler.segments,
        sampler.dataset_status,
        sampler.identity,  # with the job id a single-process run was given
    )
    return exit_code


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
