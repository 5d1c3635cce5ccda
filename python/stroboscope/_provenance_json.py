"""The provenance as stored: JSON text under one schema metadata key (Arrow, Parquet) and in
CSV sidecars. Below every room, so that the sampling facade, which gathers the provenance, and
the writers in export, which store it, share one spelling of it without importing each other.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

import pyarrow as pa

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


def from_schema(schema: pa.Schema) -> dict[str, Any] | None:
    """The provenance a schema's metadata holds, or None (unreadable JSON raises ValueError
    naming the key)."""
    raw = (schema.metadata or {}).get(PROVENANCE_KEY.encode())
    if raw is None:
        return None
    try:
        value = json.loads(raw)
    except ValueError as exc:
        raise ValueError(f"schema metadata {PROVENANCE_KEY} is not valid JSON: {exc}") from None
    if not isinstance(value, dict):
        raise ValueError(f"schema metadata {PROVENANCE_KEY} is not a JSON object")
    return value
