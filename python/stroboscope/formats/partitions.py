"""The partition layout of a dataset (``docs/dataset.md``): how a writer names its partition
directories, and the check a reader makes that the directories found follow it.

``ROOT/job=J/host=H/rank=R/``: job and host percent-encoded like a URI segment (what pyarrow's
``HivePartitioning`` decodes by default), rank a whole number; scope intervals under
``ROOT/_scopes/`` in the same layout.
"""

from __future__ import annotations

import os
import re
from urllib.parse import quote, unquote

import pyarrow as pa

from stroboscope._base.identity import Identity

SCOPES_DIR = "_scopes"
"""The tree of scope intervals, beside the samples (skipped by sample discovery)."""
NO_JOB = "none"
"""The job partition of a run without a job id."""
KINDS = ("samples", "scopes")
PARTITIONING = pa.schema([("job", pa.string()), ("host", pa.string()), ("rank", pa.int64())])
"""The hive partition columns every reader gets."""
_MAX_RANK = (1 << 63) - 1  # the rank column is int64


def encode(value: str) -> str:
    """A partition value as one path segment: percent-encoded like a URI segment (what
    pyarrow's ``HivePartitioning`` decodes by default); ``"a/b c"`` gives ``"a%2Fb%20c"``."""
    return quote(value, safe="")


def partition(identity: Identity) -> tuple[str, str, int]:
    """``(job, host, rank)`` of ``identity``'s partition: job ``"none"`` and rank 0 when unset."""
    if not isinstance(identity, Identity):
        raise TypeError(
            f"identity must be a stroboscope Identity (stroboscope.cluster.identity()), "
            f"got {type(identity).__name__}"
        )
    job = NO_JOB if identity.job is None else str(identity.job)
    if not job or not identity.host:
        raise ValueError(
            f"identity: job and host must be non-empty, got job={job!r} host={identity.host!r}"
        )
    return job, identity.host, 0 if identity.rank is None else int(identity.rank)


def check_kind(kind: str) -> str:
    """``kind`` if it is one of :data:`KINDS`; ValueError otherwise."""
    if kind not in KINDS:
        raise ValueError(f"kind must be one of {KINDS}, got {kind!r}")
    return kind


def partition_dir(
    root: str | os.PathLike[str], identity: Identity, *, kind: str = "samples"
) -> str:
    """The directory of ``identity``'s files of ``kind`` under ``root``."""
    job, host, rank = partition(identity)
    base = os.fspath(root) if check_kind(kind) == "samples" else os.path.join(root, SCOPES_DIR)
    return os.path.join(base, f"job={encode(job)}", f"host={encode(host)}", f"rank={rank}")


def _value_problem(key: str, value: str) -> str | None:
    """What is wrong with a partition directory's value, or None."""
    try:
        text = unquote(value, errors="strict")
    except UnicodeDecodeError:
        return f"its {key} is not percent-encoded UTF-8"
    if not text:
        return f"its {key} is empty"
    if key == "rank" and not (re.fullmatch(r"[0-9]+", value) and int(value) <= _MAX_RANK):
        return f"rank must be a whole number >= 0, got {text!r}"
    return None


def check_partition_dirs(root: str, base: str) -> None:
    """Refuse a directory under ``base`` named as a partition (``key=value``) that the layout
    does not have: another key at that level, a rank that is not a whole number, a value that
    does not decode. Names starting with ``_`` or ``.`` and directories without ``=`` are left
    alone (discovery skips them, as it skips files outside the layout).

    Raises
    ------
    ValueError
        Naming the dataset ``root``, the directory (relative to it) and what is wrong.
    """
    level = [base]
    for key in PARTITIONING.names:
        below: list[str] = []
        for directory in level:
            try:
                entries = sorted(os.scandir(directory), key=lambda e: e.name)
            except OSError:
                continue  # unreadable: the reader's own error names it
            for entry in entries:
                name, eq, value = entry.name.partition("=")
                if entry.name.startswith(("_", ".")) or not eq:
                    continue
                if not entry.is_dir(follow_symlinks=False):
                    continue
                rel = os.path.relpath(entry.path, root)
                problem = (
                    f"expected {key}=… at this level" if name != key else _value_problem(key, value)
                )
                if problem is not None:
                    raise ValueError(
                        f"dataset {root!r}: directory {rel!r} is not a partition of the layout "
                        f"job=…/host=…/rank=…: {problem}"
                    )
                below.append(entry.path)
        level = below
