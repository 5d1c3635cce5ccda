"""Bad arguments to the receiver, aitune's snapshot, recover and ``record --spool`` are refused
at once with an exception naming the argument and the value (before: accepted, or a message
naming nothing)."""

from __future__ import annotations

import math
import queue
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from stroboscope import Sampler, recover
from stroboscope.compat import aitune
from stroboscope.compat.aitune import ParentReceiver
from stroboscope.formats.spool_read import recover_parts as _recover_parts

# Called with values their hints do not allow (that is the point).
recover_parts: Any = _recover_parts
recover_any: Any = recover


@pytest.fixture(scope="module")
def spool(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("args") / "r.spool"
    s = Sampler(0.01, sources=["memory"], spool=path, capacity=64, segment_seconds=0.3)
    s.tick_now(3)
    s.close()
    return path


def _receiver(**kw: Any) -> None:
    ParentReceiver(queue.Queue(), **kw)


def _receiver_snapshot(tmp: Path, value: object) -> None:
    r = ParentReceiver(queue.Queue(), crash_safe=False)
    r.snapshot(tmp / "s.csv", reset_metrics=value)  # type: ignore[arg-type]


NOT_BOOL = ["no", 2, None, math.nan]
CASES: list[tuple[str, Callable[[Path, Path], object], type[Exception], str]] = [
    *[
        (f"crash_safe={v!r}", lambda s, t, v=v: _receiver(crash_safe=v), TypeError, "crash_safe")
        for v in NOT_BOOL
    ],
    *[
        (
            f"receiver reset_metrics={v!r}",
            lambda s, t, v=v: _receiver_snapshot(t, v),
            TypeError,
            "reset_metrics",
        )
        for v in NOT_BOOL
    ],
    *[
        (
            f"aitune reset_metrics={v!r}",
            lambda s, t, v=v: aitune.snapshot(t / "a.csv", v),
            TypeError,
            "reset_metrics",
        )
        for v in NOT_BOOL
    ],
    (
        "dump_path in no directory",
        lambda s, t: _receiver(dump_path=t / "nope" / "x.csv"),
        ValueError,
        "dump_path .*does not exist",
    ),
    (
        "columns unknown",
        lambda s, t: recover_parts(s, columns=["nope"]),
        ValueError,
        r"columns \['nope'\] are not columns",
    ),
    ("columns of ints", lambda s, t: recover_parts(s, columns=[5]), TypeError, "columns"),
    ("columns a str", lambda s, t: recover_parts(s, columns="time"), TypeError, "columns"),
    ("columns an int", lambda s, t: recover_parts(s, columns=5), TypeError, "columns"),
    ("recover ''", lambda s, t: recover(""), ValueError, "path is an empty path"),
    ("recover bytes", lambda s, t: recover_any(b"path"), TypeError, "path must be a str path"),
    ("recover NUL", lambda s, t: recover("a\0b"), ValueError, "path 'a\\\\x00b' contains a NUL"),
]


@pytest.mark.parametrize(
    ("call", "exc", "fragment"), [c[1:] for c in CASES], ids=[c[0] for c in CASES]
)
def test_bad_arguments_are_refused_naming_them(
    spool: Path,
    tmp_path: Path,
    call: Callable[[Path, Path], object],
    exc: type[Exception],
    fragment: str,
) -> None:
    with pytest.raises(exc, match=fragment):
        call(spool, tmp_path)


def _record(tmp: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [
            sys.executable,
            "-m",
            "stroboscope",
            "record",
            "-o",
            str(tmp / "o.parquet"),
            "--duration",
            "0.1",
            *args,
        ],
        capture_output=True,
        text=True,
        check=False,
        cwd=tmp,
    )


def test_record_refuses_an_empty_spool_path(tmp_path: Path) -> None:
    done = _record(tmp_path, "--spool", "")
    assert done.returncode == 2 and "--spool is an empty path" in done.stderr, done.stderr
    assert not (tmp_path / "o.parquet").exists()


def test_leftovers_without_a_spool_are_not_sent_to_recover(tmp_path: Path) -> None:
    (tmp_path / "X.events").write_bytes(b"")
    done = _record(tmp_path, "--spool", "X")
    assert done.returncode == 2
    assert "'X' does not exist" in done.stderr and "X.events" in done.stderr, done.stderr
    assert "stroboscope recover" not in done.stderr
