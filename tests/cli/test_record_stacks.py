"""`record --stacks -- CMD`: every Python thread's stack of the command and of the process it
forks, written beside FILE in the stacks tables, with the recording's provenance; stale tables
of an earlier run removed; bad values refused."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

import pytest
from stroboscope.cli import main
from stroboscope.formats.provenance import from_schema
from stroboscope.formats.stacks import has_stacks, read_stacks, stack_frames_path, stacks_path
from stroboscope.formats.stacks_sidecar import sidecar_paths

# The command: a thread spinning in `spin_main`, and a forked child spinning in `spin_child`;
# each says its own thread CPU time, and the child its pid.
COMMAND = r"""
import json, os, sys, threading, time

def spin_child():
    t0 = time.thread_time_ns()
    end = time.monotonic() + 0.8
    while time.monotonic() < end:
        pass
    return time.thread_time_ns() - t0

def spin_main(out):
    t0 = time.thread_time_ns()
    end = time.monotonic() + 0.8
    while time.monotonic() < end:
        pass
    out["main"] = time.thread_time_ns() - t0

r, w = os.pipe()
pid = os.fork()
if pid == 0:
    os.write(w, str(spin_child()).encode())
    os._exit(0)
out = {}
t = threading.Thread(target=spin_main, args=(out,))
t.start()
t.join()
os.waitpid(pid, 0)
out["child"] = int(os.read(r, 64))
out["child_pid"] = pid
open(sys.argv[1], "w").write(json.dumps(out))
"""


def test_record_stacks_of_a_command_and_its_child(tmp_path: Path) -> None:
    out = tmp_path / "run.parquet"
    seen = tmp_path / "seen.json"
    code = main(
        [
            "record",
            "-q",
            "--interval",
            "0.001",
            "--stacks",
            "-o",
            str(out),
            "--",
            sys.executable,
            "-c",
            COMMAND,
            str(seen),
        ]
    )
    assert code == 0
    facts = json.loads(seen.read_text())
    samples, frames = read_stacks(out)  # checked by the stacks format's reader
    assert Path(stacks_path(out)).stat().st_mode & 0o777 == 0o600
    holds: dict[int, set[str]] = {}
    for r in frames.to_pylist():
        holds.setdefault(r["stack_id"], set()).add(r["function"])
    cpu: dict[str, int] = {"spin_main": 0, "spin_child": 0}
    pids: dict[str, set[int]] = {"spin_main": set(), "spin_child": set()}
    for pid, sid, ns in zip(
        samples["pid"].to_pylist(), samples["stack_id"].to_pylist(), samples["cpu_ns"].to_pylist()
    ):
        for name in cpu:
            if name in holds[sid]:
                cpu[name] += ns or 0
                pids[name].add(pid)
    assert pids["spin_child"] == {facts["child_pid"]}
    assert len(pids["spin_main"]) == 1 and facts["child_pid"] not in pids["spin_main"]
    # CPU attributed from /proc schedstat against each function's own clock. A process is read
    # from its discovery on (a rescan of the tree, at most 1 s after its fork on a very busy
    # machine; typically under 10 ms) and a thread's first sample has no CPU time: never more
    # than the function's own clock, at least half of it even when the machine is loaded (the
    # bench has the precise figure).
    for name, clock in (("spin_main", facts["main"]), ("spin_child", facts["child"])):
        assert 0.5 * clock <= cpu[name] <= 1.05 * clock + 10_000_000, (name, cpu, facts)
    # The samples are on the rows' clock: within the recording's mono_ns span.
    import pyarrow.parquet as pq

    rows = pq.read_table(out, columns=["mono_ns"])["mono_ns"].to_pylist()
    assert min(rows) - 50_000_000 <= samples["mono_ns"].to_pylist()[0] <= max(rows)
    meta = from_schema(pq.read_schema(stacks_path(out)))
    assert meta is not None and meta["rows"] == samples.num_rows


def test_record_without_stacks_removes_stale_tables(tmp_path: Path) -> None:
    out = tmp_path / "run.parquet"
    assert (
        main(["record", "-q", "--stacks", "-o", str(out), "--", sys.executable, "-c", "pass"]) == 0
    )
    assert has_stacks(out) and Path(stack_frames_path(out)).exists()
    assert (
        main(["record", "-q", "--force", "-o", str(out), "--", sys.executable, "-c", "pass"]) == 0
    )
    assert not has_stacks(out) and not Path(stack_frames_path(out)).exists()


@pytest.mark.parametrize(
    ("value", "words"),
    [
        ("soon", "--stacks must be a positive finite number of seconds, got 'soon'"),
        ("0.015", "stacks must be False (off), True"),
        ("0.015", "whole multiple of interval=0.01"),
    ],
)
def test_bad_stacks_values(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], value: str, words: str
) -> None:
    out = tmp_path / "run.parquet"
    argv = ["record", "-q", f"--stacks={value}", "-o", str(out), "--", sys.executable, "-c", "0"]
    try:
        code = main(argv)
    except SystemExit as exc:  # argparse's refusal
        code = int(exc.code or 0)
    assert code == 2
    assert words in capsys.readouterr().err
    assert not out.exists()


# A recorder with a spool and stacks, killed with SIGKILL while its own spinning thread runs.
KILLED = r"""
import sys, threading, time
import stroboscope

