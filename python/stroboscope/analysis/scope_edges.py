"""From scope edges to scope calls: the events log's begin/end records paired into one row per call
(the scope-intervals table that analysis and export read; its columns are
:data:`stroboscope.analysis._intervals.INTERVAL_FIELDS`, then one string column per label key),
for one process's log (:func:`pair_events`) and for the shared events of a recorded command's
processes (:func:`shared_intervals`).

Pairing needs no per-event Python loop. On one stack scopes nest, so at a given depth its begins
and ends alternate in time: sorted by (stack, depth, log order), a begin matches the end right
after it in the same group. A begin with no such end is a scope still open (``end_ns`` null); an
end with no begin lost its begin to the log's overwriting and is dropped. A scope's parent is the
latest scope one level up on the same stack that began before it.
"""

from __future__ import annotations

import json
import os
from typing import Any

import numpy as np
import pyarrow as pa

from stroboscope.analysis._intervals import COUNTER_FIELDS, INTERVAL_FIELDS, PROCESS_FIELDS
from stroboscope.formats.shared_events import BEGIN, END, read_events_dir, split_counters

__all__ = ["pair_events", "shared_intervals", "with_shared"]


def split_counter_records(table: pa.Table) -> pa.Table:
    """The edges of ``table`` (the events log's records, in index order), with their own
    counters as columns when the log has edge counters records (kinds 3 and 4)."""
    kind = np.asarray(table.column("kind").to_numpy(), dtype=np.uint8)
    if not (kind > END).any():
        return table
    w0 = np.asarray(table.column("mono_ns").to_numpy(), dtype=np.int64).view(np.uint64)
    w1 = np.asarray(table.column("stack_id").to_numpy(), dtype=np.uint64)
    lo = np.asarray(table.column("scope_id").to_numpy(), dtype=np.uint64)
    hi = np.asarray(table.column("labels_id").to_numpy(), dtype=np.uint64)
    thread = np.asarray(table.column("thread_id").to_numpy(), dtype=np.int64)
    edge, counters = split_counters(kind, thread, w0, w1, lo | (hi << np.uint64(32)))
    table = table.filter(pa.array(edge))
    for name, values in counters.items():
        table = table.append_column(name, values)
    return table


def recovered_intervals(events: pa.Table) -> pa.Table:
    """The scope-intervals table of a spool's recovered events
    (:func:`stroboscope.formats.spool_read.recover_events`: the log's records with ``scope`` and
    ``labels`` resolved), as a live sampler's ``scope_intervals()`` gives it from its log. Its
    metadata carries the events' counts as ``events_lost``, ``events_cut_bytes``."""
    edges = split_counter_records(events)
    ids = np.concatenate(
        [_column(edges, "scope_id", np.int64), _column(edges, "labels_id", np.int64)]
    )
    texts = edges.column("scope").to_pylist() + edges.column("labels").to_pylist()
    strings = [""] * (int(ids.max()) + 1 if len(ids) else 0)
    for i, text in zip(ids.tolist(), texts):
        if text is not None:
            strings[i] = text
    meta = {
        k.removeprefix(b"stroboscope."): v
        for k, v in (events.schema.metadata or {}).items()
        if k.startswith(b"stroboscope.events_")
    }
    return pair_events(edges, strings).replace_schema_metadata(meta)


def _column(events: pa.Table, name: str, dtype: Any) -> np.ndarray[Any, Any]:
    return np.asarray(events.column(name).to_numpy(zero_copy_only=False), dtype=dtype)


def pair_events(events: pa.Table, strings: list[str]) -> pa.Table:
    """The scope-intervals table of ``events`` (the events log's schema), sorted by begin time.

    ``strings`` maps the interned ids of scope names and label sets to their text.
    """
    n = events.num_rows
    kind = _column(events, "kind", np.uint8)
    stack = _column(events, "stack_id", np.uint64)
    depth = _column(events, "depth", np.int64)
    order = np.lexsort((np.arange(n), depth, stack))
    k, s, d = kind[order], stack[order], depth[order]
    same_next = np.zeros(n, dtype=bool)
    same_next[:-1] = (s[1:] == s[:-1]) & (d[1:] == d[:-1])
    is_begin = k == BEGIN
    matched = np.zeros(n, dtype=bool)
    matched[:-1] = is_begin[:-1] & same_next[:-1] & (k[1:] == END)
    begins = order[is_begin]
    ends = np.full(len(begins), -1, dtype=np.int64)
    pos = np.flatnonzero(is_begin)
    has_end = matched[pos]
    ends[has_end] = order[pos[has_end] + 1]

    mono = _column(events, "mono_ns", np.int64)
    scope_id = _column(events, "scope_id", np.int64)
    labels_id = _column(events, "labels_id", np.int64)
    thread = _column(events, "thread_id", np.int64)
    begin_ns = mono[begins]
    end_ns = np.where(ends >= 0, mono[np.maximum(ends, 0)], 0)
    by_time = np.argsort(begin_ns, kind="stable")
    begins, ends = begins[by_time], ends[by_time]
    begin_ns, end_ns = begin_ns[by_time], end_ns[by_time]

    name_of = _names(scope_id[begins], strings)
    paths = _paths(name_of, stack[begins], depth[begins], begin_ns, end_ns, ends >= 0)
    values: dict[str, Any] = {
        "name": name_of,
        "path": paths,
        "thread_id": thread[begins],
        "stack_id": stack[begins],
        "depth": depth[begins],
        "begin_ns": begin_ns,
        "end_ns": end_ns,
    }
    masks = {"end_ns": ends < 0}  # a scope still open
    columns: dict[str, Any] = {  # the one schema's names, order and types
        f.name: pa.array(values[f.name], f.type, mask=masks.get(f.name)) for f in INTERVAL_FIELDS
    }
    columns.update(_counter_columns(events, begins, ends))
    columns.update(_label_columns(labels_id[begins], strings))
    return pa.table(columns)


