"""The host's clock-synchronisation fact (adjtimex(2), read-only) that the cross-rank report
uses to bound how far apart two hosts' timestamps may be."""

from __future__ import annotations

import ctypes
import sys
import time
from pathlib import Path

import numpy as np
import pyarrow.compute as pc
import pytest
from stroboscope import Sampler, cluster, scopes
from stroboscope._base.identity import Identity
from stroboscope.export import _meta
from stroboscope.export.cluster_report import build_cluster_report
from stroboscope.sampling import _clock_sync
from stroboscope.sampling._clock_sync import (
    STA_UNSYNC,
    TIME_ERROR,
    Timex,
    clock_sync,
    parse_timex,
    read_timex,
)
from stroboscope.sampling._provenance import PROVENANCE_KEY, dumps

STA_NANO = 0x2000  # adjtimex(2): time.tv_usec holds nanoseconds

linux = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="adjtimex is Linux's")


@linux
def test_a_real_read_fills_the_struct_where_the_kernel_puts_it() -> None:
    tx, state = read_timex()
    assert state in _clock_sync.STATES
    assert tx.modes == 0  # nothing asked to change
    # Fields past maxerror/esterror/status hold values the kernel fixes: if the layout were
    # off, these would not read right. ``time`` is the realtime clock, ``tolerance`` the
    # frequency tolerance 500 ppm << 16 (MAXFREQ_SCALED), ``tick`` µs per USER_HZ tick.
    # With STA_NANO set (status bit 0x2000, as NTP daemons leave it) the kernel writes
    # nanoseconds into the field named tv_usec (adjtimex(2)); µs otherwise.
    per_s = 1_000_000_000 if tx.status & STA_NANO else 1_000_000
    assert abs(tx.time.tv_sec + tx.time.tv_usec / per_s - time.time()) < 60
    assert 0 <= tx.time.tv_usec < per_s
    assert tx.tolerance == 500 << 16
    assert tx.tick == 1_000_000 // 100  # USER_HZ is 100 on every common architecture
    # maxerror is clamped by the kernel at NTP_PHASE_LIMIT (16 s); esterror is no larger.
    assert 0 <= tx.maxerror <= 16_000_000 and 0 <= tx.esterror <= 16_000_000
    fact = parse_timex(tx, state)
    assert fact["synchronized"] is (not (tx.status & STA_UNSYNC) and state != TIME_ERROR)
    assert (fact["maxerror_ns"], fact["esterror_ns"]) == (tx.maxerror * 1000, tx.esterror * 1000)
    # clock_sync() is the same read: the same synchronisation state (error bounds may move).
    again = clock_sync()
    assert again["reason"] is None and again["source"] == "adjtimex"
    assert again["synchronized"] is fact["synchronized"] or state != read_timex()[1]


def _fake(status: int, maxerror: int, esterror: int) -> Timex:
    tx = Timex()
    tx.status, tx.maxerror, tx.esterror = status, maxerror, esterror
    return tx


def test_a_parsed_fake_struct() -> None:
    ok = parse_timex(_fake(0x2001, 1234, 56), 0)  # STA_PLL | STA_NANO, TIME_OK
    assert ok == {
        "source": "adjtimex",
        "synchronized": True,
        "state": "TIME_OK",
        "status": 0x2001,
        "maxerror_ns": 1_234_000,
        "esterror_ns": 56_000,
        "reason": None,
    }
    unsync = parse_timex(_fake(STA_UNSYNC | 0x2000, 16_000_000, 16_000_000), 5)
    assert (unsync["synchronized"], unsync["state"]) == (False, "TIME_ERROR")
    assert unsync["maxerror_ns"] == 16_000_000_000
    # Either sign is enough: the bit without the state, or the state without the bit.
    assert parse_timex(_fake(STA_UNSYNC, 0, 0), 0)["synchronized"] is False
    assert parse_timex(_fake(0, 0, 0), TIME_ERROR)["synchronized"] is False
    assert parse_timex(_fake(0, 0, 0), 1)["state"] == "TIME_INS"
    assert parse_timex(_fake(0, 0, 0), 42)["state"] == "42"


