"""``stroboscope record``: sample to a crash-safe spool, write Parquet or CSV, print a summary.

The order of a run: build the sampler (and its spool), start the watchdog that writes the output
if this process dies, start sampling, and only then let the wrapped command run, so its first
rows are recorded. SIGINT and SIGTERM end the recording cleanly (forwarded to the command); the
output is written from the spool and its segments, every row once, in order.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import shutil
import signal
import sys
import time
from types import FrameType
from typing import Any

from stroboscope.analysis.summary import summarize
from stroboscope.cli._publish import RecordPublisher, add_sender_arguments
from stroboscope.export.writers import output_format, write_table
from stroboscope.recording.sampler import Sampler
from stroboscope.recording.spool import recover, remove_spool
from stroboscope.recording.watchdog import DumpJob, Watchdog
from stroboscope.sampling import SamplerStats
from stroboscope.sampling._checks import check_capacity, check_seconds

WAIT_PERIOD_S = 0.25
"""How often the recording loop drains, publishes and checks for the end (seconds)."""

# The command waits in this shell until sampling has started, then becomes the command itself
# (exec keeps the pid, so the pid the sampler follows is the command's). An EOF on the gate
# (setup failed) makes `read` fail: the shell then exits without running anything.
_GATE = 'read -r _ <&3 || exit 125; exec 3<&-; exec "$@"'


class _Stopped(Exception):
    """SIGTERM or SIGINT asked the recording to end."""

    def __init__(self, signum: int) -> None:
        super().__init__(signum)
        self.signum = signum


def parse_sources(text: str | None) -> dict[str, float | None] | None:
    """``"cpu,memory,disk=1"`` → ``{"cpu": None, "memory": None, "disk": 1.0}``."""
    if text is None:
        return None
    out: dict[str, float | None] = {}
    for part in text.split(","):
        part = part.strip()
        if not part:
            continue
        name, _, every = part.partition("=")
        name = name.strip()
        if name in out:
            raise ValueError(f"--sources: {name!r} is listed twice in {text!r}")
        try:
            out[name] = check_seconds(f"--sources {name}", float(every)) if every else None
        except ValueError as exc:
            if every and "could not convert" in str(exc):
                raise ValueError(
                    f"--sources: {every!r} in {part!r} is not a number of seconds"
                ) from None
            raise
    return out


class _Command:
    """The wrapped command: started gated, released once sampling runs, waited for.

    Spawned with ``posix_spawn`` so the gate pipe can be given to it as descriptor 3 (which the
    waiting shell reads and closes before it execs the command).
    """

    def __init__(self, argv: list[str]) -> None:
        if shutil.which(argv[0]) is None:
            raise ValueError(f"record: cannot run {argv[0]!r}: no such command")
        gate_r, self._gate_w = os.pipe()
        try:
            self.pid = os.posix_spawn(
                "/bin/sh",
                ["/bin/sh", "-c", _GATE, "stroboscope-record", *argv],
                os.environ,
                file_actions=[(os.POSIX_SPAWN_DUP2, gate_r, 3)],
            )
        except BaseException:
            os.close(self._gate_w)
            raise
        finally:
            os.close(gate_r)
        self.returncode: int | None = None

    def release(self) -> None:
        """Let the command run (it is exec'd in place of the waiting shell)."""
        with contextlib.suppress(OSError):
            os.write(self._gate_w, b"go\n")
        os.close(self._gate_w)
        self._gate_w = -1

    def poll(self) -> int | None:
        """The exit status (negative: killed by that signal), or None while it runs."""
        if self.returncode is None:
            pid, status = os.waitpid(self.pid, os.WNOHANG)
            if pid:
                self.returncode = os.waitstatus_to_exitcode(status)
        return self.returncode

    def wait(self, timeout: float | None = None) -> int | None:
        """Wait up to ``timeout`` seconds (None: until it exits); the status or None."""
        deadline = None if timeout is None else time.monotonic() + timeout
        while self.poll() is None:
            left = None if deadline is None else deadline - time.monotonic()
            if left is not None and left <= 0:
                return None
            time.sleep(0.005 if left is None else min(0.005, left))
        return self.returncode

    def send_signal(self, signum: int) -> None:
        if self.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.kill(self.pid, signum)

    def kill(self) -> None:
        """Setup failed: end the command before it ever ran."""
        if self._gate_w >= 0:
            os.close(self._gate_w)  # the shell's read gets EOF: it then runs nothing
            self._gate_w = -1
        self.send_signal(signal.SIGKILL)
        self.wait()

    def exit_code(self) -> int:
        """The shell's convention: the command's status, or 128 + the signal that killed it."""
        code = self.wait()
        assert code is not None
        return 128 - code if code < 0 else code


def _check_paths(args: argparse.Namespace) -> tuple[str, str]:
    fmt = output_format(args.output)  # a bad suffix fails before anything is recorded
    spool = args.spool or f"{args.output}.spool"
    if os.path.abspath(spool) == os.path.abspath(args.output):
        raise ValueError(f"--spool {spool!r} is the output file too: give two different paths")
    return fmt, spool


def _build(
    args: argparse.Namespace, pid: int | None, spool: str, fmt: str
) -> tuple[Sampler, RecordPublisher | None, Watchdog]:
    # The segment writer must drain before the ring wraps: a quarter of the ring, at most 10 s.
    ring_rows = check_capacity(args.capacity, "--capacity")
    segment_s = min(10.0, max(args.interval, ring_rows * args.interval / 4))
    sampler = Sampler(
        args.interval,
        pid=pid,
        sources=parse_sources(args.sources),
        capacity=args.capacity,
        spool=spool,
        segment_seconds=segment_s,
    )
    try:
        publisher = RecordPublisher.from_args(args, sampler.columns)
        # If this process dies (SIGKILL, OOM, a crash), the watchdog writes FILE from the spool.
        watchdog = Watchdog([DumpJob("spool", spool, dump=args.output, format=fmt)])
        watchdog.start()
    except BaseException:
        sampler.close()
        remove_spool(spool)  # this run made it and nothing was recorded
        raise
    return sampler, publisher, watchdog


def _wait_first_row(sampler: Sampler) -> None:
    """Wait (a few intervals at most, and at most 2 s) until the sampler wrote its first row."""
    deadline = time.monotonic() + min(2.0, 4 * sampler.interval + 0.5)
    while sampler.stats().rows_written == 0 and time.monotonic() < deadline:
        time.sleep(min(sampler.interval, 0.001))


def _loop(
    args: argparse.Namespace,
    sampler: Sampler,
    publisher: RecordPublisher | None,
    command: _Command | None,
) -> int | None:
    """Sample until the duration, the command's or the process's end, or a signal; return the
    signal that ended it (None otherwise)."""
    started = time.monotonic()
    try:
        while True:
            wait = WAIT_PERIOD_S
            if args.duration is not None:
                wait = min(wait, args.duration - (time.monotonic() - started))
            if command is not None:
                command.wait(timeout=max(wait, 0.0))
            elif wait > 0:
                time.sleep(wait)
            if publisher is not None:
                publisher.feed(sampler.drain().to_arrow())
            if command is not None and command.poll() is not None:
                return None
            if command is None and args.pid is not None and sampler.stats().process_exited:
                return None
            if args.duration is not None and time.monotonic() - started >= args.duration:
                return None
    except _Stopped as stop:
        return stop.signum
    except KeyboardInterrupt:
        return signal.SIGINT


def _print_summary(
    args: argparse.Namespace,
    fmt: str,
    rows: int,
    columns: int,
    elapsed: float,
    stats: SamplerStats,
    summary: str,
) -> None:
    print(f"recorded {rows} rows x {columns} columns over {elapsed:.2f} s to {args.output} ({fmt})")
    print(
        f"sampler: interval {args.interval * 1e3:g} ms, ticks taken {stats.ticks_taken}, "
        f"missed {stats.ticks_missed}, lateness p50/p99 "
        f"{stats.lateness_p50_ns / 1e3:.1f}/{stats.lateness_p99_ns / 1e3:.1f} µs, "
        f"cost/tick {stats.cost_mean_ns / 1e3:.1f} µs, "
        f"sampler CPU {100 * stats.thread_cpu_ns / 1e9 / max(elapsed, 1e-9):.2f} %, "
        f"rows lost {stats.segment_rows_lost or 0}"
    )
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
    if command_argv and args.pid is not None:
        raise ValueError("record: give either --pid or a command after --, not both")
    if args.duration is not None:
        args.duration = check_seconds("--duration", args.duration)
    fmt, spool = _check_paths(args)
    if not command_argv and args.duration is None:
        print("recording until Ctrl-C (use --duration S to stop by itself)", file=sys.stderr)

    command = _Command(command_argv) if command_argv else None
    try:
        sampler, publisher, watchdog = _build(
            args, command.pid if command else args.pid, spool, fmt
        )
    except BaseException:
        if command is not None:  # setup failed: the command never runs
            command.kill()
        raise

    def on_signal(signum: int, frame: FrameType | None) -> None:
        raise _Stopped(signum)

    previous = {s: signal.signal(s, on_signal) for s in (signal.SIGTERM, signal.SIGINT)}
    started = time.monotonic()
    try:
        sampler.start()
        if command is not None:
            _wait_first_row(sampler)  # the command's first instant is recorded
            command.release()
        stopped_by = _loop(args, sampler, publisher, command)
        if command is not None and stopped_by is not None and command.poll() is None:
            command.send_signal(stopped_by)  # the command ends as it would without us
        exit_code = command.exit_code() if command is not None else 0
    finally:
        for s, handler in previous.items():
            signal.signal(s, handler)
        sampler.close()
        if publisher is not None:
            publisher.feed(sampler.drain().to_arrow())
            publisher.close()
    table = recover(spool).to_arrow()  # the segments and the ring: every row once, in order
    write_table(table, args.output)
    watchdog.stop()
    if not args.keep_spool:
        remove_spool(spool)
    elapsed = time.monotonic() - started
    units = {c.name: c.unit for c in sampler.columns}
    _print_summary(
        args,
        fmt,
        table.num_rows,
        table.num_columns,
        elapsed,
        sampler.stats(),
        summarize(table, units),
    )
    if stopped_by is not None and command is None:
        return 128 + int(stopped_by)
    return exit_code


def add_parser(sub: Any) -> None:
    """Add ``record`` to the subcommands."""
    rec = sub.add_parser(
        "record",
        help="record metrics to a Parquet or CSV file and print a summary",
        usage="stroboscope record [options] -o FILE [-- COMMAND ARGS...]",
        description="Record metrics to FILE. Options come before `--`; everything after it is "
        "the command to run and monitor.",
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
        help="stop after S seconds (default: until the command or --pid exits, or Ctrl-C)",
    )
    rec.add_argument(
        "--pid", type=int, default=None, help="process to monitor (stops when it exits)"
    )
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
    rec.set_defaults(func=run)
