"""Every writer of a finished output (through ``replace_private``) replaces only a regular file:
a FIFO, a socket, a directory or a symbolic link at the path is refused, naming the path, and
left exactly as it was (a FIFO was silently replaced by a file, rc 0; a link by a file)."""

from __future__ import annotations

import os
import socket
import stat
from collections.abc import Callable
from pathlib import Path

import pyarrow as pa
import pytest
from stroboscope.export import write_csv, write_parquet
from stroboscope.export.report import build_report, write_html
from stroboscope.export.traces import write_chrome_trace

MONO0 = 5_000_000_000


def _table() -> pa.Table:
    return pa.table(
        {
            "time": pa.array(
                [1_700_000_000_000_000_000 + i for i in range(3)], pa.timestamp("ns", "UTC")
            ),
            "mono_ns": pa.array([MONO0 + i * 1_000_000 for i in range(3)], pa.int64()),
            "cpu.util_pct": [1.0, 2.0, 3.0],
        }
    )


def _intervals() -> pa.Table:
    return pa.table(
        {
            "name": ["step"],
            "path": ["step"],
            "thread_id": pa.array([1], pa.int64()),
            "stack_id": pa.array([1], pa.uint64()),
            "depth": pa.array([0], pa.int32()),
            "begin_ns": pa.array([MONO0], pa.int64()),
            "end_ns": pa.array([MONO0 + 1_000_000], pa.int64()),
        }
    )


def _html(path: Path) -> None:
    import pyarrow.parquet as pq

    src = path.parent.parent / "src" / "run.parquet"
    src.parent.mkdir(exist_ok=True)
    pq.write_table(_table(), src)
    write_html(build_report([str(src)]), path)


WRITERS: dict[str, Callable[[Path], None]] = {
    "write_parquet": lambda p: write_parquet(_table(), p),
    "write_csv": lambda p: write_csv(_table(), p),
    "write_chrome_trace": lambda p: write_chrome_trace(p, _table(), _intervals()),
    "write_html": _html,
}


def _fifo(path: Path) -> str:
    os.mkfifo(path)
    return "is a FIFO, not a regular file: refusing to replace it"


def _socket(path: Path) -> str:
    s = socket.socket(socket.AF_UNIX)
    s.bind(str(path))
    s.close()
    return "is a socket, not a regular file: refusing to replace it"


def _link(path: Path) -> str:
    (path.parent / "target").write_bytes(b"keep me")
    path.symlink_to("target")
    return "is a symbolic link: refusing to replace it"


def _dangling(path: Path) -> str:
    path.symlink_to("nowhere")
    return "is a symbolic link: refusing to replace it"


def _directory(path: Path) -> str:
    path.mkdir()
    return "is a directory; give a file path"


TARGETS = {
    "fifo": _fifo,
    "socket": _socket,
    "symlink": _link,
    "dangling-symlink": _dangling,
    "directory": _directory,
}


def _state(path: Path) -> tuple[int, str | None]:
    st = os.lstat(path)
    return stat.S_IFMT(st.st_mode), os.readlink(path) if path.is_symlink() else None


@pytest.mark.parametrize("target", list(TARGETS))
@pytest.mark.parametrize("writer", list(WRITERS))
def test_a_writer_refuses_a_target_that_is_not_a_regular_file(
    writer: str, target: str, tmp_path: Path
) -> None:
    if writer == "write_html":
        pytest.importorskip("matplotlib")
    (tmp_path / "o").mkdir()
    out = tmp_path / "o" / "out.file"
    message = TARGETS[target](out)
    before = _state(out)
    listing = sorted(os.listdir(out.parent))
    with pytest.raises(OSError) as info:
        WRITERS[writer](out)
    assert info.value.filename == str(out)
    assert message in str(info.value)
    assert _state(out) == before  # left as it was
    assert sorted(os.listdir(out.parent)) == listing  # no temporary file left
    if target == "symlink":
        assert (out.parent / "target").read_bytes() == b"keep me"


@pytest.mark.parametrize("writer", list(WRITERS))
def test_a_writer_still_replaces_a_regular_file(writer: str, tmp_path: Path) -> None:
    if writer == "write_html":
        pytest.importorskip("matplotlib")
    out = tmp_path / "out.file"
    out.write_bytes(b"old")
    WRITERS[writer](out)
    assert out.read_bytes() != b"old" and out.stat().st_size > 0
    assert stat.S_IMODE(out.stat().st_mode) == 0o600