def spin_forever():
    while True:
        pass

threading.Thread(target=spin_forever, daemon=True).start()
s = stroboscope.Sampler(0.001, sources=["process"], stacks=True, spool=sys.argv[1]).start()
print("started", flush=True)
time.sleep(60)
"""


def test_recover_reads_the_stacks_of_a_killed_recorder(tmp_path: Path) -> None:
    spool = tmp_path / "run.spool"
    out = tmp_path / "run.parquet"
    child = subprocess.Popen(
        [sys.executable, "-c", KILLED, str(spool)], stdout=subprocess.PIPE, text=True
    )
    try:
        assert child.stdout is not None and child.stdout.readline().strip() == "started"
        time.sleep(1.5)
    finally:
        child.kill()
        child.wait()
        if child.stdout is not None:
            child.stdout.close()
    assert Path(sidecar_paths(spool)[0]).stat().st_mode & 0o777 == 0o600
    assert main(["recover", str(spool), "-o", str(out)]) == 0
    samples, frames = read_stacks(out)
    spinning = {
        sid
        for sid, fn in zip(frames["stack_id"].to_pylist(), frames["function"].to_pylist())
        if fn == "spin_forever"
    }
    n = sum(1 for sid in samples["stack_id"].to_pylist() if sid in spinning)
    # 1.5 s at 1 kHz, less the last quarter second not drained when it was killed: generous.
    assert n > 200, n
    assert set(samples["pid"].to_pylist()) == {child.pid}
    assert not any(Path(p).exists() for p in sidecar_paths(spool))  # read, then removed


# The command of a recorder killed with SIGKILL: a thread spinning in `spin_until_killed`; its
# pid in the marker file once it runs.
SPINNER = r"""
import os, sys, threading

def spin_until_killed():
    while True:
        pass

