"""The ranks of a partitioned dataset read back one by one, for the cross-rank report.

A dataset (:mod:`stroboscope.formats.dataset`) holds, per ``job=…/host=…/rank=…`` partition, the
rank's sample parts and, under ``_scopes/``, its scope intervals; each part's schema metadata
holds the provenance of the run that wrote it (identity, clock anchor and its uncertainty, the
host's clock synchronisation). :func:`load_ranks` gives one :class:`Rank` per partition, holding
only the columns the report needs.
"""

from __future__ import annotations

import functools
import os
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from stroboscope.export._inputs import check_schema, check_scope_rows
from stroboscope.formats.dataset import open_dataset
from stroboscope.formats.provenance import from_schema

Key = tuple[str, str, int]
"""A partition: (job, host, rank)."""
SCOPE_FIELDS = ("name", "path", "depth", "thread_id", "begin_ns", "end_ns")
"""The scope-intervals columns read (``name``, ``begin_ns`` and ``end_ns`` are required)."""


@dataclass(frozen=True)
class Rank:
    """One partition of a dataset: a rank's rows, scope calls and provenance.

    Attributes
    ----------
    job, host : str
        The partition's job and host.
    rank : int
        The global rank (0 for a run that had none).
    samples : pyarrow.Table or None
        ``time``, ``mono_ns`` and the metric columns asked for, in ``mono_ns`` order (None: the
        rank wrote no sample part).
    scopes : pyarrow.Table or None
        Its scope calls (``name``, ``path``, ``depth``, ``begin_ns``, ``end_ns`` in
        CLOCK_MONOTONIC ns, ...), None when it wrote none.
    provenance : dict
        The provenance of its latest part (samples first, else scopes); empty when none.
    """

    job: str
    host: str
    rank: int
    samples: pa.Table | None
    scopes: pa.Table | None
    provenance: dict[str, Any] = field(default_factory=dict)

    @property
    def key(self) -> Key:
        """``(job, host, rank)``."""
        return (self.job, self.host, self.rank)

    @property
    def label(self) -> str:
        """``"rank 3"``."""
        return f"rank {self.rank}"

    @property
    def local_rank(self) -> int | None:
        """The local rank on its host, from the identity in the provenance (else None)."""
        ident = self.provenance.get("identity")
        value = ident.get("local_rank") if isinstance(ident, dict) else None
        if value is None:
            value = self.provenance.get("local_rank")
        return value if isinstance(value, int) else None

    @property
    def columns(self) -> list[str]:
        """The metric columns of its own rows."""
        if self.samples is None:
            return []
        return [c for c in self.samples.column_names if c not in ("time", "mono_ns")]

    @functools.cached_property
    def anchor_ns(self) -> int | None:
        """Realtime minus monotonic ns of its clock: from its rows (``time - mono_ns``, the
        median over rows: exact, the column is made from it), else the provenance's
        ``clock.anchor_ns``; None when neither says."""
        if self.samples is not None and self.samples.num_rows:
            t = self.samples.column("time").cast(pa.int64()).to_numpy(zero_copy_only=False)
            m = self.samples.column("mono_ns").to_numpy(zero_copy_only=False)
            return int(np.median(t.astype(np.int64) - m.astype(np.int64)))
        return _int(self.clock.get("anchor_ns"))

    @property
    def clock(self) -> dict[str, Any]:
        """The provenance's ``clock`` object (``anchor_ns``, ``anchor_uncertainty_ns``)."""
        value = self.provenance.get("clock")
        return value if isinstance(value, dict) else {}

    @property
    def clock_sync(self) -> dict[str, Any] | None:
        """The host's clock synchronisation when the run recorded it (``clock_sync``)."""
        value = self.provenance.get("clock_sync")
        return value if isinstance(value, dict) else None


def _int(value: Any) -> int | None:
    return int(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else None


def _provenance(schema: pa.Schema) -> dict[str, Any]:
    try:
        return from_schema(schema) or {}
    except ValueError:  # not JSON, nested too deeply (a RecursionError before), not an object
        return {}


def _parts(root: str, kind: str) -> dict[Key, list[str]]:
    """The files of each partition, in name order (parts are named to sort by time)."""
    import pyarrow.dataset as ds

    dataset = open_dataset(root, kind=kind)
    out: dict[Key, list[str]] = {}
    for frag in dataset.get_fragments():
        keys = ds.get_partition_keys(frag.partition_expression)
        job, host, rank = keys.get("job"), keys.get("host"), keys.get("rank")
        if job is None or host is None or rank is None:
            continue  # a file outside the layout: not a part
        out.setdefault((str(job), str(host), int(rank)), []).append(frag.path)
    return {k: sorted(v, key=os.path.basename) for k, v in out.items()}


def _read(paths: list[str], want: Callable[[str], bool]) -> tuple[pa.Table | None, dict[str, Any]]:
    """The wanted columns of ``paths`` as one table, and the last part's provenance."""
    tables = []
    prov: dict[str, Any] = {}
    for path in paths:
        schema = pq.read_schema(path)
        names = [n for n in schema.names if want(n)]
        tables.append(pq.read_table(path, columns=names).replace_schema_metadata(None))
        prov = _provenance(schema) or prov
    if not tables:
        return None, prov
    return pa.concat_tables(tables, promote_options="default"), prov


def _sorted(table: pa.Table, column: str) -> pa.Table:
    values = table.column(column).to_numpy(zero_copy_only=False)
    if len(values) > 1 and not bool(np.all(np.diff(values) >= 0)):
        table = table.take(pc.sort_indices(table, [(column, "ascending")]))
    return table


def load_ranks(root: str | os.PathLike[str], want: Callable[[str], bool]) -> list[Rank]:
    """One :class:`Rank` per partition of the dataset at ``root`` (sorted by job, rank, host),
    holding ``time``, ``mono_ns`` and the metric columns for which ``want(name)`` is true.

    Raises
    ------
    ValueError
        ``root`` is not a dataset (from :func:`~stroboscope.formats.dataset.open_dataset`), or
        holds no part; a part without ``mono_ns``, or a scope part without ``name``,
        ``begin_ns`` and ``end_ns``, naming the file.
    """
    text = os.fspath(root)
    samples = _parts(text, "samples")
    scopes = _parts(text, "scopes")
    if not samples and not scopes:
        raise ValueError(f"dataset {text!r} holds no part yet: no rank has written rows")
    ranks = []
    for key in sorted(set(samples) | set(scopes), key=lambda k: (k[0], k[2], k[1])):
        rows, prov = _read(samples.get(key, []), lambda n: n in ("time", "mono_ns") or want(n))
        if rows is not None:  # columns and their types (mono_ns strings: named, not a "-" error)
            part = f"dataset {text!r}: a part of job={key[0]} host={key[1]} rank={key[2]}"
            check_schema(rows.schema, part)
            rows = _sorted(rows.filter(rows.column("mono_ns").is_valid()), "mono_ns")
        calls, scope_prov = _read(scopes.get(key, []), lambda n: n in SCOPE_FIELDS)
        if calls is not None:
            missing = [c for c in ("name", "begin_ns", "end_ns") if c not in calls.column_names]
            if missing:
                raise ValueError(
                    f"dataset {text!r}: a scope part of job={key[0]} host={key[1]} "
                    f"rank={key[2]} has no {', '.join(missing)} column: not scope intervals"
                )
            check_scope_rows(
                calls, f"dataset {text!r}: a scope part of job={key[0]} host={key[1]} rank={key[2]}"
            )
            calls = _sorted(calls, "begin_ns")
        ranks.append(Rank(*key, rows, calls, prov or scope_prov))
    return ranks
