"""``record --dataset ROOT [--job NAME]``: what the record command adds for a dataset.

The sampler (:func:`stroboscope.cluster.rank_sampler`: host-wide sources on local rank 0 only)
writes this process's rows as parts of its partition under ROOT
(:mod:`stroboscope.recording._dataset_writer`), identified from the environment (torchrun, Slurm,
Open MPI, Kubernetes; ``--job`` wins for the job id). With ``-o FILE`` as well, FILE is written as
without ``--dataset``; without it, the spool (needed for the summary and crash safety of the
rows not yet in a part) is a private temporary one, removed at the end.
"""

from __future__ import annotations

import argparse
import os
import shutil
import string
import sys
import tempfile
from typing import Any

from stroboscope._base.identity import Identity, detect_identity
from stroboscope._base.identity_launchers import why_unset
from stroboscope.formats.dataset import partition
from stroboscope.recording.sampler import Sampler


def check(args: argparse.Namespace) -> Identity | None:
    """The identity to record as with ``--dataset`` (None without it); ``--job`` without
    ``--dataset`` is refused. Conflicting rank variables raise ValueError naming them."""
    if args.dataset is None:
        if args.job is not None:
            raise ValueError("--job names the job of a dataset: give --dataset ROOT with it")
        return None
    return detect_identity(job=args.job)


OUTPUT_FIELDS = ("rank", "local_rank", "host", "job")
"""What ``-o FILE`` may name in braces: this process's values put in (one file per rank)."""


def per_rank_output(args: argparse.Namespace) -> None:
    """Put this process's rank, local rank, host or job into ``-o FILE`` and ``--spool PATH``
    where they name them in braces (``-o metrics-{rank}.parquet``: under a launcher every rank
    runs the same command). Without braces, a run that is one of several ranks is warned that
    every rank given the same ``-o`` writes the same file. ValueError for a name other than
    :data:`OUTPUT_FIELDS`, a conversion or format, or a value this process does not have."""
    given = {
        option: os.fspath(value)
        for option, value in (("-o", args.output), ("--spool", args.spool))
        if value is not None
    }
    if not given:
        return
    names = {option: _placeholders(option, text) for option, text in given.items()}
    try:
        who: Identity | None = detect_identity(job=args.job)
    except ValueError:
        if any(names.values()):
            raise
        who = None  # conflicting rank variables: a plain -o still records
    filled = {option: _fill(option, text, names[option], who) for option, text in given.items()}
    args.output = filled.get("-o", args.output)
    args.spool = filled.get("--spool", args.spool)
    if "-o" not in given or names["-o"] or who is None:
        return
    if (who.world_size or 1) > 1 and args.dataset is None:
        print(
            f"stroboscope record: rank {who.rank} of {who.world_size} writes "
            f"{filled['-o']!r}, as does every rank given the same -o: name one file per "
            f"rank with -o 'NAME-{{rank}}.parquet', or record every rank with --dataset ROOT",
            file=sys.stderr,
        )


def _placeholders(option: str, text: str) -> set[str]:
    """The names ``text`` holds in braces, each one of :data:`OUTPUT_FIELDS` and bare."""
    try:
        fields = [f for f in string.Formatter().parse(text) if f[1] is not None]
    except ValueError as exc:  # a lone brace
        raise ValueError(f"{option} {text!r}: {exc} (write a brace as {{{{ or }}}})") from None
    for _, name, spec, conversion in fields:
        if spec or conversion:  # {rank!r}, {rank:>5}: not a file name anyone means
            raise ValueError(
                f"{option} {text!r}: write a placeholder bare, as {{{name}}} (no conversion "
                f"or format)"
            )
    names = {name for _, name, _, _ in fields if name is not None}
    unknown = sorted(names - set(OUTPUT_FIELDS))
    if unknown:
        raise ValueError(
            f"{option} {text!r} names {{{unknown[0]}}}: a file name may hold "
            f"{{{', '.join(OUTPUT_FIELDS)}}} in braces (this process's values)"
        )
    return names


def _fill(option: str, text: str, names: set[str], who: Identity | None) -> str:
    """``text`` with ``names`` put in from ``who`` ("{{" is a brace, with or without them)."""
    if not names:
        return text.format()
    assert who is not None  # detect_identity raised otherwise
    values = {"rank": who.rank, "local_rank": who.local_rank, "host": who.host, "job": who.job}
    for name in sorted(names):
        if values[name] is None:
            raise ValueError(
                f"{option} {text!r} names {{{name}}}, but this process has no "
                f"{name.replace('_', ' ')} ({why_unset(name, os.environ)})"
            )
    safe = {k: str(v).replace(os.sep, "_") for k, v in values.items() if v is not None}
    return text.format(**safe)


def rank_sampler(args: argparse.Namespace, who: Identity, **kwargs: Any) -> Sampler:
    """The sampler of one rank writing to ``--dataset``: :func:`stroboscope.cluster.rank_sampler`,
    so local rank 0 records the host-wide sources and every GPU and the other local ranks their
    process only (``--sources`` gives the candidates), with ``kwargs`` (pid, capacity, spool,
    segment_seconds) passed on."""
    from stroboscope.cluster import rank_sampler as make

    return make(args.interval, identity=who, sources=args.sources, dataset=args.dataset, **kwargs)


def private_spool(args: argparse.Namespace) -> tuple[str, str | None]:
    """The spool of a dataset-only run: ``--spool`` when given, else a file in a new private
    directory (0700), returned second so that :func:`remove_private` removes it."""
    if args.spool is not None:
        return os.fspath(args.spool), None
    directory = tempfile.mkdtemp(prefix="stroboscope-record-")
    return os.path.join(directory, "record.spool"), directory


def remove_private(directory: str | None) -> None:
    """Remove the directory of a private spool (nothing when there is none)."""
    if directory is not None:
        shutil.rmtree(directory, ignore_errors=True)


def describe(root: str, identity: Identity, parts: int) -> str:
    """One line for the summary: where the parts went."""
    job, host, rank = partition(identity)
    plural = "" if parts == 1 else "s"
    return (
        f"dataset {root}: {parts} part{plural} written for job {job!r} host {host!r} "
        f"rank {rank} (read all ranks with stroboscope.open_dataset({root!r}))"
    )


def status_lines(args: argparse.Namespace, identity: Identity, status: Any) -> list[str]:
    """The summary's lines on the dataset: where the parts went, failed writes, and where rows
    that reached no part are (FILE, or the spool kept for ``stroboscope recover``)."""
    lines = [describe(args.dataset, identity, status.segments_written)]
    if status.errors:
        where = f" (they are in {args.output})" if args.output is not None else ""
        lines.append(
            f"dataset part writes failed {status.errors} times (last: {status.last_error}); "
            f"{status.rows_unwritten} rows are in no part{where}"
        )
    if args.output is None and status.rows_unwritten:
        spool = getattr(args, "spool_path", args.spool)
        lines.append(
            f"those rows are kept in the spool {spool}: stroboscope recover {spool} -o FILE "
            f"(exit code 1)"
        )
    return lines
