"""``stroboscope info``: the sources (and GPUs) that work here, and why the others do not."""

from __future__ import annotations

import argparse
from typing import Any

from stroboscope.cli import _args
from stroboscope.sampling import available_sources, gpu_status


def run(args: argparse.Namespace) -> int:
    """The ``info`` command; returns the exit code."""
    infos = available_sources(pid=args.pid)
    width = max(len(i["name"]) for i in infos)
    print("sources:")
    for info in infos:
        state = "default" if info["default"] else ("opt-in" if info["available"] else "unavailable")
        line = f"  {info['name'].ljust(width)}  {state:<11}  {info['help']}"
        if not info["available"] and info["reason"]:
            line += f" — {info['reason']}"
        print(line)
    print()
    print("gpus:")
    for text_line in gpu_status()["text"].rstrip().splitlines():
        print(f"  {text_line}")
    return 0


def add_parser(sub: Any) -> None:
    """Add ``info`` to the subcommands."""
    p = sub.add_parser("info", help="list the sources (and GPUs) available here, and why not")
    p.add_argument(
        "--pid",
        action=_args.checked(_args.pid),
        default=None,
        help="process the process sources would read (default: this one)",
    )
    p.set_defaults(func=run)
