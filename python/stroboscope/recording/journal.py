"""The receiver's journal: JSON Lines rows appended with ``os.write``, read back as Arrow.

The format is documented at the top of :mod:`stroboscope.recording.receiver`. This module
imports only the standard library and pyarrow, so the watchdog child can read a journal without
pandas.
"""

from __future__ import annotations

import datetime as _dt
import fcntl
import json
import logging
import os
import tempfile
from collections.abc import Callable, Iterable, Mapping
from typing import Any

import pyarrow as pa

logger = logging.getLogger("stroboscope.receiver")

JOURNAL_NAME = "journal.jsonl"
"""File name of a journal in its own private directory."""


def _json_default(value: object) -> object:
    item = getattr(value, "item", None)
    if callable(item):  # numpy scalars
        return item()
    if isinstance(value, Mapping):
        return dict(value)
    if isinstance(value, (_dt.datetime, _dt.date, _dt.time)):
        return value.isoformat()
    if isinstance(value, (tuple, set, frozenset)):
        return list(value)
    return str(value)


_encoder = json.JSONEncoder(separators=(",", ":"), default=_json_default)


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
            _json_default,
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


def _encode_row(row: object) -> str | None:
    """One journal line (without its newline), or None for a row that is not a mapping."""
    if not isinstance(row, Mapping):
        return None
    try:
        return _encoder.encode(row)
    except (TypeError, ValueError, RecursionError):  # keys JSON cannot hold, circular values
        plain = {str(k): v for k, v in row.items()}
        try:
            return _encoder.encode(plain)
        except (TypeError, ValueError):
            return _encoder.encode({k: str(v) for k, v in plain.items()})


def encode_rows(rows: Iterable[object]) -> tuple[bytes, int, int]:
    """Journal bytes for ``rows``: ``(data, rows written, rows skipped as not mappings)``."""
    lines = []
    skipped = 0
    fast = _fast_encode
    for row in rows:
        if type(row) is dict:
            try:
                lines.append(fast(row))
                continue
            except (TypeError, ValueError, RecursionError):
                pass  # the slow path below says what to do with it
        line = _encode_row(row)
        if line is None:
            skipped += 1
        else:
            lines.append(line)
    if not lines:
        return b"", 0, skipped
    lines.append("")
    return "\n".join(lines).encode("ascii"), len(lines) - 1, skipped


def parse_journal(data: bytes) -> tuple[list[dict[str, Any]], int]:
    """Rows of a journal's bytes and the number of damaged lines skipped (a torn last line is
    expected after a crash and is not counted)."""
    lines = data.split(b"\n")
    rows: list[dict[str, Any]] = []
    damaged = 0
    loads = json.loads
    for line in lines[:-1]:  # the last piece is b"" or a torn line
        if not line:
            continue
        try:
            row = loads(line)
        except ValueError:
            damaged += 1
            continue
        if isinstance(row, dict):
            rows.append(row)
        else:
            damaged += 1
    return rows, damaged


def read_journal_rows(path: str | os.PathLike[str]) -> tuple[list[dict[str, Any]], int]:
    """Rows of the journal file ``path`` and the number of damaged lines skipped."""
    with open(path, "rb") as f:
        return parse_journal(f.read())


def _flatten(row: dict[str, Any], prefix: str = "") -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key, value in row.items():
        name = f"{prefix}{key}"
        if isinstance(value, dict):
            out.update(_flatten(value, name + "."))
        else:
            out[name] = value
    return out


def _as_text(value: Any) -> str | None:
    if value is None:
        return None
    if isinstance(value, str):
        return value
    return json.dumps(value, separators=(",", ":"))


def _column(values: list[Any]) -> pa.Array:
    try:
        array = pa.array(values)
    except (pa.ArrowInvalid, pa.ArrowTypeError, OverflowError, TypeError):
        return pa.array([_as_text(v) for v in values], pa.string())
    if pa.types.is_nested(array.type):  # lists: CSV cannot hold them
        return pa.array([_as_text(v) for v in values], pa.string())
    return array


def rows_to_table(rows: list[dict[str, Any]]) -> pa.Table:
    """An Arrow table of ``rows``: nested objects flattened to dotted keys, the union of the
    keys as columns (in order of first appearance), missing cells null."""
    flat = [_flatten(r) if any(isinstance(v, dict) for v in r.values()) else r for r in rows]
    names: dict[str, None] = {}
    for r in flat:
        if r.keys() - names.keys():
            names.update(dict.fromkeys(r))
    return pa.table({name: _column([r.get(name) for r in flat]) for name in names})


def read_journal(path: str | os.PathLike[str]) -> pa.Table:
    """The journal file ``path`` as an Arrow table (see the module documentation)."""
    return rows_to_table(read_journal_rows(path)[0])


class Journal:
    """The append-only journal file of one receiver (read and written through one descriptor)."""

    def __init__(self, journal_dir: str | None) -> None:
        self.dir_owned = journal_dir is None
        if journal_dir is None:
            self.dir = tempfile.mkdtemp(prefix="stroboscope-receiver-")  # mode 0700
            self.path = os.path.join(self.dir, JOURNAL_NAME)
            flags = os.O_RDWR | os.O_CREAT | os.O_EXCL | os.O_APPEND | os.O_CLOEXEC
            fd = os.open(self.path, flags, 0o600)
        else:
            self.dir = journal_dir
            # mkstemp: a new file (O_EXCL), mode 0600, close-on-exec
            fd, self.path = tempfile.mkstemp(
                prefix="stroboscope-receiver-", suffix=".jsonl", dir=journal_dir
            )
            fcntl.fcntl(fd, fcntl.F_SETFL, fcntl.fcntl(fd, fcntl.F_GETFL) | os.O_APPEND)
        self.fd: int | None = fd
        self.owner = os.getpid()

    def append(self, data: bytes) -> None:
        view = memoryview(data)
        while view:
            written = os.write(self._fd(), view)
            view = view[written:]

    def read(self) -> bytes:
        fd = self._fd()
        size = os.fstat(fd).st_size
        chunks = []
        offset = 0
        while offset < size:
            chunk = os.pread(fd, min(size - offset, 1 << 24), offset)
            if not chunk:
                break
            chunks.append(chunk)
            offset += len(chunk)
        return b"".join(chunks)

    def truncate(self) -> None:
        os.ftruncate(self._fd(), 0)

    def _fd(self) -> int:
        if self.fd is None:
            raise RuntimeError("the receiver's journal is closed")
        return self.fd

    def close(self) -> None:
        """Close and delete the journal (only in the process that made it)."""
        fd, self.fd = self.fd, None
        if fd is None or os.getpid() != self.owner:
            return
        os.close(fd)
        for remove, path in ((os.unlink, self.path), (os.rmdir, self.dir)):
            if remove is os.rmdir and not self.dir_owned:
                continue
            try:
                remove(path)
            except FileNotFoundError:
                pass
            except OSError as exc:
                logger.warning("could not remove %s: %s", path, exc)
