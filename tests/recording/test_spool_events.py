"""Scope events of a spooled sampler: appended to the spool's sidecar by the segment writer,
recovered after a SIGKILL, and a sidecar with a torn or random tail never breaks recovery."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
import zlib
from pathlib import Path

import numpy as np
import pyarrow as pa
import pytest
from _killed import kill_after_first_line
from stroboscope import _core
from stroboscope.formats import events_file
from stroboscope.formats.spool_read import SpoolError, recover_events, recover_parts, remove_spool
from stroboscope.recording.sampler import Sampler

CHILD = textwrap.dedent(
    """
    import json, sys, threading, time
    from stroboscope import _core
    from stroboscope.recording.sampler import Sampler
    s = Sampler(0.005, sources=["memory"], spool=sys.argv[1], segment_seconds=0.5,
                capacity=4096).start()
    step, fwd = _core.events_intern("train.step"), _core.events_intern("forward")
    labels = _core.events_intern('{"phase": "warmup"}')
    before = time.monotonic_ns()
    for n in range(300):
        _core.events_begin(step, 0, labels, 7)
        _core.events_begin(fwd, 1, 0, 7)
        _core.events_end(fwd, 1, 0, 7)
        _core.events_end(step, 0, labels, 7)
    after = time.monotonic_ns()
    # Wait (without a deadline on the machine's speed) until the writer has appended them.
    while s.segments.events_written < 1200:
        time.sleep(0.01)
    print(json.dumps({"before": before, "after": after, "tid": threading.get_native_id(),
                      "written": s.segments.events_written}), flush=True)
    time.sleep(60)
    """
)


def test_events_survive_a_sigkill_of_the_recording(tmp_path: Path) -> None:
    spool = tmp_path / "run.spool"
    info = kill_after_first_line(CHILD, str(spool))
    side = Path(str(spool) + ".events")
    assert side.stat().st_mode & 0o777 == 0o600
    got = recover_parts(spool)
    events = got.events
    assert events.equals(recover_events(spool))
    assert events.num_rows == info["written"] == 1200
    assert (
        events.column("scope").to_pylist()
        == ["train.step", "forward", "forward", "train.step"] * 300
    )
    assert events.column("kind").to_pylist() == [1, 1, 2, 2] * 300
    assert events.column("depth").to_pylist() == [0, 1, 1, 0] * 300
    warm = '{"phase": "warmup"}'
    assert events.column("labels").to_pylist() == [warm, "", "", warm] * 300
    assert set(events.column("thread_id").to_pylist()) == {info["tid"]}
    assert set(events.column("stack_id").to_pylist()) == {7}
    mono = events.column("mono_ns").to_numpy()
    assert info["before"] <= mono[0] and mono[-1] <= info["after"] and np.all(np.diff(mono) >= 0)
    meta = events.schema.metadata
    assert (
        meta[b"stroboscope.events_lost"] == b"0" and meta[b"stroboscope.events_cut_bytes"] == b"0"
    )
    # The rows' clock anchor: mono_ns + anchor is the rows' time column.
    rows = pa.Table.from_batches([b for part in got.parts for b in part.to_batches()])
    anchor = int(meta[b"stroboscope.anchor_realtime_ns"])
    time_ns = rows.column("time").cast(pa.int64()).to_pylist()
    assert [m + anchor for m in rows.column("mono_ns").to_pylist()] == time_ns
    remove_spool(spool)
    assert not side.exists()


def test_a_live_sampler_writes_only_its_own_events(tmp_path: Path) -> None:
    _core.events_begin(_core.events_intern("before the sampler"), 0, 0, 1)
    spool = tmp_path / "live.spool"
    s = Sampler(0.01, sources=["memory"], spool=spool, segment_seconds=0.2, capacity=1024)
    with s:
        sid = _core.events_intern("inside")
        _core.events_begin(sid, 0, 0, 2)
        _core.events_end(sid, 0, 0, 2)
    status = s.segments
    assert status is not None and status.events_written == 2 and status.events_errors == 0
    events = recover_events(spool)
    assert events.column("scope").to_pylist() == ["inside", "inside"]
    assert events.column("stack_id").to_pylist() == [2, 2]
    remove_spool(spool)


def test_a_leftover_sidecar_is_refused_before_anything_is_made(tmp_path: Path) -> None:
    spool = tmp_path / "old.spool"
    Path(str(spool) + ".events").write_bytes(events_file.MAGIC)
    # No spool beside it: refused, and not sent to `recover`, which cannot read a sidecar alone.
    with pytest.raises(ValueError, match="does not exist, but segments or an events sidecar"):
        Sampler(0.01, sources=["memory"], spool=spool)
    assert not spool.exists()


def _sidecar(tmp_path: Path) -> tuple[Path, bytes]:
    """A spool recorded with 40 events in its sidecar (events written by this process)."""
    spool = tmp_path / "s.spool"
    with Sampler(0.01, sources=["memory"], spool=spool, segment_seconds=0.2, capacity=1024):
        ids = [_core.events_intern(f"scope-{k}") for k in range(4)]
        for n in range(40):
            _core.events_begin(ids[n % 4], n % 3, 0, n)
    return spool, Path(str(spool) + ".events").read_bytes()


def test_a_torn_tail_is_cut_back_to_the_last_whole_chunk(tmp_path: Path) -> None:
    spool, good = _sidecar(tmp_path)
    side = Path(str(spool) + ".events")
    whole = recover_events(spool)
    assert whole.num_rows == 40
    assert whole.column("scope").to_pylist() == [f"scope-{n % 4}" for n in range(40)]
    # A second chunk appended by hand, then cut at every length: the first chunks stay whole.
    rec = np.zeros(3, events_file.RECORD)
    rec["scope_id"] = 0xFFFF_FFF0  # an id the strings do not hold (the run may have interned
    # hundreds before this test): a null name
    payload = events_file._EVTS.pack(10**6, 5, 3) + rec.tobytes()
    extra = events_file.HEAD.pack(b"EVTS", len(payload), zlib.crc32(payload)) + payload
    side.write_bytes(good + extra)
    full = recover_events(spool)
    assert full.num_rows == 43 and full.column("scope").null_count == 3
    assert full.schema.metadata[b"stroboscope.events_lost"] == b"5"
    for cut in range(1, len(extra)):
        side.write_bytes(good + extra[:cut])
        torn = recover_events(spool)
        assert torn.num_rows == 40
        assert torn.schema.metadata[b"stroboscope.events_cut_bytes"] == str(cut).encode()
    # A flipped byte inside the appended chunk fails its CRC: cut there too.
    bad = bytearray(good + extra)
    bad[len(good) + 20] ^= 0xFF
    side.write_bytes(bytes(bad))
    assert recover_events(spool).num_rows == 40


def test_random_bytes_never_crash_or_hang_the_reader(tmp_path: Path) -> None:
    spool, good = _sidecar(tmp_path)
    side = Path(str(spool) + ".events")
    rng = np.random.default_rng(11)
    for trial in range(300):
        data = bytearray(good)
        if trial % 3 == 0:
            data = bytearray(events_file.MAGIC + rng.bytes(int(rng.integers(0, 400))))
        else:
            for _ in range(int(rng.integers(1, 6))):
                data[int(rng.integers(0, len(data)))] = int(rng.integers(0, 256))
            data = data[: int(rng.integers(0, len(data) + 1))]
        side.write_bytes(bytes(data))
        try:
            table = recover_events(spool)
        except SpoolError as exc:
            assert "not an events file" in str(exc)
            continue
        assert table.num_rows <= 40 or trial % 3 == 0
        assert int(table.schema.metadata[b"stroboscope.events_cut_bytes"]) >= 0


def test_a_sidecar_that_is_a_link_or_not_an_events_file_is_refused(tmp_path: Path) -> None:
    spool, _good = _sidecar(tmp_path)
    side = Path(str(spool) + ".events")
    side.write_bytes(b"PAR1 not events")
    with pytest.raises(SpoolError, match="not an events file"):
        recover_events(spool)
    side.unlink()
    other = tmp_path / "elsewhere"
    other.write_bytes(events_file.MAGIC)
    os.symlink(other, side)
    with pytest.raises(SpoolError, match="symbolic link"):
        recover_events(spool)
    side.unlink()
    assert recover_events(spool).num_rows == 0  # no sidecar: no events, not an error


LOSSY_CHILD = textwrap.dedent(
    """
    import json, sys
    from stroboscope import _core
    from stroboscope.recording.sampler import Sampler
    _core.events_configure(16)
    s = Sampler(0.01, sources=["memory"], spool=sys.argv[1], segment_seconds=0.2, capacity=1024)
    with s:
        for n in range(100):
            _core.events_begin(n, 0, 0, 0)
    st = s.segments
    print(json.dumps({"written": st.events_written, "lost": st.events_lost,
                      "log": _core.events_stats()}))
    """
)


def test_events_the_log_overwrote_are_counted_in_the_sidecar(tmp_path: Path) -> None:
    spool = tmp_path / "lossy.spool"
    out = subprocess.run(
        [sys.executable, "-c", LOSSY_CHILD, str(spool)],
        capture_output=True,
        text=True,
        check=True,
        timeout=60,
    )
    got = json.loads(out.stdout)
    assert got["written"] + got["lost"] == 100 == got["log"]["written"]
    assert got["written"] >= 16  # at least the last lap, taken at stop()
    events = recover_events(spool)
    assert events.num_rows == got["written"]
    assert events.schema.metadata[b"stroboscope.events_lost"] == str(got["lost"]).encode()
    scopes = events.column("scope_id").to_pylist()
    assert scopes == sorted(scopes) and scopes[-16:] == list(range(84, 100))
