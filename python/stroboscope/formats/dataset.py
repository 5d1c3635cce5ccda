"""A partitioned dataset: every rank of a job writes Parquet parts under one root, read as one.

Layout (``docs/dataset.md``)::

    ROOT/_stroboscope_dataset.json                    marker {"format": "stroboscope-dataset", ...}
    ROOT/job=J/host=H/rank=R/part-STAMP-NNNNNN.parquet  sample rows of one rank, one part a file
    ROOT/job=J/host=H/rank=R/_owner.json              the run that writes this partition
    ROOT/_scopes/job=J/host=H/rank=R/scopes-....parquet  scope intervals, one row per call

Partition values are percent-encoded (URI segment encoding: every byte but ``A-Z a-z 0-9 - _ .
~``), which pyarrow's hive partitioning decodes by default. A run without a job id writes under
``job=none``; one without a rank (a single process) under ``rank=0``. Names starting with ``_``
or ``.`` are skipped by dataset discovery (pyarrow's default), so the marker, the owner files,
the scopes tree and the temporary files of writes in progress are never read as samples.

Each file is written whole or not at all: into a dot-prefixed temporary file (0600) in its
directory, flushed to disk, renamed into place, and the directory flushed
(:func:`stroboscope._base.files.replace_private`). A rank killed mid-write leaves at most a
dot-file, which no reader sees. Each part's schema metadata holds the provenance
(``stroboscope.provenance``) with the writer's identity under ``"identity"``.
"""

from __future__ import annotations

import contextlib
import errno
import json
import math
import os
import stat
from typing import TYPE_CHECKING, Any

import pyarrow as pa

from stroboscope._base.checks import check_path
from stroboscope._base.files import read_regular, replace_private
from stroboscope._base.identity import Identity
from stroboscope.formats.partitions import (
    PARTITIONING,
    SCOPES_DIR,
    check_kind,
    check_partition_dirs,
    partition,
    partition_dir,
)
from stroboscope.formats.provenance import PROVENANCE_KEY, attach, from_schema
from stroboscope.formats.segments import SEGMENT_SHARE, segment_seconds
from stroboscope.formats.writers import write_parquet

if TYPE_CHECKING:
    import pyarrow.dataset as ds

__all__ = [  # the layout's names (formats/partitions.py) stay importable from here
    "MARKER",
    "PARTITIONING",
    "PART_SECONDS",
    "SCOPES_DIR",
    "SMALL_FILE",
    "ensure_root",
    "fsync_dir",
    "is_dataset",
    "make_partition",
    "open_dataset",
    "part_capacity",
    "part_seconds",
    "partition",
    "partition_dir",
    "write_part",
    "write_scopes",
]

MARKER = "_stroboscope_dataset.json"
"""The file at the root that makes a directory a dataset."""
MARKER_CONTENT = {"format": "stroboscope-dataset", "layout": 1}
PART_SECONDS = 10.0
"""A rank's rows become a part at least this often (s): sooner when its ring holds less
(:func:`part_seconds`)."""


def part_seconds(capacity: int, interval: float) -> float:
    """Seconds of rows per part for a ring of ``capacity`` rows taken every ``interval``
    seconds: a segment's length (:func:`stroboscope.formats.segments.segment_seconds`, a quarter
    of the ring, so the ring keeps the part being written whole), at most :data:`PART_SECONDS`."""
    return segment_seconds(capacity, interval, most=PART_SECONDS)


def part_capacity(interval: float) -> int:
    """The ring (rows taken every ``interval`` seconds) whose parts are :data:`PART_SECONDS`
    long (:func:`part_seconds`)."""
    return math.ceil(SEGMENT_SHARE * PART_SECONDS / interval)


def fsync_dir(path: str) -> None:
    """Flush a directory's entries to disk (so a rename or a new entry in it survives a crash)."""
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


SMALL_FILE = 1 << 20
"""The most a marker or an owner record is read of (they are a line of JSON)."""


def _read_marker(root: str) -> dict[str, Any] | None:
    """The root's marker; None when there is none or it is not a JSON object. A marker that
    is a FIFO, a device, a directory or unreadable raises ValueError naming it (never waited
    on)."""
    path = os.path.join(root, MARKER)
    try:
        raw = read_regular(path, "dataset marker", limit=SMALL_FILE)
    except ValueError:
        if not os.path.lexists(path):  # no marker (or ``root`` is no directory)
            return None
        raise
    try:
        value = json.loads(raw)
    except (ValueError, RecursionError):
        return None
    return value if isinstance(value, dict) else None