def _counter_columns(
    events: pa.Table, begins: np.ndarray[Any, Any], ends: np.ndarray[Any, Any]
) -> dict[str, pa.Array]:
    """Per call, its end's counters minus its begin's (:data:`COUNTER_FIELDS`), when the edges
    carry any (edge counters); null where either edge has none. Fault and switch counts are the
    low 32 bits of the thread's, so their difference is taken modulo 2**32."""
    names = [f.name for f in COUNTER_FIELDS]
    if names[0] not in events.column_names or events.column(names[0]).null_count == len(events):
        return {}
    out: dict[str, pa.Array] = {}
    closed = ends >= 0
    end = np.maximum(ends, 0)
    for name in names:
        col = events.column(name)
        v = np.asarray(col.fill_null(0).to_numpy(), dtype=np.int64)
        known = ~np.asarray(col.is_null().to_numpy(zero_copy_only=False), dtype=bool)
        diff = v[end] - v[begins]
        if name != "cpu_ns":
            diff %= 1 << 32
        ok = closed & known[begins] & known[end]
        out[name] = pa.array(np.where(ok, diff, 0), pa.int64(), mask=~ok)
    return out


def _names(ids: np.ndarray[Any, Any], strings: list[str]) -> np.ndarray[Any, Any]:
    unique, inverse = np.unique(ids, return_inverse=True)
    text = np.array(
        [strings[i] if 0 <= i < len(strings) else f"<scope {i}>" for i in unique.tolist()],
        dtype=object,
    )
    return text[inverse]


def _paths(
    names: np.ndarray[Any, Any],
    stack: np.ndarray[Any, Any],
    depth: np.ndarray[Any, Any],
    begin: np.ndarray[Any, Any],
    end: np.ndarray[Any, Any],
    closed: np.ndarray[Any, Any],
) -> np.ndarray[Any, Any]:
    """Each call's path: its parents' names, outermost first, joined by "/" ("…/" when the
    parent's begin was overwritten in the log)."""
    paths = names.copy()
    for sid in np.unique(stack):
        on_stack = np.flatnonzero(stack == sid)  # in begin order
        levels = depth[on_stack]
        for level in range(1, int(levels.max()) + 1):
            children = on_stack[levels == level]
            parents = on_stack[levels == level - 1]
            if len(children) == 0:
                continue
            if len(parents) == 0:
                paths[children] = "…/" + names[children]
                continue
            at = np.searchsorted(begin[parents], begin[children], side="right") - 1
            parent = parents[np.maximum(at, 0)]
            # A real parent began before the child and was still open when the child ended.
            ok = (at >= 0) & (~closed[parent] | (closed[children] & (end[parent] >= end[children])))
            paths[children] = np.where(
                ok, paths[parent] + "/" + names[children], "…/" + names[children]
            )
    return np.asarray(paths, dtype=object)


def _label_columns(ids: np.ndarray[Any, Any], strings: list[str]) -> dict[str, pa.Array]:
    """One string column per label key in use (null where a call does not carry it)."""
    unique, inverse = np.unique(ids, return_inverse=True)
    sets: list[dict[str, str]] = []
    for i in unique.tolist():
        if i == 0 or not 0 <= i < len(strings):
            sets.append({})
            continue
        try:
            parsed = json.loads(strings[i])
        except ValueError:
            parsed = {}
        sets.append(parsed if isinstance(parsed, dict) else {})
    keys = sorted({k for labels in sets for k in labels})
    out: dict[str, pa.Array] = {}
    for key in keys:
        values = np.array([labels.get(key) for labels in sets], dtype=object)
        out[key] = pa.array(values[inverse], pa.string())
    return out


