"""JSON lines sender: one JSON object per published event."""

from __future__ import annotations

import json
import math
import os
import threading
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from stroboscope._base.checks import check_bool, check_file_path
from stroboscope.senders._base import BuiltinSender, StatsDict, flatten_event
from stroboscope.senders._files import open_private_text, seconds_iso_utc


class JSONLinesSender(BuiltinSender):
    """Write each event as one line of JSON: ``{"time": "…Z", "cpu": 12.5, …}``.

    Parameters
    ----------
    path : str or os.PathLike
        The file, created (truncated) with mode 0600.
    flatten : bool
        Flatten nested values (``"network.sent"``) instead of keeping them nested (default False:
        JSON holds the event as the monitor built it).
    flush : bool
        Flush to the OS after every line (default True).

    Non-finite numbers (NaN, ±inf), which JSON cannot hold, are written as ``null``.
    """

    def __init__(
        self, path: str | os.PathLike[str], *, flatten: bool = False, flush: bool = True
    ) -> None:
        super().__init__()
        self.path = Path(check_file_path("path", path))
        self._flatten = check_bool("flatten", flatten)
        self._flush = check_bool("flush", flush)
        self._file = open_private_text(self.path)
        self._lock = threading.Lock()

    def publish(self, event: StatsDict, **kwargs: Any) -> None:
        """Append ``event`` as one JSON line (``timestamp=`` in seconds sets ``time``)."""
        body: Mapping[str, Any] = flatten_event(event) if self._flatten else event
        record = {"time": seconds_iso_utc(self._timestamp(kwargs)), **_jsonable(body)}
        line = json.dumps(record, allow_nan=False, separators=(",", ":"))
        with self._lock:
            if self._file.closed:
                raise RuntimeError(f"JSONLinesSender({str(self.path)!r}) is closed")
            self._file.write(line + "\n")
            if self._flush:
                self._file.flush()

    def close(self) -> None:
        """Close the file (idempotent)."""
        with self._lock:
            self._file.close()

    def __repr__(self) -> str:
        return f"JSONLinesSender({str(self.path)!r})"


def _jsonable(event: Mapping[str, Any]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key, value in event.items():
        if isinstance(value, Mapping):
            out[str(key)] = _jsonable(value)
        elif isinstance(value, bool) or value is None:
            out[str(key)] = value
        elif isinstance(value, (int, float)):
            out[str(key)] = value if math.isfinite(value) else None
        else:
            try:
                number = float(value)
            except (TypeError, ValueError):
                out[str(key)] = str(value)
            else:
                out[str(key)] = number if math.isfinite(number) else None
    return out