def is_dataset(path: str | os.PathLike[str]) -> bool:
    """Whether ``path`` is a directory holding a stroboscope dataset's marker."""
    marker = _read_marker(os.fspath(path))
    return marker is not None and marker.get("format") == MARKER_CONTENT["format"]


def _accept_marker(root: str) -> bool:
    """Whether ``root`` has a marker this version can write to (False: none); a marker of
    another format or of a newer layout raises ValueError naming the root."""
    marker = _read_marker(root)
    if marker is None:
        return False
    if marker.get("format") != MARKER_CONTENT["format"] or not isinstance(
        marker.get("layout"), int
    ):
        raise ValueError(f"dataset {root!r}: {MARKER} is not a stroboscope dataset marker")
    if marker["layout"] > MARKER_CONTENT["layout"]:
        raise ValueError(
            f"dataset {root!r} has layout {marker['layout']}, newer than this version "
            f"writes ({MARKER_CONTENT['layout']}): upgrade stroboscope or give another root"
        )
    return True


def ensure_root(root: str | os.PathLike[str]) -> str:
    """Make ``root`` a dataset (create it 0700 and its marker) and return its path.

    An existing dataset is accepted as it is; an existing directory with other visible entries
    and no marker, or a file, is refused (ValueError naming it): parts are never mixed into
    unrelated files. A root that cannot be created or written raises the OSError, naming it.
    """
    text = check_path("dataset", root)
    if os.path.lexists(text) and not os.path.isdir(text):
        raise ValueError(f"dataset {text!r} is not a directory; give a directory for the dataset")
    if os.path.isdir(text):
        if _accept_marker(text):
            return text
        # Dot-files are other writers' markers in the making (a temporary name); anything else
        # means the directory holds something that is not ours, unless another rank made the
        # root a dataset since the marker was looked for (its marker comes before its parts).
        others = [e for e in os.listdir(text) if not e.startswith(".")]
        if others and _accept_marker(text):
            return text
        if others:
            raise ValueError(
                f"dataset {text!r} is a directory that is not a stroboscope dataset (no {MARKER}) "
                f"and not empty ({sorted(others)[:3]}): give a new or empty directory"
            )
    else:
        parent = os.path.dirname(os.path.abspath(text))
        with contextlib.suppress(FileExistsError):  # another rank made it just now
            os.makedirs(text, mode=0o700)
        fsync_dir(parent)
    with replace_private(os.path.join(text, MARKER)) as f:
        f.write(json.dumps(MARKER_CONTENT).encode() + b"\n")
    fsync_dir(text)
    return text


def make_partition(root: str, identity: Identity, kind: str) -> str:
    """Create ``identity``'s partition directory (each new level 0700, flushed to disk); an
    existing level that is a symbolic link or not a directory is refused."""
    path = partition_dir(root, identity, kind=kind)
    rel = os.path.relpath(path, root).split(os.sep)
    current = root
    for part in rel:
        parent, current = current, os.path.join(current, part)
        try:
            os.mkdir(current, 0o700)
        except FileExistsError:
            st = os.lstat(current)
            if not stat.S_ISDIR(st.st_mode):
                raise ValueError(
                    f"dataset {root!r}: {current!r} is not a directory (a link or a file); "
                    f"remove it or give another root"
                ) from None
            continue
        fsync_dir(parent)
    return path


def _with_identity(table: pa.Table, identity: Identity) -> pa.Table:
    """``table`` with the identity and partition added to its provenance (kept, or made)."""
    prov = dict(from_schema(table.schema) or {})
    job, host, rank = partition(identity)
    prov["identity"] = identity.to_dict()
    prov["partition"] = {"job": job, "host": host, "rank": rank}
    return attach(table, prov)


def _check_name(name: str, prefix: str) -> str:
    if not isinstance(name, str):
        raise TypeError(f"name must be a str file name, got {type(name).__name__}")
    if (
        not name.startswith(prefix)
        or not name.endswith(".parquet")
        or os.sep in name
        or "\0" in name
    ):
        raise ValueError(f"name must be a file name {prefix}….parquet (no directory), got {name!r}")
    return name