def shared_intervals(
    path: str | os.PathLike[str],
    *,
    skip_pid: int | None = None,
    windows: list[tuple[int, int]] | None = None,
) -> pa.Table:
    """The scope-intervals table of every process that wrote into the shared-events directory
    ``path`` (:mod:`stroboscope.formats.shared_events`), sorted by begin time.

    Columns: :data:`~stroboscope.analysis._intervals.INTERVAL_FIELDS`, then ``pid`` (int64),
    ``producer`` (``py`` for :func:`stroboscope.annotate`, ``nvtx`` for NVTX ranges), then one
    string column per label key. Each (process, producer, stack) is a stack of its own:
    ``stack_id`` is renumbered 1, 2, ... across them (a thread's id means nothing outside its
    process). The schema metadata is :func:`~stroboscope.formats.shared_events.read_events_dir`'s
    (``events_lost``, ``events_damaged``, ``events_files``).

    Parameters
    ----------
    path : path
        The directory.
    skip_pid : int, optional
        Leave out the ``py`` edges of this process (a recorder that reads its own from memory).
    windows : list of (int, int), optional
        Keep only the edges whose ``mono_ns`` falls in one of these ``[start, stop)`` spans (a
        sampler's runs): a call that began before its span is left out, one that ends after
        it is open, as in :func:`pair_events` of one run's edges.

    Raises
    ------
    ValueError
        ``path`` is not a directory.
    """
    events = read_events_dir(path)
    meta = events.schema.metadata
    if skip_pid is not None or windows is not None:
        keep = np.ones(events.num_rows, dtype=bool)
        if skip_pid is not None:
            own = np.asarray(events.column("producer").to_numpy(zero_copy_only=False)) == "py"
            keep &= ~(own & (events.column("pid").to_numpy() == skip_pid))
        if windows is not None:
            mono = events.column("mono_ns").to_numpy()
            inside = np.zeros(events.num_rows, dtype=bool)
            for start, stop in windows:
                inside |= (mono >= start) & (mono < stop)
            keep &= inside
        events = events.filter(pa.array(keep)).replace_schema_metadata(meta)
    n = events.num_rows
    pid = events.column("pid").to_numpy()
    producer_codes = events.column("producer").dictionary_encode()
    producers = [str(p) for p in producer_codes.chunk(0).dictionary.to_pylist()] if n else []
    producer = (
        np.asarray(producer_codes.chunk(0).indices.to_numpy(zero_copy_only=False), np.int64)
        if n
        else np.zeros(0, np.int64)
    )
    raw_stack = events.column("stack_id").to_numpy()
    keys = np.stack([pid.astype(np.int64), producer, raw_stack.view(np.int64)]) if n else None
    stack = np.zeros(n, dtype=np.uint64)
    stack_pid = np.zeros(0, dtype=np.int64)
    stack_producer = np.zeros(0, dtype=np.int64)
    if keys is not None:
        unique, inverse = np.unique(keys, axis=1, return_inverse=True)
        stack = inverse.reshape(-1).astype(np.uint64) + np.uint64(1)
        stack_pid, stack_producer = unique[0], unique[1]
    # One string table for the whole directory: scope names and label sets interned anew.
    texts = pa.concat_arrays(
        [events.column("scope").combine_chunks(), events.column("labels").combine_chunks()]
    ).dictionary_encode()
    strings = [str(t) for t in texts.dictionary.to_pylist()]
    ids = np.asarray(texts.indices.to_numpy(zero_copy_only=False), dtype=np.int64)
    # pair_events reads label set "" as no labels only at id 0: put "" there.
    if "" in strings:
        empty = strings.index("")
        swap = np.arange(len(strings))
        swap[[0, empty]] = swap[[empty, 0]]
        strings[0], strings[empty] = strings[empty], strings[0]
        ids = swap[ids]
    else:
        strings.insert(0, "")
        ids = ids + 1
    table = pa.table(
        {
            "mono_ns": events.column("mono_ns"),
            "kind": events.column("kind"),
            "thread_id": events.column("thread_id"),
            "scope_id": pa.array(ids[:n], pa.uint32()),
            "depth": events.column("depth"),
            "labels_id": pa.array(ids[n:], pa.uint32()),
            "stack_id": pa.array(stack, pa.uint64()),
            **{f.name: events.column(f.name) for f in COUNTER_FIELDS},
        }
    )
    intervals = pair_events(table, strings)
    rows = np.asarray(intervals.column("stack_id").to_numpy(), dtype=np.int64) - 1
    where = len(INTERVAL_FIELDS)
    names = np.asarray(producers, dtype=object)
    values: list[Any] = [stack_pid[rows], names[stack_producer[rows]] if len(rows) else []]
    for i, (field, value) in enumerate(zip(PROCESS_FIELDS, values)):
        intervals = intervals.add_column(where + i, field, pa.array(value, field.type))
    return intervals.replace_schema_metadata(meta)


def with_shared(own: pa.Table, shared: pa.Table | None, pid: int) -> pa.Table:
    """The scope intervals of process ``pid`` (``own``) and of the processes that wrote shared
    events (``shared``, with a ``pid`` column) as one table, in ``begin_ns`` order: ``own``
    gets ``pid`` (where it has no ``pid`` column yet) when both hold calls; ``own`` alone when
    ``shared`` has none, ``shared`` alone when ``own`` has none."""
    if shared is None or shared.num_rows == 0:
        return own
    if own.num_rows == 0:
        return shared
    if "pid" not in own.column_names:
        own = own.append_column("pid", pa.array([pid] * own.num_rows, pa.int64()))
    both = pa.concat_tables(
        [own.replace_schema_metadata(None), shared.replace_schema_metadata(None)],
        promote_options="default",
    )
    return both.sort_by([("begin_ns", "ascending")])
