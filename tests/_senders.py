"""The events the sender tests publish, the checks they share and a reader of W&B's offline
``.wandb`` files (to read back what the W&B sender wrote)."""

from __future__ import annotations

import stat
import struct
from pathlib import Path
from typing import Any

from stroboscope.senders import AbstractBackendSender

EVENTS: list[dict[str, Any]] = [
    {"rank0.cpu": 12.5, "rank0.memory": 40.0, "rank0.network": {"sent": 100, "recv": 200}},
    {"rank0.cpu": 25.0, "rank0.memory": 41.0, "rank0.network": {"sent": 300, "recv": 500}},
    {
        "rank0.cpu": 50.0,
        "rank0.memory": 42.0,
        "rank0.network": {"sent": 700, "recv": 900},
        "rank0.gpu.0.gpu": 99.0,
    },
]
T0 = 1_800_000_000.25  # a fixed publish time (UTC seconds) so the files can be checked exactly


def publish_all(sender: AbstractBackendSender) -> None:
    for i, event in enumerate(EVENTS):
        sender.publish(event, timestamp=T0 + 2 * i)
    sender.close()


def private(path: Path) -> bool:
    return stat.S_IMODE(path.stat().st_mode) == 0o600


def _wandb_records(path: Path) -> list[bytes]:
    """The records of a .wandb file: a 7-byte header (":W&B", magic, version), then LevelDB-style
    log records (crc32c, length, type) in 32 KiB blocks, long records split FIRST/MIDDLE/LAST."""
    data = path.read_bytes()
    assert data[:4] == b":W&B"
    block, pos, out, pending = 32768, 7, [], b""
    while pos + 7 <= len(data):
        left = block - pos % block
        if left < 7:  # a block's tail too short for a header is padding
            pos += left
            continue
        _crc, length, kind = struct.unpack_from("<IHB", data, pos)
        chunk = data[pos + 7 : pos + 7 + length]
        pos += 7 + length
        if kind == 1:  # FULL
            out.append(chunk)
        elif kind == 2:  # FIRST
            pending = chunk
        elif kind == 3:  # MIDDLE
            pending += chunk
        elif kind == 4:  # LAST
            out.append(pending + chunk)
    return out