def _write(
    table: pa.Table, root: str | os.PathLike[str], identity: Identity, name: str, kind: str
) -> str:
    if not isinstance(table, pa.Table):
        raise TypeError(f"table must be a pyarrow.Table, got {type(table).__name__}")
    top = ensure_root(root)
    directory = make_partition(top, identity, kind)
    path = os.path.join(directory, name)
    if kind == "samples" and os.path.lexists(path):
        # Parts are never replaced: a reader may hold the old one, and it holds other rows.
        raise FileExistsError(errno.EEXIST, "a part of this name exists; give a new name", path)
    write_parquet(_with_identity(table, identity), path)  # temp dot-file, fsync, rename
    fsync_dir(directory)
    return path


def write_part(
    table: pa.Table, root: str | os.PathLike[str], *, identity: Identity, name: str
) -> str:
    """Write sample rows (``Frame.to_arrow()``) as the part ``name`` (``part-….parquet``) of
    ``identity``'s partition under ``root``, whole or not at all; return its path.

    The root is made a dataset when it is not one (:func:`ensure_root`). The provenance in the
    table's schema metadata is kept, with ``identity`` (``"identity"``) and the partition
    (``"partition"``) added. An existing file of that name is never replaced (FileExistsError).
    A table without rows is refused (ValueError): a part holds rows.
    """
    if isinstance(table, pa.Table) and table.num_rows == 0:
        raise ValueError(
            "table has no rows: a part holds at least one row (write a part when rows came)"
        )
    return _write(table, root, identity, _check_name(name, "part-"), "samples")


def write_scopes(
    table: pa.Table, root: str | os.PathLike[str], *, identity: Identity, name: str
) -> str:
    """Write a scope-intervals table (``Sampler.scope_intervals()``) as ``name``
    (``scopes-….parquet``) under ``ROOT/_scopes/``, as :func:`write_part` does, except that a
    file of that name is replaced (atomically: a reader sees the old or the new one, whole): a
    run's scopes file is rewritten with all its intervals at each stop."""
    return _write(table, root, identity, _check_name(name, "scopes-"), "scopes")


def open_dataset(root: str | os.PathLike[str], *, kind: str = "samples") -> ds.Dataset:
    """The dataset at ``root`` as one :class:`pyarrow.dataset.Dataset`.

    Parameters
    ----------
    root : path
        A dataset's root (made by ``stroboscope record --dataset``, ``Sampler(dataset=...)`` or
        :func:`write_part`).
    kind : {"samples", "scopes"}
        The sample rows (``time``, ``mono_ns``, metric columns) or the scope intervals.

    Returns
    -------
    pyarrow.dataset.Dataset
        With the hive partition columns ``job`` (string), ``host`` (string) and ``rank``
        (int64), and the schema unified over all parts: a column some parts lack (host-wide
        columns that only local rank 0 records) is null in their rows. Field metadata (units)
        is kept; the per-part provenance stays in each file (``dataset.files``).

    Raises
    ------
    ValueError
        When ``root`` is not a dataset (no marker), or two parts disagree on a column's type.
    """
    import pyarrow.dataset as ds

    text = check_path("root", root)
    if not is_dataset(text):
        raise ValueError(
            f"root {text!r} is not a stroboscope dataset (no {MARKER}); give the directory "
            f"given to --dataset / dataset="
        )
    base = text if check_kind(kind) == "samples" else os.path.join(text, SCOPES_DIR)
    hive = ds.partitioning(PARTITIONING, flavor="hive")  # percent-decoded ("uri") by default
    if not os.path.isdir(base):
        return ds.dataset([], schema=PARTITIONING, format="parquet")
    check_partition_dirs(text, base)  # rank=abc: named, not pyarrow's "error parsing 'abc'"
    try:
        found = ds.dataset(base, format="parquet", partitioning=hive)
        schemas = [frag.physical_schema for frag in found.get_fragments()]
    except (pa.ArrowException, OSError) as exc:  # a truncated or unreadable part: pyarrow names it
        raise ValueError(f"dataset {text!r} cannot be read: {exc}") from None
    try:
        unified = pa.unify_schemas([*schemas, PARTITIONING])
    except (pa.ArrowInvalid, pa.ArrowTypeError) as exc:
        raise ValueError(f"dataset {text!r}: parts disagree on a column's type: {exc}") from None
    # The schema-wide metadata is one part's provenance; the rest stay in their files.
    meta = {k: v for k, v in (unified.metadata or {}).items() if k != PROVENANCE_KEY.encode()}
    unified = unified.with_metadata(meta or None)
    return ds.dataset(base, format="parquet", partitioning=hive, schema=unified)
