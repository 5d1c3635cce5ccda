"""The ``stroboscope`` command, one module per subcommand: ``record``, ``recover``, ``report``,
``info``.

Each module only parses and prints; the work is done by the package's API.
"""

from __future__ import annotations

import argparse
import contextlib
import errno
import io
import os
import resource
import signal
import sys
from collections.abc import Sequence

from stroboscope._base.lazy import face
from stroboscope.analysis.column_stats import printable
from stroboscope.cli import info, record, recover, report

__all__ = ["build_parser", "main"]

__getattr__, __dir__ = face(__name__, __all__)


def _version() -> str:
    from stroboscope._base.version import __version__

    return __version__


def build_parser() -> argparse.ArgumentParser:
    """The argument parser of the ``stroboscope`` command."""
    parser = argparse.ArgumentParser(
        prog="stroboscope",
        description="Record system, process and GPU metrics at millisecond rates.",
    )
    parser.add_argument("--version", action="version", version=f"stroboscope {_version()}")
    sub = parser.add_subparsers(dest="cmd", metavar="COMMAND")
    record.add_parser(sub)
    recover.add_parser(sub)
    report.add_parser(sub)
    info.add_parser(sub)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``stroboscope`` command; returns the exit code."""
    for stream in (sys.stdout, sys.stderr):
        # A file name that is not UTF-8 ('\udcff' from os.fsdecode) or a lone surrogate from a
        # recording's JSON ('\ud800') is printed escaped, not an error after the work is done
        # (a UTF-8 locale's streams are strict; the C locale's surrogateescape fails on '\ud800').
        if isinstance(stream, io.TextIOWrapper) and stream.errors != "backslashreplace":
            stream.reconfigure(errors="backslashreplace")
    parser = build_parser()
    try:
        args = parser.parse_args(argv)
    except SystemExit as exit_:  # --help, --version, or a bad option (argparse printed why)
        return exit_.code if isinstance(exit_.code, int) else 2
    if args.cmd is None:
        parser.print_help(sys.stderr)
        return 2
    try:
        try:
            result: int = args.func(args)
            sys.stdout.flush()  # a closed pipe shows here, not at the interpreter's exit
        except BrokenPipeError:
            raise
        except (ValueError, TypeError, OSError, RuntimeError, ImportError) as exc:
            # the message may quote names from files and data: one line, no control character
            print(f"stroboscope {args.cmd}: error: {_error_text(exc)}", file=sys.stderr)
            return 2
    except BrokenPipeError:
        return _broken_pipe()
    return int(result)


def _error_text(exc: BaseException) -> str:
    """The message of a failed command on one line, with what to do when it ran out of file
    descriptors (the message alone, ``[Errno 24] Too many open files``, does not say)."""
    text = printable(exc)
    if isinstance(exc, OSError) and exc.errno == errno.EMFILE:
        soft = resource.getrlimit(resource.RLIMIT_NOFILE)[0]
        text += (
            f" (this process may have at most {soft} open files, its RLIMIT_NOFILE: raise it "
            f"with `ulimit -n {max(1024, 4 * soft)}` in the shell that runs stroboscope)"
        )
    elif isinstance(exc, OSError) and exc.errno == errno.ENFILE:
        text += " (the system's table of open files is full: see fs.file-max)"
    return text


def _broken_pipe() -> int:
    """The reader of our output went away (``stroboscope info | head -5``): end quietly with the
    status a Unix tool killed by SIGPIPE gives its shell, 128 + SIGPIPE. Standard output and
    error are pointed at /dev/null so that the interpreter's last flush finds no pipe to fail
    on (everything the command recorded was written before it printed)."""
    devnull = os.open(os.devnull, os.O_WRONLY)
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(OSError, ValueError):  # a stream without a descriptor
            os.dup2(devnull, stream.fileno())
    os.close(devnull)
    return 128 + signal.SIGPIPE


if __name__ == "__main__":  # pragma: no cover
    raise SystemExit(main())
