"""Rows to journal lines: the JSON Lines writing of the receiver's journal.

The format is documented in :mod:`stroboscope.compat.aitune._journal`. A row that is a dict of str
keys and plain values takes the fast path (the json module's C encoder, made once); any other row
takes the careful path (:func:`_sanitize`), which renames clashing keys, writes what JSON cannot
hold as text, and refuses what cannot be written at all. Standard library only.
"""

from __future__ import annotations

import datetime as _dt
import json
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from stroboscope.formats.journal_read import unique_names

__all__ = ["MAX_DEPTH", "EncodedBatch", "Refused", "encode_batch", "encode_rows"]

_PLAIN_TYPES = frozenset({str, int, float, bool, type(None)})


def _fast_default(value: object) -> object:
    """What the fast path's C encoder calls for a value it cannot write itself: numpy scalars
    (``.item()``), dates and times (ISO 8601) and sets. Anything else raises, so that the row
    takes the careful path (:func:`_sanitize`), which says what it changed: a mapping that is
    not a dict (its keys are checked there), a value written as ``str(value)``."""
    item = getattr(value, "item", None)
    if callable(item):  # numpy scalars
        plain = item()
        if type(plain) in _PLAIN_TYPES:
            return plain
    elif isinstance(value, (_dt.datetime, _dt.date, _dt.time)):
        return value.isoformat()
    elif isinstance(value, (set, frozenset)):
        return list(value)
    raise TypeError(f"{type(value).__name__} takes the careful path")


_encoder = json.JSONEncoder(separators=(",", ":"), default=_fast_default)


def _make_fast_encode() -> Callable[[dict[str, Any]], str]:
    """``_encoder.encode`` without its set-up on every call: the json module's C encoder, made
    once (without the circular-reference check; a circular row fails with RecursionError and
    takes the slow path). Used only when it gives the same text as ``_encoder.encode``."""
    make = getattr(json.encoder, "c_make_encoder", None)
    if make is None:  # pragma: no cover - an interpreter without the C accelerator
        return _encoder.encode
    try:
        c_encode = make(
            None,
            _fast_default,
            json.encoder.encode_basestring_ascii,
            None,
            ":",
            ",",
            False,
            False,
            True,
        )

        def encode(row: dict[str, Any]) -> str:
            return "".join(c_encode(row, 0))

        sample = {
            "a": 1,
            "b": [1.5, float("nan"), (2, 3)],
            "c": {"d": "\u00e9\n"},
            "e": None,
            "f": True,
            "g": _dt.date(2024, 1, 2),
        }
        if encode(sample) == _encoder.encode(sample):
            return encode
    except Exception:  # pragma: no cover - a json module whose internals differ
        pass
    return _encoder.encode  # pragma: no cover


_fast_encode = _make_fast_encode()


MAX_DEPTH = 64
"""Deepest nesting of a row that is written (the row itself is level 1): a deeper row is refused
(a row nested 2,000 deep would make every reader of the journal fail)."""


class Refused(Exception):
    """A row that cannot be written; the message says why."""


@dataclass
class EncodedBatch:
    """Journal bytes for a batch of rows and what happened to the rows.

    ``rows``: rows in ``data`` (one line each); ``refused``: rows left out (not a mapping,
    nested deeper than :data:`MAX_DEPTH`, a key or value without a text form); ``with_text``:
    rows written with at least one value as its ``str()``; ``renamed``: rows written with keys
    renamed because they had the same JSON text; ``first_refusal``: why the first refused row
    was refused.
    """

    data: bytes = b""
    rows: int = 0
    refused: int = 0
    with_text: int = 0
    renamed: int = 0
    first_refusal: str | None = None


class _Notes:
    """What :func:`_sanitize` did to one row."""

    def __init__(self) -> None:
        self.text = False
        self.renamed = False


def _key_text(key: object) -> str:
    """A key as JSON writes it (``1`` → ``"1"``, ``True`` → ``"true"``, ``None`` → ``"null"``),
    or ``str(key)`` for keys JSON cannot hold (a tuple)."""
    if isinstance(key, str):
        return key
    if key is True or key is False or key is None:
        return "true" if key else ("false" if key is False else "null")
    if isinstance(key, float):
        return json.dumps(key)  # 1.5, NaN, Infinity
    if isinstance(key, int):
        return int.__repr__(key)
    try:
        return str(key)
    except Exception as exc:
        raise Refused(f"a key of type {type(key).__name__} has no text: {exc}") from exc


_SCALARS = (str, int, float)


