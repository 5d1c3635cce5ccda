"""The ``stroboscope`` command, one module per subcommand: ``record``, ``recover``, ``report``,
``info``, ``top``, ``stacks``.

Each module only parses and prints; the work is done by the package's API. A command imports
only its own module (``stroboscope info`` does not load what ``record`` or ``report`` need, nor
numpy and pyarrow), and ``--version`` none of them; the full parser (every command's module) is
built for ``--help``, no command, or one that is not known.
"""

from __future__ import annotations

import argparse
import contextlib
import errno
import importlib
import io
import os
import resource  # here, not in the error path: an import needs a free descriptor
import signal
import sys
from collections.abc import Sequence

from stroboscope._base.lazy import face
from stroboscope._base.text import printable

__all__ = ["build_parser", "main"]

#: The subcommands, in the order ``--help`` lists them; each is ``stroboscope.cli.<name>``, whose
#: ``add_parser(sub)`` adds its parser.
COMMANDS = ("record", "recover", "report", "info", "top", "stacks")

__getattr__, __dir__ = face(__name__, __all__)


def _version() -> str:
    from stroboscope._base.version import __version__

    return __version__


def build_parser(commands: Sequence[str] = COMMANDS) -> argparse.ArgumentParser:
    """The argument parser of the ``stroboscope`` command, with the parsers of ``commands``
    (default: every one; each imports its module)."""
    parser = argparse.ArgumentParser(
        prog="stroboscope",
        description="Record system, process and GPU metrics at millisecond rates.",
    )
    parser.add_argument("--version", action="version", version=f"stroboscope {_version()}")
    sub = parser.add_subparsers(dest="cmd", metavar="COMMAND")
    for name in commands:
        importlib.import_module(f"stroboscope.cli.{name}").add_parser(sub)
    return parser


def _commands_for(argv: Sequence[str]) -> Sequence[str]:
    """The commands whose parsers ``argv`` needs: the one it names first, none for a lone
    ``--version``, every one otherwise (help, an unknown command, or none)."""
    if list(argv) == ["--version"]:
        return ()
    if argv and argv[0] in COMMANDS:
        return (argv[0],)
    return COMMANDS


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``stroboscope`` command; returns the exit code."""
    for stream in (sys.stdout, sys.stderr):
        # A file name that is not UTF-8 ('\udcff' from os.fsdecode) or a lone surrogate from a
        # recording's JSON ('\ud800') is printed escaped, not an error after the work is done
        # (a UTF-8 locale's streams are strict; the C locale's surrogateescape fails on '\ud800').
        if isinstance(stream, io.TextIOWrapper) and stream.errors != "backslashreplace":
            stream.reconfigure(errors="backslashreplace")
    given = sys.argv[1:] if argv is None else list(argv)
    parser = build_parser(_commands_for(given))
    try:
        args = parser.parse_args(given)
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
