"""``stroboscope report RUN.parquet [RUN2 …] [-o report.html [--static]] [--png DIR]
[--align start]``: summarise recordings in the terminal, as one HTML page that zooms from the
whole run to single rows (``--static``: PNG plots, no script) and as PNG plots (several runs
overlaid on a relative time axis with ``--align``). On a dataset root
(``record --dataset``), the cross-rank report (:mod:`stroboscope.export.cluster_report`)."""

from __future__ import annotations

import argparse
from typing import TYPE_CHECKING, Any

from stroboscope.export.report import (
    build_report,
    check_output_path,
    check_outputs,
    lean_memory_pool,
    write_html,
    write_pngs,
)

if TYPE_CHECKING:
    from stroboscope.export.cluster_report import StragglerRule


def run(args: argparse.Namespace) -> int:
    """The ``report`` command; returns the exit code."""
    from stroboscope.formats.dataset import is_dataset

    if len(args.inputs) == 1 and is_dataset(args.inputs[0]):
        return run_cluster(args)
    for dest, option in (("straggler", "--straggler"), ("step", "--step")):
        if getattr(args, dest) is not None:  # checked as a dataset's report checks it, then
            if dest == "straggler":
                _straggler_rule(args.straggler)
            raise ValueError(
                f"{option}: used by the report of a dataset only (a partitioned directory); "
                f"{', '.join(map(repr, args.inputs))} is not one"
            )
    read = [*args.inputs, *([args.scopes] if args.scopes else [])]
    check_outputs(args.output, args.png, args.static, read)  # before any work
    with lean_memory_pool():  # column after column read and freed: a pool that gives pages back
        report = build_report(
            args.inputs,
            columns=args.columns,
            start=args.start,
            end=args.end,
            scope=args.scope,
            scopes=args.scopes,
            align=args.align,
        )
        print(report.text(), end="")
        try:
            if args.output is not None:
                write_html(report, args.output, static=args.static)
                print(f"wrote {args.output}")
            if args.png is not None:
                paths = write_pngs(report, args.png)
                print(f"wrote {len(paths)} PNG plots to {args.png}")
        except ImportError as exc:  # the report extra is missing: say which, exit 2
            raise RuntimeError(str(exc)) from None
    return 0


def run_cluster(args: argparse.Namespace) -> int:
    """``report ROOT`` on a dataset: every rank side by side (``-o`` .html, .md or .json)."""
    from stroboscope.export.cluster_report import (
        build_cluster_report,
        write_cluster_report,
    )

    # given at all, even as "" or 0, is refused: compared with the option's default
    unused = [option for dest, option, default in args.runs_only if getattr(args, dest) != default]
    if unused:
        raise ValueError(
            f"{', '.join(unused)}: not used by the report of a dataset "
            f"(it takes {args.dataset_takes})"
        )
    rule = _straggler_rule(args.straggler)
    if args.output is not None:
        check_output_path(args.output)  # before any work
    report = build_cluster_report(args.inputs[0], step=args.step, rule=rule)
    print(report.text(), end="")
    if args.output is not None:
        print(f"wrote {write_cluster_report(report, args.output)} {args.output}")
    return 0


def add_parser(sub: Any) -> None:
    """Add ``report`` to the subcommands."""
    p = sub.add_parser(
        "report",
        help="summarise recordings; write an HTML report (-o) or PNG plots (--png)",
        description="Summarise recordings (Parquet files, spools, segment folders or "
        "partitioned dataset directories) in the terminal; with -o, one self-contained HTML "
        "page whose plots zoom from the whole run to single rows (offline; --static: PNG "
        "plots and no script); with --png, the plots as PNG files.",
    )
    p.add_argument("inputs", nargs="+", metavar="RUN", help="recordings to report on")
    output = p.add_argument(
        "-o", "--output", default=None, metavar="HTML", help="write the HTML report"
    )
    static = p.add_argument(
        "--static",
        action="store_true",
        help="-o: the page with PNG plots and no script, instead of the zooming page",
    )
    png = p.add_argument(
        "--png", default=None, metavar="DIR", help="write each plot as DIR/NAME.png"
    )
    columns = p.add_argument(
        "--columns",
        action="append",
        default=None,
        metavar="LIST",
        help="columns to show: names or patterns, comma-separated (cpu.*,gpu.0.power_w)",
    )
    start = p.add_argument(
        "--from",
        dest="start",
        default=None,
        metavar="TIME",
        help="first time shown: seconds after the first row (30, 1.5s, 2m) or ISO-8601",
    )
    end = p.add_argument("--to", dest="end", default=None, metavar="TIME", help="last time shown")
    scope = p.add_argument(
        "--scope", default=None, metavar="NAME", help="only the rows taken while NAME was open"
    )
    scopes = p.add_argument(
        "--scopes",
        default=None,
        metavar="FILE",
        help="scope intervals (Parquet) for every input (default: <stem>.scopes.parquet)",
    )
    align = p.add_argument(
        "--align",
        default=None,
        metavar="start|scope:NAME",
        help="overlay the runs on one relative time axis: each from its first row (start) or "
        "from the first call of the scope NAME (scope:NAME); default: one absolute axis",
    )
    step = p.add_argument("--step", default=None, metavar="NAME", help="dataset: the step scope")
    straggler = p.add_argument(
        "--straggler",
        default=None,
        metavar="K,PCT",
        help="dataset: a straggler's median step exceeds the ranks' by K robust SDs and PCT %%",
    )
    # What a dataset's report refuses and what it takes, by their options' own names.
    runs_only = [static, png, columns, start, end, scope, scopes, align]
    p.set_defaults(
        func=run,
        runs_only=[(a.dest, a.option_strings[0], a.default) for a in runs_only],
        dataset_takes=", ".join(a.option_strings[0] for a in (output, step, straggler)),
    )


def _straggler_rule(value: str | None) -> StragglerRule:
    """``--straggler K,PCT`` (default 3,5) as a rule; ValueError naming the option and value."""
    from stroboscope.export.cluster_report import StragglerRule

    k, _, pct = (value or "3,5").partition(",")
    try:
        return StragglerRule(float(k), float(pct or 5))
    except ValueError as exc:
        raise ValueError(f"--straggler {value!r}: give K,PCT such as 3,5 ({exc})") from None
