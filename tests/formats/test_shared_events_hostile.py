"""Events files that a recorded command damaged, planted or left behind, against the drain and
the end's reader: a FIFO never blocks them, a header's sizes are bounded by what a writer makes
and by the file's real size (a sparse file claiming gigabytes costs no memory), a finished file's
descriptors and buffers are given back, and the records a drain kept survive a header the
writer damaged afterwards."""

from __future__ import annotations

import contextlib
import json
import os
import struct
import subprocess
import sys
import textwrap
import threading
import tracemalloc
from pathlib import Path

import pytest
from _shared_events import SCOPES, run
from stroboscope.formats.shared_events import (
    HEADER_BYTES,
    MAX_CAPACITY,
    STRINGS_BYTES,
    drained_dir,
    read_events_dir,
    read_events_file,
)
from stroboscope.formats.shared_events_drain import EventsDrain, FileDrain


def _files(d: Path) -> dict[str, dict[str, object]]:
    table = read_events_dir(d)
    return {c["file"]: c for c in json.loads(table.schema.metadata[b"events_files"])}


@pytest.fixture(scope="module")
def one_file(tmp_path_factory: pytest.TempPathFactory) -> bytes:
    """The bytes of a real events file: 20 outer and 20 inner scopes (80 edges)."""
    d = tmp_path_factory.mktemp("events")
    run(SCOPES.format(n=20), d)
    (path,) = d.iterdir()
    return path.read_bytes()


def _in_thread(fn: object, timeout: float) -> bool:
    """Whether ``fn()`` returned within ``timeout`` seconds (run on a daemon thread)."""
    t = threading.Thread(target=fn, daemon=True)  # type: ignore[arg-type]
    t.start()
    t.join(timeout)
    return not t.is_alive()


def _unblock(fifo: Path) -> None:
    """Open ``fifo`` for writing and close it (frees a reader blocked opening it)."""
    with contextlib.suppress(OSError):
        os.close(os.open(fifo, os.O_WRONLY | os.O_NONBLOCK))


def test_fifos_among_the_events_files_block_neither_the_drain_nor_the_reader(
    one_file: bytes, tmp_path: Path
) -> None:
    (tmp_path / "1.py.sev").write_bytes(one_file)
    keep = Path(drained_dir(tmp_path))
    keep.mkdir(mode=0o700)  # the drain's own directory, and a FIFO at its .drained name
    fifos = [tmp_path / "2.py.sev", keep / "1.py.sev.drained", tmp_path / "3.py.sev"]
    for fifo in fifos:
        os.mkfifo(fifo)
    drain = EventsDrain(str(tmp_path))
    try:
        polled: list[int] = []
        assert _in_thread(lambda: polled.append(drain.poll()), 20), "the drain blocked on a FIFO"
        assert _in_thread(lambda: drain.poll(), 20)
    finally:
        for fifo in fifos:
            _unblock(fifo)
    assert _in_thread(drain.stop, 20)
    got: list[dict[str, dict[str, object]]] = []
    try:
        assert _in_thread(lambda: got.append(_files(tmp_path)), 20), "the reader blocked"
    finally:
        for fifo in fifos:
            _unblock(fifo)
    files = got[0]
    assert files["1.py.sev"]["records"] == 80  # the ring's, the FIFO at .drained skipped
    assert "FIFO" in str(files["2.py.sev"]["damaged"])


def test_a_drain_thread_that_never_ends_is_given_up_on_not_waited_for(tmp_path: Path) -> None:
    drain = EventsDrain(str(tmp_path))
    entered, gate = threading.Event(), threading.Event()

    def hangs() -> int:  # a poll stuck (a stalled disk)
        entered.set()
        gate.wait()
        return 0

    drain.poll = hangs  # type: ignore[method-assign]
    drain.start()
    try:
        assert entered.wait(20)
        done = _in_thread(lambda: drain.stop(timeout=0.5), 20)
    finally:
        gate.set()
    assert done


def _header(data: bytes, **fields: int) -> bytearray:
    out = bytearray(data[:HEADER_BYTES])
    offsets = {"capacity": 32, "states": 48, "strings": 56, "strings_capacity": 64}
    for name, value in fields.items():
        struct.pack_into("<Q", out, offsets[name], value)
    return out