def _sanitize(value: Any, depth: int, notes: _Notes) -> Any:
    """``value`` as plain JSON data: str keys (renamed where they clash), lists for tuples and
    sets, and ``str(value)`` for what JSON cannot hold. Raises :class:`Refused`."""
    if value is None or isinstance(value, _SCALARS):  # bool is an int
        return value
    try:
        if isinstance(value, (Mapping, list, tuple, set, frozenset)) and depth >= MAX_DEPTH:
            raise Refused(f"nested deeper than {MAX_DEPTH} levels")
        if isinstance(value, Mapping):
            items = list(value.items())
            texts = [_key_text(k) for k, _ in items]
            names = unique_names(texts)
            notes.renamed |= names is not texts
            return {n: _sanitize(v, depth + 1, notes) for n, (_, v) in zip(names, items)}
        if isinstance(value, (list, tuple, set, frozenset)):
            return [_sanitize(v, depth + 1, notes) for v in value]
        item = getattr(value, "item", None)
        if callable(item):  # numpy scalars
            try:
                value = item()
            except Exception:  # .item() of a tensor of several elements, and the like
                pass
            else:
                if value is None or isinstance(value, _SCALARS):
                    return value
        if isinstance(value, (_dt.datetime, _dt.date, _dt.time)):
            return value.isoformat()
    except Refused:
        raise
    except Exception as exc:  # a mapping or sequence that fails while being read
        raise Refused(f"reading a {type(value).__name__} failed: {exc}") from exc
    notes.text = True
    try:
        return str(value)
    except Exception as exc:
        raise Refused(f"a value of type {type(value).__name__} has no text: {exc}") from exc


def _all_str_keys(mapping: Mapping[Any, Any]) -> bool:
    try:
        "".join(mapping)  # TypeError at the first key that is not a str (C speed)
    except TypeError:
        return False
    return True


def _nested_ok(values: Iterable[Any], depth: int) -> bool:
    """Whether the containers among ``values`` (of a container at level ``depth``) have str keys
    only (no two keys written alike) and nest at most :data:`MAX_DEPTH` levels."""
    for v in values:
        if type(v) in _PLAIN_TYPES:
            continue
        if isinstance(v, dict):
            if depth >= MAX_DEPTH or not _all_str_keys(v) or not _nested_ok(v.values(), depth + 1):
                return False
        elif isinstance(v, (list, tuple)) and (depth >= MAX_DEPTH or not _nested_ok(v, depth + 1)):
            return False
    return True


def _fast_line(row: dict[Any, Any]) -> str | None:
    """The line of a dict row by the C encoder, or None when it needs the careful path."""
    try:
        line = _fast_encode(row)
    except Exception:  # unencodable values, .item() raising, circular or very deep rows
        return None
    if not _all_str_keys(row):  # 1 and "1" would both be written "1"
        return None
    if line.find("{", 1) < 0 and line.find("[") < 0:  # flat: no container inside the row
        return line
    return line if _nested_ok(row.values(), 1) else None


def _careful_line(row: object) -> tuple[str, _Notes]:
    """One journal line (without its newline) by the careful path, and what was changed.
    Raises :class:`Refused`."""
    if not isinstance(row, Mapping):
        raise Refused(f"not a mapping but a {type(row).__name__}")
    notes = _Notes()
    plain = _sanitize(row, 0, notes)
    try:
        return _encoder.encode(plain), notes
    except Exception as exc:  # pragma: no cover - plain data always encodes
        raise Refused(f"{type(exc).__name__}: {exc}") from exc


def encode_batch(rows: Iterable[object]) -> EncodedBatch:
    """Journal bytes for ``rows`` (see :class:`EncodedBatch`); never raises for a bad row."""
    out = EncodedBatch()
    lines: list[str] = []
    append = lines.append
    for row in rows:
        if type(row) is dict:
            line = _fast_line(row)
            if line is not None:
                append(line)
                continue
        try:
            line, notes = _careful_line(row)
        except Exception as exc:  # Refused, or a row whose type misbehaves unforeseen
            out.refused += 1
            if out.first_refusal is None:
                why = str(exc) if isinstance(exc, Refused) else f"{type(exc).__name__}: {exc}"
                out.first_refusal = why
            continue
        append(line)
        out.with_text += notes.text
        out.renamed += notes.renamed
    if lines:
        lines.append("")
        out.data = "\n".join(lines).encode("ascii")
        out.rows = len(lines) - 1
    return out


def encode_rows(rows: Iterable[object]) -> tuple[bytes, int, int]:
    """Journal bytes for ``rows``: ``(data, rows written, rows refused)``."""
    batch = encode_batch(rows)
    return batch.data, batch.rows, batch.refused
