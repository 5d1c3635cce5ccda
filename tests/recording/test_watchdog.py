"""The watchdog: dumps when its parent dies (SIGKILL, os._exit, SIGSEGV, a signal to the process
group), nothing when the parent stops normally, and its jobs run after a death, with and
without a pidfd and with a forked child of the parent still alive.

The crash tests run a ParentReceiver in a child Python process (its own session, so signalling its
process group cannot reach pytest) fed by a producer thread with numbered rows. The child prints
how many rows were journaled before it dies; the dump must hold rows 0..M-1, each exactly as sent,
with M at least that many. Nothing waits on luck: every wait polls for a file, a line or a pid
with a generous deadline.

The watchdog run in this process (a clean, detached child process, DumpJob's checks) and the
dump writer's jobs are in test_watchdog_jobs.py.
"""

from __future__ import annotations

import contextlib
import csv
import json
import os
import select
import signal
import stat
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any, Callable

import pyarrow.parquet as pq
import pytest
from stroboscope.recording.watchdog import DUMP_PATH_ENV

DEADLINE_S = 60.0

RECEIVER_CHILD = r"""
import os, queue, resource, sys, threading, time
from stroboscope.compat.aitune import ParentReceiver

mode, dump = sys.argv[1], sys.argv[2]
resource.setrlimit(resource.RLIMIT_CORE, (0, 0))  # no core file from the SIGSEGV case


def row(i):
    r = {"id": i, "x": i * 0.25 + 0.1}
    if i % 3 == 0:
        r["tag"] = "t%d" % i
    return r


q = queue.Queue()
r = ParentReceiver(q, crash_safe=True, dump_path=dump or None)
r.start()
print("WATCHDOG", r.watchdog.pid, flush=True)
print("JOURNAL", r.journal_path, flush=True)
N = 3000
for i in range(N):
    q.put(row(i))
while r.rows_received < N:
    time.sleep(0.001)
print("TAKEN", r.rows_received, flush=True)
if mode in ("stop", "exit"):
    if mode == "stop":
        r.stop()
    print("DONE", flush=True)
    sys.exit(0)


def more():
    i = N
    while True:
        q.put(row(i))
        i += 1
        if i % 64 == 0:
            time.sleep(0.0005)


threading.Thread(target=more, daemon=True).start()
while r.rows_received < N + 2000:
    time.sleep(0.001)
print("FINAL", r.rows_received, flush=True)
if mode == "_exit":
    os._exit(1)
if mode == "segv":
    import ctypes
    ctypes.string_at(0)  # SIGSEGV inside native code
time.sleep(600)  # "kill" and "killpg": the test signals this process
"""

WATCHDOG_CHILD = r"""
import json, os, sys, time
import stroboscope.recording.watchdog as wd

jobs = [wd.DumpJob(**j) for j in json.loads(sys.argv[1])]
if sys.argv[2] == "nopidfd":
    wd._own_pidfd = lambda: None  # the pipe-only protocol
w = wd.Watchdog(jobs).start()
print("WATCHDOG", w.pid, flush=True)
if sys.argv[3] == "fork":
    control = w._control
    pid = os.fork()
    if pid == 0:  # a forked child that outlives the parent must not hide its death
        try:
            os.fstat(control)
            held = b"holds"
        except OSError:
            held = b"closed"
        # one write: both processes share stdout
        os.write(1, b"GRANDCHILD %d %s\n" % (os.getpid(), held))
        time.sleep(600)
        os._exit(0)
    os.write(1, b"FORKED %d\n" % pid)
os._exit(3)
"""


def row(i: int) -> dict[str, Any]:
    r: dict[str, Any] = {"id": i, "x": i * 0.25 + 0.1}
    if i % 3 == 0:
        r["tag"] = f"t{i}"
    return r


