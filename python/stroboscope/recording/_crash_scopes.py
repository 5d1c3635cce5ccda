"""The scope intervals of a recording whose recorder died: run by the watchdog child after it
wrote the dump (``python -m stroboscope.recording._crash_scopes EVENTS_DIR DUMP``), in a process
of its own so that the watchdog loads no more than the formats.

It reads the shared events the recorded command's processes wrote (the command was killed with
the recorder, so every edge it wrote is there), writes them beside the dump as
``<stem>.scopes.parquet`` with the dump's provenance, as a clean end does
(:func:`stroboscope.recording._finish.write_scopes_beside`), removes the directory and prints one
line for the watchdog's log.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Sequence
from typing import Any

from stroboscope.formats.provenance import from_schema
from stroboscope.formats.shared_events import remove_events_dir
from stroboscope.formats.writers import output_format, sidecar_path
from stroboscope.recording._finish import read_events, write_scopes_beside


def _provenance(dump: str) -> dict[str, Any]:
    """The dump's provenance (Parquet: its schema; CSV: its sidecar), empty when it has none."""
    try:
        if output_format(dump, default="csv") == "parquet":
            import pyarrow.parquet as pq

            return dict(from_schema(pq.read_schema(dump)) or {})
        with open(sidecar_path(dump), encoding="utf-8") as f:
            value = json.load(f)
        return value if isinstance(value, dict) else {}
    except (OSError, ValueError):
        return {}


def main(argv: Sequence[str] | None = None) -> int:
    """Write the scope intervals of ``EVENTS_DIR`` beside ``DUMP``; 0 (1: bad arguments)."""
    args = list(sys.argv[1:] if argv is None else argv)
    if len(args) != 2:
        print(
            "usage: python -m stroboscope.recording._crash_scopes EVENTS_DIR DUMP", file=sys.stderr
        )
        return 1
    events_dir, dump = args
    shared = read_events(events_dir)
    if shared is None:
        print(f"scope events in {events_dir} could not be read (kept there)")
        return 0
    path = write_scopes_beside(shared, dump, _provenance(dump))
    remove_events_dir(events_dir)  # with what its drain kept beside it
    print(f"{shared.num_rows} scope calls" + (f" written to {path}" if path else ""))
    return 0


if __name__ == "__main__":
    sys.exit(main())
