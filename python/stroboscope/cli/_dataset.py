"""``record --dataset ROOT [--job NAME]``: what the record command adds for a dataset.

The sampler writes this process's rows as parts of its partition under ROOT
(:mod:`stroboscope.recording._dataset_writer`), identified from the environment (torchrun, Slurm,
Open MPI, Kubernetes; ``--job`` wins for the job id). With ``-o FILE`` as well, FILE is written as
without ``--dataset``; without it, the spool (needed for the summary and crash safety of the
rows not yet in a part) is a private temporary one, removed at the end.
"""

from __future__ import annotations

import argparse
import os
import shutil
import tempfile

from stroboscope._identity import Identity, detect_identity
from stroboscope.export.dataset import partition


def check(args: argparse.Namespace) -> Identity | None:
    """The identity to record as with ``--dataset`` (None without it); ``--job`` without
    ``--dataset`` is refused. Conflicting rank variables raise ValueError naming them."""
    if args.dataset is None:
        if args.job is not None:
            raise ValueError("--job names the job of a dataset: give --dataset ROOT with it")
        return None
    return detect_identity(job=args.job)


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
    return (
        f"dataset {root}: {parts} part{'' if parts == 1 else 's'} written for job {job!r} host {host!r} rank {rank} "
        f"(read all ranks with stroboscope.open_dataset({root!r}))"
    )
