"""Option values of the command line, checked while argparse reads them.

Each converter turns the text of one option into its value through the package's checks
(``sampling/_checks.py``), so a bad value is refused the argparse way: the usage, then
``stroboscope record: error: --duration must be …, got 'nan'`` and exit code 2, before anything
is created or launched. Use them as ``parser.add_argument(..., action=checked(seconds))``.
"""

from __future__ import annotations

import argparse
import os
from collections.abc import Callable, Sequence
from typing import Any

from stroboscope._base.checks import check_pid, check_seconds, check_str
from stroboscope._base.files import check_replaceable, same_file
from stroboscope.sampling import (
    MAX_INTERVAL_S,
    MIN_INTERVAL_S,
    check_capacity,
    check_interval,
    check_sources,
)

Converter = Callable[[str, str], Any]
"""``(option, text) -> value``; raises ``ValueError``/``TypeError`` naming the option."""


def _number(option: str, text: str, what: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise ValueError(f"{option} must be {what}, got {text!r}") from None
    return value


def seconds(option: str, text: str) -> float:
    """A positive, finite number of seconds (``--duration``, ``--publish-every``)."""
    value = _number(option, text, "a positive finite number of seconds")
    try:
        return check_seconds(option, value)
    except ValueError:
        raise ValueError(
            f"{option} must be a positive finite number of seconds, got {text!r}"
        ) from None


def interval(option: str, text: str) -> float:
    """A sampling interval in seconds, within the sampler's bounds (``--interval``)."""
    return check_interval(option, _number(option, text, "a number of seconds"))


def stacks(option: str, text: str) -> bool | float:
    """``--stacks``: True alone (``on``), else a positive, finite number of seconds (whether it
    is a whole multiple of ``--interval`` is the sampler's check)."""
    if text == "on":
        return True
    return seconds(option, text)


def _integer(option: str, text: str, what: str) -> int:
    try:
        return int(text, 10)
    except ValueError:
        raise ValueError(f"{option} must be {what}, got {text!r}") from None


def pid(option: str, text: str) -> int:
    """The id of a process that exists and can be read (``--pid``)."""
    number = _integer(option, text, "a positive process id (an integer)")
    try:
        return check_pid(number, "/proc")
    except (ValueError, PermissionError) as exc:
        raise ValueError(f"{option} {text}: {exc}") from None


def capacity(option: str, text: str) -> int:
    """Rows of the ring (``--capacity``); the sampler rounds it up to a power of two."""
    rows = _integer(option, text, "a whole number of rows")
    check_capacity(rows, option)
    return rows


def sources(option: str, text: str) -> dict[str, float | None]:
    """``"cpu,memory,disk=1"`` → ``{"cpu": None, "memory": None, "disk": 1.0}``.

    A name listed twice, an empty list, a bad number of seconds or an unknown name (through the
    sampler's own check, which lists the known ones) is refused while the options are read.
    """
    out: dict[str, float | None] = {}
    for part in text.split(","):
        part = part.strip()
        if not part:
            continue
        name, eq, every = part.partition("=")
        name = name.strip()
        if not name:
            raise ValueError(f"{option}: {part!r} in {text!r} has no source name")
        if name in out:
            raise ValueError(
                f"{option}: {name!r} is listed twice in {text!r}; give each source once "
                f"(NAME or NAME=SECONDS)"
            )
        if not eq:
            out[name] = None
            continue
        value = _number(f"{option} {name}", every.strip(), "a number of seconds")
        out[name] = check_seconds(f"{option} {name}", value)  # the rule the sampler applies
    if not out:
        raise ValueError(f"{option} must name at least one source, got {text!r}")
    try:
        check_sources(list(out), 1.0, [])  # the names only: rates are checked with --interval
    except ValueError as exc:
        raise ValueError(f"{option} {text!r}: {exc}") from None
    return out


def checked(convert: Converter) -> type[argparse.Action]:
    """An argparse action that stores ``convert(option, text)`` or fails with its message."""

    class Checked(argparse.Action):
        def __call__(
            self,
            parser: argparse.ArgumentParser,
            namespace: argparse.Namespace,
            values: str | Sequence[Any] | None,
            option_string: str | None = None,
        ) -> None:
            option = option_string or self.dest
            try:
                value = convert(option, str(values))
            except (ValueError, TypeError) as exc:
                parser.error(str(exc))
            setattr(namespace, self.dest, value)

    Checked.__name__ = f"Checked_{convert.__name__}"
    return Checked


def check_output(output: str, force: bool) -> None:
    """Refuse ``-o FILE`` in a directory that does not exist, a directory as FILE or as a file
    written with it (its scope intervals, a CSV's provenance sidecar), and an existing one of
    them unless ``--force`` (it would be replaced, or removed as stale, without a word)."""
    from stroboscope.formats.writers import companions  # pyarrow: when needed

    full = os.path.abspath(output)
    parent = os.path.dirname(full)
    if not os.path.isdir(parent):
        raise ValueError(
            f"-o {output!r}: directory {parent!r} does not exist; create it or give another path"
        )
    for what, path in companions(output).items():
        name = f"-o {output!r}" if not what else f"{path!r}, {what} -o {output!r},"
        if os.path.isdir(path):
            raise ValueError(f"{name} is a directory; give a file path")
        if os.path.lexists(path) and not force:
            raise ValueError(f"{name} already exists; give --force to replace it, or another path")
        try:  # the rule the final write applies (a regular file only), said before any work
            check_replaceable(path)
        except OSError as exc:
            raise ValueError(f"{name} {exc.strerror}") from None


def check_output_not_spool(output: str, spool: str, spool_option: str) -> None:
    """Refuse an output file that is the spool (once links and relative parts are resolved) or
    is named like one of its segments: writing it would destroy rows, and removing the spool
    afterwards would delete the output."""
    from stroboscope.formats.segments import is_segment_name  # numpy, pyarrow: when needed
    from stroboscope.formats.writers import companions

    for what, path in companions(output).items():
        if same_file(spool, path):
            name = "the output file too" if not what else f"{what} the output too"
            raise ValueError(
                f"{spool_option} {spool!r} is {name} (-o {output!r}, once links and "
                f"relative parts are resolved): give two different paths"
            )

    if is_segment_name(os.path.realpath(output), os.path.realpath(spool)):
        raise ValueError(
            f"-o {output!r} is named like a segment of the spool {spool!r}: give another "
            f"output path"
        )


def add_record_arguments(parser: argparse.ArgumentParser) -> None:
    """The options of ``stroboscope record`` (its senders' options are added by ``_publish``)."""
    parser.add_argument(
        "-o",
        "--output",
        default=None,  # required; checked in run() to say where a misplaced -o went
        metavar="FILE",
        help="output file (required unless --dataset); .parquet/.pq or .csv chooses the format; "
        "an existing file is refused unless --force",
    )
    parser.add_argument(
        "--force",
        action="store_true",
        help="replace an existing output file (it is replaced whole, once the recording is "
        "written)",
    )
    parser.add_argument(
        "--interval",
        action=checked(interval),
        default=0.01,
        metavar="S",
        help=(
            f"sampling interval in seconds (default 0.01; {MIN_INTERVAL_S:g} to {MAX_INTERVAL_S:g})"
        ),
    )
    parser.add_argument(
        "--duration",
        action=checked(seconds),
        default=None,
        metavar="S",
        help="stop recording after S seconds (default: until the command or --pid exits, or "
        "Ctrl-C or SIGTERM, which are passed on to the command); a command still running then "
        "is not stopped: record waits for it to exit and says so",
    )
    parser.add_argument(
        "--pid",
        action=checked(pid),
        default=None,
        help="process to monitor (stops when it exits); without --pid or a command, the proc.* "
        "columns describe the recorder itself",
    )
    parser.add_argument(
        "--sources",
        action=checked(sources),
        default=None,
        metavar="LIST",
        help="comma-separated sources, NAME or NAME=SECONDS (see `stroboscope info`)",
    )
    parser.add_argument(
        "--capacity",
        action=checked(capacity),
        default=1 << 16,
        metavar="ROWS",
        help="ring capacity in rows (default 65536)",
    )
    parser.add_argument(
        "--spool",
        default=None,
        metavar="PATH",
        help="crash-safe spool file (default: FILE.spool, removed after a clean run)",
    )
    parser.add_argument(
        "--dataset",
        default=None,
        metavar="ROOT",
        help="also write the rows as this rank's Parquet parts of the partitioned dataset ROOT "
        "(ROOT/job=J/host=H/rank=R/part-*.parquet; rank and job from torchrun/Slurm/MPI "
        "variables); -o is then optional",
    )
    parser.add_argument(
        "--job",
        default=None,
        action=checked(lambda option, text: check_str(option, text, empty=False)),
        metavar="NAME",
        help="job id of the dataset's partition (default: STROBOSCOPE_JOB, SLURM_JOB_ID, ... "
        "else 'none')",
    )
    parser.add_argument(
        "--no-nvtx",
        action="store_true",
        help="do not set NVTX_INJECTION64_PATH in the command's environment: its NVTX ranges "
        "are not captured as scopes (its stroboscope.annotate scopes still are)",
    )
    parser.add_argument(
        "--edge-counters",
        choices=("off", "cpu", "rusage"),
        default="off",
        help="each scope edge in the command also carries its thread's own CPU clock (cpu), "
        "and its faults and context switches (rusage): every call's CPU time is exact, "
        "however short (STROBOSCOPE_EDGE_COUNTERS in its environment; default off)",
    )
    parser.add_argument(
        "--stacks",
        nargs="?",
        const="on",
        default=False,
        action=checked(stacks),
        metavar="SECONDS",
        help="also read every Python thread's stack of the command and of its child processes "
        "on the samples' clock (--stacks: every --interval, no faster than 1 ms; --stacks=S: "
        "every S seconds, a whole multiple of --interval), written beside FILE as "
        "STEM.stacks.parquet and STEM.stack_frames.parquet (CPython 3.11/3.12 on Linux)",
    )
    parser.add_argument(
        "--keep-spool",
        action="store_true",
        help="keep the spool and its segments after writing FILE",
    )
    parser.add_argument(
        "-q",
        "--quiet",
        action="store_true",
        help="no live status line (it is drawn only when stderr is a terminal anyway)",
    )
    parser.add_argument(
        "--live",
        action="store_true",
        help="show the live view (stroboscope top, the live extra) in place of the status "
        "line; q leaves it (the recording goes on), Ctrl-C ends the recording",
    )
    parser.add_argument(
        "command",
        nargs=argparse.REMAINDER,
        help="command to run and monitor until it exits (after --)",
    )
