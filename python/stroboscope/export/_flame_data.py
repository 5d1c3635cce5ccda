"""The flame graph's data for the report page, as table math: the call tree of a set of stacks
(one node per distinct path of frames from the root, breadth-first, each node's children in the
order of their function's name, so the page lays it out in one pass and a zoom never reorders
it), and the stack samples' weights summed per (time bucket, stack), the buckets widened for a
long run until the page's entries fit :data:`FLAME_ENTRIES` (:func:`fit_buckets`); each encoded
into the page's blob (:mod:`stroboscope.export._page_data`). :mod:`stroboscope.export._flame`
puts them in the page."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from stroboscope.export._page_data import Array, Blob

I64 = Array
F64 = Array

FLAME_ENTRIES = 200_000
"""At most this many (bucket, stack) entries per recording, over all its tables (the whole run
and each scope): the buckets are widened (doubled) until they fit."""


@dataclass(frozen=True)
class CallTree:
    """The call tree of a set of stacks, nodes in breadth-first order.

    Attributes
    ----------
    functions, files : list of str
        Each frame's function and file, by frame index (frames sorted by function name).
    lines : numpy.ndarray
        Each frame's first line (int).
    parent : numpy.ndarray
        Each node's parent (node 0, the root of all stacks, has -1).
    frame : numpy.ndarray
        Each node's frame (-1 for the root).
    depth : numpy.ndarray
        Each node's depth (the root's is 0, its children 1, ...).
    stack_node : numpy.ndarray
        The node each stack (by dense stack index) ends at.
    """

    functions: list[str]
    files: list[str]
    lines: I64
    parent: I64
    frame: I64
    depth: I64
    stack_node: I64


def call_tree(frames: pa.Table, stack_ids: Array) -> CallTree:
    """The call tree of the stacks ``stack_ids`` (sorted, distinct) as ``frames`` defines them
    (the interned-stacks table: ``stack_id``, ``depth`` from 0 at the root, ``function``,
    ``file``, ``line``)."""
    keep = pc.is_in(frames.column("stack_id"), value_set=pa.array(stack_ids, pa.int32()))
    rows = frames.filter(keep).sort_by([("stack_id", "ascending"), ("depth", "ascending")])
    sid = np.asarray(rows.column("stack_id").to_numpy(), np.int64)
    fn = rows.column("function").to_pylist()
    fl = rows.column("file").to_pylist()
    ln = np.asarray(rows.column("line").to_numpy(), np.int64)
    # frames: one per (function, file, line), indexed in the order of (function, file, line)
    keys = list(zip(fn, fl, ln.tolist()))
    distinct = sorted(set(keys))
    index = {k: i for i, k in enumerate(distinct)}
    frame_of_row = np.fromiter((index[k] for k in keys), np.int64, len(keys))
    stack = np.searchsorted(stack_ids, sid)  # dense stack index of each row
    length = np.bincount(stack, minlength=len(stack_ids)).astype(np.int64)
    start = np.concatenate(([0], np.cumsum(length)[:-1])).astype(np.int64)
    by_length = np.argsort(-length, kind="stable")  # the stacks deeper than d: a prefix
    parent: list[I64] = [np.array([-1], np.int64)]
    frame: list[I64] = [np.array([-1], np.int64)]
    depth: list[I64] = [np.array([0], np.int64)]
    node = np.zeros(len(stack_ids), np.int64)
    count = 1
    n_frames = max(len(distinct), 1)
    for d in range(int(length.max()) if len(length) else 0):
        deep = by_length[: int(np.count_nonzero(length > d))]
        key = node[deep] * n_frames + frame_of_row[start[deep] + d]
        uniq, inv = np.unique(key, return_inverse=True)  # by (parent, frame): name order
        parent.append(uniq // n_frames)
        frame.append(uniq % n_frames)
        depth.append(np.full(len(uniq), d + 1, np.int64))
        node[deep] = count + inv.reshape(-1)
        count += len(uniq)
    return CallTree(
        functions=[k[0] for k in distinct],
        files=[k[1] for k in distinct],
        lines=np.array([k[2] for k in distinct], np.int64),
        parent=np.concatenate(parent),
        frame=np.concatenate(frame),
        depth=np.concatenate(depth),
        stack_node=node,
    )


@dataclass(frozen=True)
class Buckets:
    """Weights summed per (time bucket, stack), for one set of samples, sorted by bucket then
    stack.

    Attributes
    ----------
    bucket : numpy.ndarray
        Each entry's bucket (int64), counted in buckets of the width chosen.
    stack : numpy.ndarray
        Each entry's dense stack index.
    samples : numpy.ndarray
        The samples summed into each entry.
    weights : list of numpy.ndarray
        Per weight offered, each entry's sum.
    """

    bucket: I64
    stack: I64
    samples: I64
    weights: list[F64]

    def __len__(self) -> int:
        return len(self.bucket)


@dataclass(frozen=True)
class _Fine:
    """One table's samples summed per (stack, finest bucket), sorted by stack then bucket:
    ``entry`` (indices of the run's distinct pairs), their counts and weights' sums."""

    entry: I64
    samples: I64
    weights: list[F64]


def dense_ids(ids: I64) -> tuple[I64, I64]:
    """The distinct ``ids`` (sorted) and each one's position among them: by a table of the
    ids' range where it is small (no sort of a long run's samples), else by sorting."""
    if not len(ids):
        return ids, ids
    lo, hi = int(ids.min()), int(ids.max())
    if hi - lo <= 4 * len(ids) + 1024:
        present = np.zeros(hi - lo + 1, dtype=bool)
        present[ids - lo] = True
        position = np.cumsum(present) - 1
        return np.flatnonzero(present) + lo, position[ids - lo].astype(np.int64)
    distinct, inverse = np.unique(ids, return_inverse=True)
    return distinct, inverse.reshape(-1).astype(np.int64)


def sampling_period_us(t_us: I64) -> int:
    """The stacks' sampling period (µs, at least 1): the median step between the distinct times
    samples were taken at."""
    if len(t_us) > 1 and bool(np.all(t_us[1:] >= t_us[:-1])):  # in time order: no sort
        times = t_us[np.concatenate(([True], t_us[1:] != t_us[:-1]))]
    else:
        times = np.unique(t_us)
    if len(times) < 2:
        return 1
    return max(int(np.median(np.diff(times))), 1)


def _changes(stack: I64, bucket: I64, shift: int) -> int:
    """Distinct ``(stack, bucket >> shift)`` among pairs sorted by stack then bucket."""
    if not len(stack):
        return 0
    b = bucket >> shift
    return 1 + int(np.count_nonzero((stack[1:] != stack[:-1]) | (b[1:] != b[:-1])))


def fit_buckets(
    t_us: I64, stack: I64, groups: list[Array], weights: Iterable[F64]
) -> tuple[int, int, list[Buckets]]:
    """The tables of the page: all samples, then each of ``groups`` (the samples' indices of a
    scope), each sample at its time ``t_us`` (µs on the page), of its dense stack index, with
    each of ``weights`` (one array per weight, consumed one at a time: a long run never holds
    them all). Returns ``(first bucket's start µs, bucket width µs, tables)``.

    The width is the stacks' sampling period, doubled until there are at most
    :data:`FLAME_ENTRIES` buckets, then until every table together has at most
    :data:`FLAME_ENTRIES` (bucket, stack) entries. The samples are sorted once (by stack and
    finest bucket); each doubling merges neighbours of that order, with no further sort.
    """
    first = int(t_us.min()) if len(t_us) else 0
    width = sampling_period_us(t_us)
    span = int(t_us.max()) - first + 1 if len(t_us) else 1
    while span // width > FLAME_ENTRIES:  # a bucket with a sample is at least one entry
        width *= 2
    fine_b = (t_us - first) // width
    nb = int(fine_b.max()) + 1 if len(fine_b) else 1
    pairs, inv = np.unique(stack * nb + fine_b, return_inverse=True)
    inv = inv.reshape(-1)
    del fine_b
    pair_stack, pair_bucket = pairs // nb, pairs % nb
    parts: list[tuple[I64, I64, I64 | None]] = [(np.arange(len(pairs)), inv, None)]
    for group in groups:
        entry, own = np.unique(inv[group], return_inverse=True)
        parts.append((entry, own.reshape(-1), group))
    sums: list[list[F64]] = [[] for _ in parts]
    for w in weights:
        for (entry, own, picked), out in zip(parts, sums):
            part = w if picked is None else w[picked]
            out.append(np.bincount(own, part, minlength=len(entry)))
    fine = [
        _Fine(entry, np.bincount(own, minlength=len(entry)).astype(np.int64), out)
        for (entry, own, _), out in zip(parts, sums)
    ]
    shift = 0
    while (
        sum(_changes(pair_stack[f.entry], pair_bucket[f.entry], shift) for f in fine)
        > FLAME_ENTRIES
        and nb >> shift > 1
    ):
        shift += 1
    tables = [_coarse(f, pair_stack, pair_bucket, shift) for f in fine]
    return first, width << shift, tables


def _coarse(f: _Fine, pair_stack: I64, pair_bucket: I64, shift: int) -> Buckets:
    """``f`` in buckets ``2**shift`` times as wide (neighbours merged), by bucket then stack."""
    stack, bucket = pair_stack[f.entry], pair_bucket[f.entry] >> shift
    if not len(stack):
        return Buckets(bucket, stack, f.samples, f.weights)
    start = np.flatnonzero(
        np.concatenate(([True], (stack[1:] != stack[:-1]) | (bucket[1:] != bucket[:-1])))
    )
    stack, bucket = stack[start], bucket[start]
    samples = np.add.reduceat(f.samples, start)
    weights = [np.add.reduceat(w, start) for w in f.weights]
    order = np.lexsort((stack, bucket))
    return Buckets(bucket[order], stack[order], samples[order], [w[order] for w in weights])


def encode_tree(blob: Blob, tree: CallTree) -> dict[str, Any]:
    """The call tree for the page: frames (function and file texts, lines) and nodes."""
    return {
        "functions": tree.functions,
        "files": tree.files,
        "line": blob.add(tree.lines),
        "parent": blob.add(tree.parent),
        "frame": blob.add(tree.frame),
        "depth": blob.add(tree.depth),
        "stack_node": blob.add(tree.stack_node),
    }


def encode_buckets(blob: Blob, table: Buckets) -> dict[str, Any]:
    """One table for the page: the buckets as steps from the entry before (sorted: small
    integers), stacks, samples and each weight's sums (float32: a share on the page needs no
    more)."""
    return {
        "bucket": blob.add(np.diff(table.bucket, prepend=0)),
        "stack": blob.add(table.stack),
        "samples": blob.add(table.samples),
        "weights": [blob.add(w.astype(np.float32)) for w in table.weights],
    }


def rows_needed(tree: CallTree) -> int:
    """Rows of the flame graph: the root and each depth below it."""
    return int(tree.depth.max()) + 1 if len(tree.depth) else 1
