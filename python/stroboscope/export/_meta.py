"""What a recording says about itself: its schema metadata, the run's provenance (the JSON
under ``stroboscope.provenance``), the sampler's own figures, what was not available and why,
and the sampler's lateness histogram — each shown when present, nothing assumed.

The provenance is read without a fixed schema: every key is shown (flattened to dotted
paths), every object with a non-empty ``reason`` is reported as "not available", the object
under ``sampler``/``stats`` as the sampler's figures, and a ``lateness_histogram`` (or any key
naming one) as ``{"upper_ns": [...], "counts": [...]}``, or a list of ``[upper_ns, count]``
pairs, is drawn.
"""

from __future__ import annotations

import json
from typing import Any

from stroboscope.formats.provenance import PROVENANCE_KEY, loads, unreadable, well_typed
from stroboscope.formats.spool_read import ROWS_LOST_KEY

_HIDDEN = ("ARROW:schema", "pandas")
"""Metadata written by pyarrow/pandas for their own round trips, not about the run."""


def provenance(metadata: dict[str, str]) -> dict[str, Any] | None:
    """The decoded provenance JSON, or None when absent; unreadable JSON is kept as text."""
    text = metadata.get(PROVENANCE_KEY)
    if text is None:
        return None
    try:
        return well_typed(loads(text, "the provenance"))
    except ValueError as exc:  # not JSON, nested too deeply, not an object: shown, not raised
        return {"unreadable provenance": f"{exc}: {text[:200]}"}


def _unreadable(metadata: dict[str, str]) -> dict[str, str]:
    """The provenance fields :func:`provenance` left out for their wrong type, and why."""
    try:
        return unreadable(loads(metadata.get(PROVENANCE_KEY) or "{}", "the provenance"))
    except ValueError:  # unreadable as a whole: already shown by provenance()
        return {}


def flatten(value: Any, prefix: str = "") -> list[tuple[str, str]]:
    """``{"a": {"b": 1}, "c": [1, 2]}`` → ``[("a.b", "1"), ("c", "[1, 2]")]``: lists of plain
    values stay on one line, lists of objects are numbered."""
    if isinstance(value, dict):
        out: list[tuple[str, str]] = []
        for k, v in value.items():
            out += flatten(v, f"{prefix}.{k}" if prefix else str(k))
        return out
    if isinstance(value, list) and any(isinstance(v, (dict, list)) for v in value):
        out = []
        for i, v in enumerate(value):
            out += flatten(v, f"{prefix}[{i}]")
        return out
    text = json.dumps(value, ensure_ascii=False) if not isinstance(value, str) else value
    return [(prefix or "value", text)]


def metadata_items(metadata: dict[str, str]) -> list[tuple[str, str]]:
    """Every metadata entry to show: the provenance flattened, then the other keys."""
    items: list[tuple[str, str]] = []
    prov = provenance(metadata)
    if prov is not None:
        items += flatten(prov)
    for key, value in metadata.items():
        if key == PROVENANCE_KEY or key in _HIDDEN:
            continue
        items.append((key, value if len(value) <= 300 else value[:300] + "…"))
    return items


KEY_FACTS = (
    ("host", "host"),
    ("pid", "pid"),
    ("recorded by", "recorded_by"),
    ("stroboscope", "stroboscope_version"),
    ("from", "start_time"),
    ("to", "end_time"),
    ("every", "interval_s"),
    ("rows", "rows"),
    ("rows lost", "rows_lost"),
    ("ticks missed", "ticks_missed"),
)
"""The provenance's facts a reader looks for first, by top-level key, with their names."""


def key_facts(metadata: dict[str, str]) -> list[tuple[str, str]]:
    """The :data:`KEY_FACTS` the provenance has (not null), as ``(name, value)``; the command
    line, when recorded, as one text."""
    prov = provenance(metadata) or {}
    out = [(name, prov[key]) for name, key in KEY_FACTS if prov.get(key) is not None]
    text = [(n, f"{v} s" if n == "every" else str(v)) for n, v in out]
    cmd = prov.get("cmdline")
    if isinstance(cmd, list) and cmd:
        text.append(("command", " ".join(str(c) for c in cmd)))
    return text


