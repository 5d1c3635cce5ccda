"""The ``stroboscope`` command, one module per subcommand: ``record``, ``recover``, ``report``,
``info``.

Each module only parses and prints; the work is done by the package's API.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

from stroboscope.cli import info, record, recover, report


def _version() -> str:
    from stroboscope import __version__

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
    parser = build_parser()
    try:
        args = parser.parse_args(argv)
    except SystemExit as exit_:  # --help, --version, or a bad option (argparse printed why)
        return exit_.code if isinstance(exit_.code, int) else 2
    if args.cmd is None:
        parser.print_help(sys.stderr)
        return 2
    try:
        result: int = args.func(args)
    except (ValueError, TypeError, OSError, RuntimeError) as exc:
        print(f"stroboscope {args.cmd}: error: {exc}", file=sys.stderr)
        return 2
    return int(result)


if __name__ == "__main__":  # pragma: no cover
    raise SystemExit(main())