@pytest.mark.parametrize(
    "claim",
    [
        pytest.param("slots", id="2**32-slots"),
        pytest.param("strings", id="a-terabyte-of-strings"),
    ],
)
def test_a_sparse_file_claiming_huge_areas_costs_no_memory(
    one_file: bytes, tmp_path: Path, claim: str
) -> None:
    if claim == "slots":
        cap = 1 << 32
        head = _header(one_file, capacity=cap, states=HEADER_BYTES + cap * 32)
        struct.pack_into("<Q", head, 56, HEADER_BYTES + cap * 40)
        size = HEADER_BYTES + cap * 40 + STRINGS_BYTES
    else:
        head = _header(one_file, strings_capacity=1 << 40)
        strings_at = struct.unpack_from("<Q", head, 56)[0]
        struct.pack_into("<Q", head, 128, 1 << 39)  # strings used
        size = strings_at + (1 << 40)
    path = tmp_path / "5.py.sev"
    with open(path, "wb") as f:
        f.write(head)
        os.truncate(f.fileno(), size)  # sparse: no block beyond the header
    # In a child, so its peak memory is its own: the drain's polls and the end's reader.
    code = f"""
        import resource, sys
        # a bound on this child's address space: a reader that trusts the header fails
        # here with a MemoryError instead of taking the machine's memory
        resource.setrlimit(resource.RLIMIT_AS, (8 << 30, 8 << 30))
        from stroboscope.formats.shared_events import read_events_file
        from stroboscope.formats.shared_events_drain import EventsDrain
        before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
        drain = EventsDrain({str(tmp_path)!r})
        drain.poll(); drain.poll(); drain.stop()
        table, counts = read_events_file({str(path)!r})
        after = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
        print(table.num_rows, (after - before) // 1024, counts.damaged)
    """
    out = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert out.returncode == 0, out.stderr
    rows, grew_mib, damaged = out.stdout.split(" ", 2)
    assert rows == "0" and int(grew_mib) < 64, out.stdout
    assert "2**24" in damaged or f"(a writer makes {STRINGS_BYTES})" in damaged, damaged


def test_a_finished_files_descriptors_and_buffers_are_given_back(tmp_path: Path) -> None:
    """60 short-lived processes under a limit of 40 descriptors: each drained, each released
    once its writer is gone; every edge read."""
    code = f"""
        import os, resource
        d = {str(tmp_path)!r}
        os.environ["STROBOSCOPE_EVENTS_DIR"] = d
        import stroboscope
        from stroboscope.formats.shared_events_drain import EventsDrain
        resource.setrlimit(resource.RLIMIT_NOFILE, (40, 40))
        drain = EventsDrain(d)
        most = 0
        for i in range(60):
            pid = os.fork()
            if pid == 0:  # a process of its own, with a file of its own: 40 edges
                for step in range(10):
                    with stroboscope.annotate("outer"):
                        with stroboscope.annotate("inner"):
                            pass
                os._exit(0)
            assert os.waitpid(pid, 0)[1] == 0
            drain.poll()
            most = max(most, len(os.listdir("/proc/self/fd")))
        held = sum(len(f.seen) for f in drain.files.values())
        print(drain.stop(), most, held)
    """
    out = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert out.returncode == 0, out.stderr
    appended, most, held = (int(v) for v in out.stdout.split())
    assert appended == 60 * 40  # every edge of every process drained
    assert most < 20 and held == 0, out.stdout  # no descriptor, no state kept per file gone
    table = read_events_dir(tmp_path)
    assert table.num_rows == 60 * 40 and table.schema.metadata[b"events_lost"] == b"0"


def test_drained_records_survive_a_header_the_writer_damaged_later(
    one_file: bytes, tmp_path: Path
) -> None:
    path = tmp_path / "8.py.sev"
    path.write_bytes(one_file)
    drain = EventsDrain(str(tmp_path))
    assert drain.poll() == 80
    drain.stop()
    # The writer scribbles over its header afterwards (its magic, version and capacity).
    with open(path, "r+b") as f:
        f.write(os.urandom(64))
    table, counts = read_events_file(path)
    assert table.num_rows == 80
    assert sorted(set(table.column("scope").to_pylist())) == ["inner", "outer"]
    assert "header" in counts.damaged


def test_the_writers_capacity_limit_is_the_readers(one_file: bytes, tmp_path: Path) -> None:
    # One step above the largest ring a writer makes is refused, with the limit named.
    cap = MAX_CAPACITY * 2
    head = _header(one_file, capacity=cap, states=HEADER_BYTES + cap * 32)
    struct.pack_into("<Q", head, 56, HEADER_BYTES + cap * 40)
    path = tmp_path / "9.py.sev"
    path.write_bytes(bytes(head))
    _, counts = read_events_file(path)
    assert f"capacity {cap}" in counts.damaged and "2**24" in counts.damaged


def test_a_link_at_a_drained_copys_name_is_never_written_through(
    one_file: bytes, tmp_path: Path
) -> None:
    (tmp_path / "4.py.sev").write_bytes(one_file)
    keep = Path(drained_dir(tmp_path))
    keep.mkdir(mode=0o700)
    target = tmp_path / "target"
    target.write_bytes(b"not the drain's")
    (keep / "4.py.sev.drained").symlink_to(target)
    drain = EventsDrain(str(tmp_path))
    drain.poll()
    drain.stop()
    assert target.read_bytes() == b"not the drain's"


def test_a_small_file_claiming_the_largest_ring_is_refused_before_any_allocation(
    one_file: bytes, tmp_path: Path
) -> None:
    # A header within a writer's limits (2**24 slots: 128 MiB of states to compare) on a file
    # of one header's bytes: refused by its real size, nothing sized by the claim allocated.
    cap = MAX_CAPACITY
    head = _header(one_file, capacity=cap, states=HEADER_BYTES + cap * 32)
    struct.pack_into("<Q", head, 56, HEADER_BYTES + cap * 40)
    path = tmp_path / "5.py.sev"
    path.write_bytes(bytes(head))
    drain = FileDrain(str(path))
    tracemalloc.start()
    try:
        assert drain.poll() == 0
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
        drain.close()
    assert peak < 8 << 20, peak  # the claim would cost 128 MiB
    assert f"{HEADER_BYTES} bytes, its header claims" in drain.done