threading.Thread(target=spin_until_killed, daemon=True).start()
open(sys.argv[1], "w").write(str(os.getpid()))
threading.Event().wait()
"""


def test_watchdog_of_a_killed_record_writes_the_stacks(tmp_path: Path) -> None:
    """SIGKILL of `record --stacks` itself: its watchdog writes FILE and, from the spool's
    stacks sidecar, the stacks tables beside it (the command's function in them), then removes
    the spool with its sidecars."""
    import os
    import signal

    from stroboscope.formats.stacks_sidecar import read_sidecar

    out = tmp_path / "run.parquet"
    spool = tmp_path / "run.parquet.spool"
    marker = tmp_path / "pid"
    proc = subprocess.Popen(
        [
            *(sys.executable, "-m", "stroboscope", "record", "-q", "--interval", "0.001"),
            *("--stacks", "-o", str(out), "--", sys.executable, "-c", SPINNER, str(marker)),
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    command_pid = 0
    try:
        deadline = time.monotonic() + 60
        while True:  # until the sidecar holds samples of the spinning function
            assert proc.poll() is None and time.monotonic() < deadline
            time.sleep(0.1)
            got = read_sidecar(spool) if marker.exists() else None
            if got is not None and "spin_until_killed" in got[1]["function"].to_pylist():
                break
        command_pid = int(marker.read_text())
        proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        if command_pid:
            os.kill(command_pid, signal.SIGKILL)
    deadline = time.monotonic() + 60
    while spool.exists():  # the watchdog removes the spool once FILE and the stacks are written
        assert time.monotonic() < deadline, "the watchdog did not finish"
        time.sleep(0.1)
    assert out.exists()
    samples, frames = read_stacks(out)
    spinning = {
        sid
        for sid, fn in zip(frames["stack_id"].to_pylist(), frames["function"].to_pylist())
        if fn == "spin_until_killed"
    }
    assert spinning and any(sid in spinning for sid in samples["stack_id"].to_pylist())
    assert set(samples["pid"].to_pylist()) == {command_pid}
    assert not any(Path(p).exists() for p in sidecar_paths(spool))  # removed with the spool


# A thread spinning in `spin_long` for 1.5 s; its own thread CPU time written to argv[1].
LONG = r"""
import sys, threading, time

def spin_long(out):
    t0 = time.thread_time_ns()
    end = time.monotonic() + 1.5
    while time.monotonic() < end:
        pass
    out.append(time.thread_time_ns() - t0)

out = []
t = threading.Thread(target=spin_long, args=(out,))
t.start()
t.join()
open(sys.argv[1], "w").write(str(out[0]))
"""


@pytest.mark.parametrize("keep_spool", [False, True])
def test_record_writes_every_sample_past_the_memory_cap(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    keep_spool: bool,
) -> None:
    """A recording longer than the samples the sampler keeps in memory (the cap lowered to 50:
    one drained batch, a quarter second): FILE's stacks are streamed from the spool's sidecar,
    every sample kept; the sidecar goes with the spool unless it is kept."""
    import stroboscope.sampling._stacks as stacks_part
    from stroboscope.formats.stacks_sidecar import read_sidecar

    monkeypatch.setattr(stacks_part, "MAX_KEPT_SAMPLES", 50)
    out = tmp_path / "run.parquet"
    clock = tmp_path / "clock"
    argv = ["record", "--interval", "0.001", "--stacks", "-o", str(out)]
    argv += ["--keep-spool"] if keep_spool else []
    assert main([*argv, "--", sys.executable, "-c", LONG, str(clock)]) == 0
    said = capsys.readouterr().err
    samples, frames = read_stacks(out)
    kept = read_sidecar(f"{out}.spool")
    if keep_spool:
        assert kept is not None and samples.num_rows == kept[0].num_rows
    else:
        assert kept is None and not any(Path(p).exists() for p in sidecar_paths(f"{out}.spool"))
    # 1.5 s of two threads at 1 kHz: far more than the quarter second the sampler kept.
    assert samples.num_rows > 1500, samples.num_rows
    assert f"stacks: {samples.num_rows} samples of 2 threads in 1 process(es)" in said, said
    # Independent of the sidecar: the spinning thread's CPU time, from its samples, against its
    # own clock (a thread's first sample carries none; at least half even on a loaded machine).
    spinning = {
        sid
        for sid, fn in zip(frames["stack_id"].to_pylist(), frames["function"].to_pylist())
        if fn == "spin_long"
    }
    cpu = sum(
        ns or 0
        for sid, ns in zip(samples["stack_id"].to_pylist(), samples["cpu_ns"].to_pylist())
        if sid in spinning
    )
    own = int(clock.read_text())
    assert 0.5 * own <= cpu <= 1.05 * own + 10_000_000, (cpu, own)