def alive(pid: int) -> bool:
    """Whether ``pid`` runs (a zombie does not count: it has exited)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            state = f.read().rsplit(")", 1)[1].split()[0]
    except (FileNotFoundError, ProcessLookupError):
        return False
    return state not in ("Z", "X")


def wait_for(what: str, check: Callable[[], bool]) -> None:
    deadline = time.monotonic() + DEADLINE_S
    while not check():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.01)


class Child:
    """A Python child process in its own session whose stdout is read line by line."""

    def __init__(self, tmp_path: Path, code: str, *args: str, env: dict[str, str] | None = None):
        script = tmp_path / "child.py"
        script.write_text(code)
        self.stderr_path = tmp_path / "stderr.txt"
        with open(self.stderr_path, "wb") as err:
            self.proc = subprocess.Popen(
                [sys.executable, str(script), *args],
                cwd=tmp_path,
                stdout=subprocess.PIPE,
                stderr=err,  # inherited by the watchdog: its log lines land here too
                env=env,
                start_new_session=True,
            )
        self._buf = b""
        self.seen: list[list[str]] = []

    def expect(self, word: str) -> list[str]:
        """The first line not taken yet that starts with ``word``, split into words (lines from
        different processes sharing stdout may come in any order)."""
        assert self.proc.stdout is not None
        fd = self.proc.stdout.fileno()
        deadline = time.monotonic() + DEADLINE_S
        while True:
            while b"\n" in self._buf:
                line, _, self._buf = self._buf.partition(b"\n")
                self.seen.append(line.decode().split())
            for words in self.seen:
                if words and words[0] == word:
                    self.seen.remove(words)
                    return words
            left = deadline - time.monotonic()
            assert left > 0, (
                f"no {word} line from the child (status {self.proc.poll()}, other lines "
                f"{self.seen}, unread {self._buf!r}); stderr: {self.stderr()}"
            )
            readable, _, _ = select.select([fd], [], [], left)
            if readable:
                chunk = os.read(fd, 65536)
                assert chunk, f"child exited before {word}; stderr: {self.stderr()}"
                self._buf += chunk

    def stderr(self) -> str:
        return self.stderr_path.read_text(errors="replace")

    def close(self) -> None:
        with contextlib.suppress(ProcessLookupError):  # the child and what it forked
            os.killpg(self.proc.pid, signal.SIGKILL)
        self.proc.wait(DEADLINE_S)
        assert self.proc.stdout is not None
        self.proc.stdout.close()


@pytest.fixture
def children() -> Iterator[list[Child]]:
    made: list[Child] = []
    yield made
    for child in made:
        child.close()


def child_env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k != DUMP_PATH_ENV}
    env.update(extra)
    return env


def read_dump_ids(path: Path) -> list[int]:
    """The ids in a receiver dump, after checking that every row is exactly the one sent."""
    with open(path, newline="") as f:
        reader = csv.reader(f)
        assert next(reader) == ["id", "x", "tag"]
        ids = []
        for cells in reader:
            i = int(cells[0])
            expected = row(i)
            assert float(cells[1]) == expected["x"] and cells[2] == expected.get("tag", "")
            ids.append(i)
    return ids


def check_crash_dump(child: Child, dump: Path, watchdog_pid: int, taken: int) -> None:
    wait_for("the dump", dump.exists)  # it is renamed into place complete
    ids = read_dump_ids(dump)
    assert len(ids) >= taken, f"dump has {len(ids)} rows, {taken} were taken before the death"
    assert ids == list(range(len(ids)))  # in order, no gap, no duplicate
    assert stat.S_IMODE(dump.stat().st_mode) == 0o600
    wait_for("the watchdog to exit", lambda: not alive(watchdog_pid))
    assert f"wrote {len(ids)} rows of journal" in child.stderr()


@pytest.mark.parametrize("mode", ["kill", "_exit", "segv", "killpg"])
def test_receiver_dump_after_death(children: list[Child], tmp_path: Path, mode: str) -> None:
    dump = tmp_path / "dump.csv"
    child = Child(tmp_path, RECEIVER_CHILD, mode, str(dump), env=child_env())
    children.append(child)
    watchdog_pid = int(child.expect("WATCHDOG")[1])
    journal = Path(child.expect("JOURNAL")[1])
    assert int(child.expect("TAKEN")[1]) == 3000
    taken = int(child.expect("FINAL")[1])
    if mode == "kill":
        os.kill(child.proc.pid, signal.SIGKILL)
    elif mode == "killpg":
        assert os.getsid(watchdog_pid) != os.getsid(child.proc.pid)
        os.killpg(child.proc.pid, signal.SIGTERM)
    expected_signal = {"kill": signal.SIGKILL, "segv": signal.SIGSEGV, "killpg": signal.SIGTERM}
    status = child.proc.wait(DEADLINE_S)
    assert status == (-expected_signal[mode] if mode in expected_signal else 1)
    check_crash_dump(child, dump, watchdog_pid, taken)
    assert not journal.exists() and not journal.parent.exists()  # the private journal is removed


@pytest.mark.parametrize("mode", ["stop", "exit"])
def test_no_dump_after_normal_stop(children: list[Child], tmp_path: Path, mode: str) -> None:
    dump = tmp_path / "dump.csv"
    child = Child(tmp_path, RECEIVER_CHILD, mode, str(dump), env=child_env())
    children.append(child)
    watchdog_pid = int(child.expect("WATCHDOG")[1])
    journal = Path(child.expect("JOURNAL")[1])
    child.expect("DONE")
    assert child.proc.wait(DEADLINE_S) == 0
    wait_for("the watchdog to exit", lambda: not alive(watchdog_pid))
    assert not dump.exists()
    assert not list(tmp_path.glob("stroboscope-dump-*")) and not list(tmp_path.glob(".*.tmp"))
    assert not journal.exists()
    assert "watchdog" not in child.stderr()


def test_default_dump_name_in_working_directory(children: list[Child], tmp_path: Path) -> None:
    child = Child(tmp_path, RECEIVER_CHILD, "_exit", "", env=child_env())
    children.append(child)
    watchdog_pid = int(child.expect("WATCHDOG")[1])
    taken = int(child.expect("FINAL")[1])
    child.proc.wait(DEADLINE_S)
    pattern = f"stroboscope-dump-[0-9]*-[0-9]*-{child.proc.pid}.csv"
    wait_for("the dump", lambda: bool(list(tmp_path.glob(pattern))))
    (dump,) = tmp_path.glob(pattern)
    stamp = dump.name.split("-")[2:4]
    assert [len(s) for s in stamp] == [8, 6] and all(s.isdigit() for s in stamp)
    check_crash_dump(child, dump, watchdog_pid, taken)


def test_dump_directory_from_environment(children: list[Child], tmp_path: Path) -> None:
    dumps = tmp_path / "dumps"
    dumps.mkdir()
    child = Child(tmp_path, RECEIVER_CHILD, "_exit", "", env=child_env(**{DUMP_PATH_ENV: "dumps"}))
    children.append(child)
    watchdog_pid = int(child.expect("WATCHDOG")[1])
    taken = int(child.expect("FINAL")[1])
    child.proc.wait(DEADLINE_S)
    wait_for("the dump", lambda: bool(list(dumps.glob("stroboscope-dump-*.csv"))))
    (dump,) = dumps.glob("stroboscope-dump-*.csv")
    check_crash_dump(child, dump, watchdog_pid, taken)
    assert not list(tmp_path.glob("stroboscope-dump-*"))


JOURNAL = b'{"id":0,"v":1.5}\n{"id":1,"s":"a,b"}\n{"id":2,"n":{"k":3}}\n{"id":3,"v":'


@pytest.mark.parametrize(
    ("pidfd", "fork"), [("pidfd", "nofork"), ("pidfd", "fork"), ("nopidfd", "fork")]
)
def test_watchdog_jobs_after_death(
    children: list[Child], tmp_path: Path, pidfd: str, fork: str
) -> None:
    """Two journal jobs (Parquet to a path; CSV by default name), with and without a pidfd, and
    with a forked child of the parent still alive when the parent dies."""
    (tmp_path / "a.jsonl").write_bytes(JOURNAL)
    (tmp_path / "b.jsonl").write_bytes(JOURNAL)
    jobs = [
        {
            "kind": "journal",
            "source": "a.jsonl",
            "dump": "a.parquet",
            "format": "parquet",
            "remove_source": True,
        },
        {"kind": "journal", "source": "b.jsonl"},
    ]
    child = Child(tmp_path, WATCHDOG_CHILD, json.dumps(jobs), pidfd, fork, env=child_env())
    children.append(child)
    watchdog_pid = int(child.expect("WATCHDOG")[1])
    if fork == "fork":
        assert child.expect("GRANDCHILD")[2] == "closed"  # the control pipe's write end
        grandchild = int(child.expect("FORKED")[1])
    assert child.proc.wait(DEADLINE_S) == 3
    wait_for("the watchdog to exit", lambda: not alive(watchdog_pid))
    if fork == "fork":
        assert alive(grandchild)  # it still holds nothing that hides the parent's death
    expected = [
        {"id": 0, "v": 1.5, "s": None, "n.k": None},
        {"id": 1, "v": None, "s": "a,b", "n.k": None},
        {"id": 2, "v": None, "s": None, "n.k": 3},
    ]
    assert pq.read_table(tmp_path / "a.parquet").to_pylist() == expected
    assert not (tmp_path / "a.jsonl").exists()  # remove_source
    (dump,) = tmp_path.glob(f"stroboscope-dump-*-{child.proc.pid}.csv")
    with open(dump, newline="") as f:
        assert list(csv.reader(f)) == [
            ["id", "v", "s", "n.k"],
            ["0", "1.5", "", ""],
            ["1", "", "a,b", ""],
            ["2", "", "", "3"],
        ]
    assert (tmp_path / "b.jsonl").exists()
    for path in (tmp_path / "a.parquet", dump):
        assert stat.S_IMODE(path.stat().st_mode) == 0o600
    log = child.stderr()
    assert log.count("died; wrote 3 rows of journal") == 2, log