def _walk(value: Any, path: str) -> list[tuple[str, Any]]:
    out = [(path, value)]
    if isinstance(value, dict):
        for k, v in value.items():
            out += _walk(v, f"{path}.{k}" if path else str(k))
    elif isinstance(value, list):
        for i, v in enumerate(value):
            out += _walk(v, f"{path}[{i}]")
    return out


def unavailable(metadata: dict[str, str]) -> list[str]:
    """``"what: why"`` for every object in the provenance with a non-empty ``reason`` (a
    source that failed, no GPU found and why), and what the provenance says is ``missing``
    (a recording recovered from a spool knows less)."""
    prov = provenance(metadata)
    if prov is None:
        return []
    out = [f"provenance: {m} not known" for m in prov.get("missing") or []]
    out += [f"provenance: key {k!r} unreadable ({why})" for k, why in _unreadable(metadata).items()]
    for path, value in _walk(prov, ""):
        if isinstance(value, dict) and value.get("reason"):
            name = value.get("name") or path or "run"
            out.append(f"{name}: {value['reason']}")
    return out


_SAMPLER_KEYS = (
    "interval_s",
    "ticks_",
    "lateness_",
    "cost_",
    "rows_lost",
    "table_rows_lost",
    "thread_cpu",
    "clock.anchor_uncertainty_ns",
)
"""Top-level provenance figures (and prefixes) that are the sampler's measurement of itself."""


def sampler_figures(metadata: dict[str, str]) -> list[tuple[str, str]]:
    """The sampler's measurement of itself, when the provenance has it: its top-level figures
    (interval, ticks taken/missed, lateness, rows lost, the clock anchor's uncertainty), each
    source's interval and interface, any ``sampler``/``stats`` object, and
    ``stroboscope.rows_lost``."""
    out: list[tuple[str, str]] = []
    prov = provenance(metadata) or {}
    out += [
        (k, v)
        for k, v in flatten({k: v for k, v in prov.items() if not isinstance(v, list)})
        if any(k == key or (key.endswith("_") and k.startswith(key)) for key in _SAMPLER_KEYS)
        and "hist" not in k  # the histogram is drawn, not listed
    ]
    for src in prov.get("sources") or []:
        if "name" in src:
            every = src.get("interval_s")
            text = f"every {every} s" if every is not None else "interval unknown"
            if src.get("interface"):
                text += f", reads {src['interface']}"
            out.append((f"source {src['name']}", text))
    for key in ("sampler", "stats"):
        value = prov.get(key)
        if isinstance(value, dict):
            plain = {k: v for k, v in value.items() if not isinstance(v, (dict, list))}
            out += flatten(plain, key)
    lost = metadata.get(ROWS_LOST_KEY)
    if lost is not None and "rows_lost" not in prov:
        out.append(("rows lost (overwritten before they were kept)", lost))
    return out


def _as_histogram(value: Any) -> tuple[list[float], list[int]] | None:
    if (
        isinstance(value, list)
        and value
        and all(isinstance(p, (list, tuple)) and len(p) == 2 for p in value)
    ):
        return [float(p[0]) / 1e3 for p in value], [int(p[1]) for p in value]
    if not isinstance(value, dict):
        return None
    counts = next((v for k, v in value.items() if "count" in k and isinstance(v, list)), None)
    for key, scale in (("_ns", 1e3), ("_us", 1.0)):
        bounds = next(
            (v for k, v in value.items() if k.endswith(key) and isinstance(v, list)), None
        )
        if counts is not None and bounds is not None and len(bounds) == len(counts):
            return [float(b) / scale for b in bounds], [int(c) for c in counts]
    return None


def lateness_histogram(metadata: dict[str, str]) -> tuple[list[float], list[int]] | None:
    """The sampler's lateness histogram (upper bounds in µs, counts), when recorded."""
    prov = provenance(metadata)
    if prov is None:
        return None
    for path, value in _walk(prov, ""):
        if "lateness" in path.rsplit(".", 1)[-1] and "hist" in path.rsplit(".", 1)[-1]:
            got = _as_histogram(value)
            if got is not None:
                return got
    return None
