"""The provenance as stored: JSON text under one schema metadata key (Arrow, Parquet) and in
CSV sidecars. Below every room, so that the sampling facade, which gathers the provenance, and
the writers in export, which store it, share one spelling of it without importing each other.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from typing import Any

import pyarrow as pa

from stroboscope._base.checks import describe

PROVENANCE_KEY = "stroboscope.provenance"
"""Schema metadata key (and the sidecar's content): the provenance as JSON."""


def dumps(prov: Mapping[str, Any], *, indent: int | None = None) -> str:
    """The provenance as JSON text (sorted keys, UTF-8 kept; compact unless ``indent``)."""
    return json.dumps(prov, sort_keys=True, ensure_ascii=False, indent=indent)


def attach(table: pa.Table, prov: Mapping[str, Any]) -> pa.Table:
    """``table`` with ``prov`` in its schema metadata (other keys kept; no data copied)."""
    metadata = dict(table.schema.metadata or {})
    metadata[PROVENANCE_KEY.encode()] = dumps(prov).encode()
    return table.replace_schema_metadata(metadata)


MAX_DEPTH = 64
"""Deepest nesting of objects and lists a stored provenance may have (the package writes 4)."""


def _depth(value: Any) -> int:
    """How deeply ``value`` nests lists and objects (iteratively: no recursion limit)."""
    deepest, stack = 0, [(value, 1)]
    while stack:
        item, level = stack.pop()
        if isinstance(item, dict):
            children = list(item.values())
        elif isinstance(item, list):
            children = item
        else:
            continue
        deepest = max(deepest, level)
        if level <= MAX_DEPTH:  # deeper is refused anyway: no need to look further
            stack.extend((child, level + 1) for child in children)
    return deepest


def loads(raw: str | bytes, what: str) -> dict[str, Any]:
    """The provenance JSON object in ``raw``.

    Raises
    ------
    ValueError
        Naming ``what`` (a file, or a file's schema metadata key) and what is wrong: not UTF-8,
        not JSON, nested deeper than :data:`MAX_DEPTH`, or not a JSON object.
    """
    try:
        value = json.loads(raw)
    except RecursionError:  # the decoder's own limit (~1000 levels)
        raise ValueError(f"{what} is nested deeper than {MAX_DEPTH} levels") from None
    except ValueError as exc:  # JSONDecodeError, UnicodeDecodeError
        raise ValueError(f"{what} is not valid JSON: {exc}") from None
    if _depth(value) > MAX_DEPTH:
        raise ValueError(f"{what} is nested deeper than {MAX_DEPTH} levels")
    if not isinstance(value, dict):
        raise ValueError(f"{what} is not a JSON object")
    return value


def from_schema(schema: pa.Schema) -> dict[str, Any] | None:
    """The provenance a schema's metadata holds, or None (unreadable JSON raises ValueError
    naming the key)."""
    raw = (schema.metadata or {}).get(PROVENANCE_KEY.encode())
    if raw is None:
        return None
    return loads(raw, f"schema metadata {PROVENANCE_KEY}")


def _number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def _strings(value: Any) -> bool:
    return isinstance(value, list) and all(isinstance(v, str) for v in value)


def _source(value: Any) -> bool:
    return (
        isinstance(value, dict)
        and isinstance(value.get("name"), str)
        and _number(value.get("every"))
        and _number(value.get("interval_s"))
        and isinstance(value.get("interface"), (str, type(None)))
    )


def _device(value: Any) -> bool:
    return isinstance(value, dict) and "label" in value and "index" in value


_FIELDS: dict[str, tuple[Callable[[Any], bool], str]] = {
    "clock": (lambda v: isinstance(v, dict), "an object"),
    "clock_sync": (lambda v: isinstance(v, dict), "an object"),
    "gpus": (
        lambda v: (
            isinstance(v, dict)
            and (v.get("devices") is None or isinstance(v["devices"], list))
            and all(_device(d) for d in v.get("devices") or [])
        ),
        "an object whose devices are objects with a label and an index",
    ),
    "sources": (
        lambda v: isinstance(v, list) and all(_source(s) for s in v),
        "a list of objects with a name, every and interval_s",
    ),
    "missing": (_strings, "a list of strings"),
    "cmdline": (_strings, "a list of strings"),
    "interval_s": (_number, "a number of seconds"),
}
"""The provenance fields readers interpret (format, iterate, look into), and the type each must
have; None (not known) is always accepted. Every other field is only shown as it is."""


def unreadable(prov: Mapping[str, Any]) -> dict[str, str]:
    """``key → why`` for each interpreted field of ``prov`` whose value has the wrong type
    (a hand-edited or foreign recording): readers show these as unreadable, never use them."""
    out = {}
    for key, (ok, expected) in _FIELDS.items():
        value = prov.get(key)
        if value is not None and not ok(value):
            out[key] = f"expected {expected}, got {describe(value)}"
    return out


def well_typed(prov: Mapping[str, Any]) -> dict[str, Any]:
    """``prov`` without the fields :func:`unreadable` names (each reader uses this view)."""
    bad = unreadable(prov)
    return {k: v for k, v in prov.items() if k not in bad}