def test_a_failed_call_says_why(monkeypatch: pytest.MonkeyPatch) -> None:
    def refused(_tx: object) -> int:
        ctypes.set_errno(1)
        return -1

    monkeypatch.setattr(_clock_sync, "_adjtimex", lambda: refused)
    fact = clock_sync()
    assert fact["synchronized"] is None and fact["maxerror_ns"] is None
    assert fact["reason"] == "adjtimex failed: Operation not permitted (errno 1)"
    # A report lists it with what was not available.
    meta = {PROVENANCE_KEY: dumps({"clock_sync": fact})}
    assert _meta.unavailable(meta) == [
        "clock_sync: adjtimex failed: Operation not permitted (errno 1)"
    ]


@linux
def test_the_provenance_carries_it() -> None:
    s = Sampler(0.01, sources={"memory": None})
    try:
        s.tick_now(2)
        prov = s.snapshot().provenance
    finally:
        s.close()
    assert prov is not None
    fact = prov["clock_sync"]
    tx, state = read_timex()
    assert fact["source"] == "adjtimex" and fact["reason"] is None
    assert fact["synchronized"] is parse_timex(tx, state)["synchronized"]


def test_two_ranks_recorded_into_a_dataset_end_to_end(tmp_path: Path) -> None:
    """Through the real path: two ranks of one node record with cluster.rank_sampler(dataset=) and
    annotated steps; the report reads the parts the rolling writer made."""
    root = tmp_path / "ds"
    calls = {}
    for rank in (0, 1):
        ident = Identity(host="node-a", rank=rank, local_rank=rank, world_size=2, job="e2e")
        s = cluster.rank_sampler(0.005, identity=ident, dataset=root, sources=["cpu", "process"])
        s.start()  # scope calls are recorded while the sampler runs
        try:
            for _ in range(3 + rank):
                with scopes.annotate("step"):
                    pass
            # A CPU % is a rate: wait (generously) for /proc/stat to have moved between two
            # readings, so that the host column holds a value.
            column = "cpu.util_pct" if rank == 0 else "proc.rss_bytes"
            deadline = time.monotonic() + 60
            while not pc.count(s.snapshot().to_arrow().column(column)).as_py():
                assert time.monotonic() < deadline, f"no {column} value in 60 s"
                time.sleep(0.02)
        finally:
            s.stop()
            calls[rank] = s.scope_intervals()
            s.close()
    report = build_cluster_report(root)
    assert report.step == "step"
    rows = {r.rank: r for r in report.rows}
    for rank, table in calls.items():
        durations = np.array(table.column("end_ns")) - np.array(table.column("begin_ns"))
        step = rows[rank].step
        assert step is not None and step.count == 3 + rank
        assert step.median_s == pytest.approx(float(np.median(durations)) / 1e9, abs=1e-12)
    # rank 1 records its process only: host CPU is its node's (rank 0's), process CPU its own.
    assert rows[0].figures["host_cpu_pct"].source == "own"
    assert rows[1].figures["host_cpu_pct"].source == "node: rank 0"
    assert rows[1].figures["proc_rss_peak_bytes"].source == "own"
    # The clock facts come from the parts' provenance: this host's adjtimex and the anchor.
    (clock,) = report.jobs[0].clocks
    tx, state = read_timex()
    assert clock.synchronized is parse_timex(tx, state)["synchronized"]
    assert clock.anchor_uncertainty_ns is not None and clock.anchor_uncertainty_ns >= 0
    assert clock.anchor_ns == rows[0].anchor_ns
    # One host shares both clocks: the two samplers' anchors agree to within their brackets
    # plus what an adjusting daemon may have slewed between them.
    assert clock.anchor_spread_ns is not None and clock.anchor_spread_ns < 1_000_000
