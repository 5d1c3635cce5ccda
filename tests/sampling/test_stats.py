"""``print(sampler.stats())`` reads in a terminal: a few short lines and a table of the sources
(built here from scripted figures), while ``repr`` keeps every field."""

from __future__ import annotations

import dataclasses

from stroboscope.sampling._stats import SamplerStats, SourceStats

MS = 1_000_000


def _stats(**change: object) -> SamplerStats:
    sources = (
        SourceStats("cpu", 10, 52, 0, 177_000, None, 0, False, interface="/proc/stat",
                    interval_ns=10 * MS, cost_ns=177_000),
        SourceStats("process", 1, 425, 3, 3_760_000, "process exited", 3, True,
                    interface="/proc/<pid>/stat", interval_ns=MS, cost_ns=3_760_000),
    )  # fmt: skip
    stats = SamplerStats(
        interval_ns=MS,
        running=False,
        ticks_scheduled=513,
        ticks_taken=425,
        ticks_missed=88,
        ticks_requested=4,
        tick_requests=6,
        precise=False,
        spin_window_ns=0,
        rows_written=429,
        rows_overwritten=0,
        rows_lost=0,
        lateness_p50_ns=39_900,
        lateness_p99_ns=3_600_000,
        lateness_max_ns=11_000_000,
        cost_mean_ns=11_200.0,
        cost_p99_ns=35_800,
        cost_max_ns=157_000,
        thread_cpu_ns=21_100_000,
        capacity=65_536,
        num_columns=26,
        ring_bytes=14_417_920,
        clock_anchor_uncertainty_ns=120,
        process_exited=True,
        sources=sources,
        interval_s=0.001,
        pid=4242,
        threads_cpu_ns=21_100_000,
    )
    return dataclasses.replace(stats, **change)  # type: ignore[arg-type]


def test_str_is_a_few_readable_lines() -> None:
    text = str(_stats())
    lines = text.splitlines()
    assert 8 <= len(lines) <= 16
    assert max(len(line) for line in lines) <= 100
    assert lines[0] == "sampler stopped: every 1 ms, pid 4242"
    assert "  ticks      425 taken, 88 missed of 513; 4 edge rows for 6 requests" in lines
    assert "  lateness   p50 39.9 µs, p99 3.6 ms, max 11 ms" in lines
    assert "  cost/tick  mean 11.2 µs, p99 35.8 µs, max 157 µs" in lines
    assert any("65,536 rows x 26 columns, 13.75 MiB" in line for line in lines)
    assert "  process    4242 has exited" in lines
    # one row per source: its interface, latest failure, period, reads, failures and cost
    cpu = next(line.split() for line in lines if line.split()[:2] == ["cpu", "/proc/stat"])
    assert cpu == ["cpu", "/proc/stat", "-", "10", "ms", "52", "0", "177", "µs"]
    process = next(line for line in lines if "/proc/<pid>/stat" in line)
    assert "process exited" in process and process.split()[-4:] == ["425", "3", "3.76", "ms"]
    # no budget line when the budget is off; a spool line only with a spool
    assert not any(line.lstrip().startswith(("budget", "spool")) for line in lines)


def test_str_has_the_budget_and_the_spool_when_there_are() -> None:
    stats = _stats(
        max_overhead=0.05,
        overhead=0.041,
        rate_changes_total=2,
        budget_unmet=1,
        segments_written=3,
        segment_rows_lost=0,
        threads_cpu_ns=30_000_000,
    )
    text = str(stats)
    assert "  budget     5.0% of a core, using 4.1%; 2 rate changes (rate_changes), " in text
    assert "  spool      3 segments written, 0 rows lost before one took them" in text
    assert "  cpu time   sampler thread 21.1 ms, with poll threads 30 ms" in text


def test_repr_keeps_every_field() -> None:
    stats = _stats()
    text = repr(stats)
    assert "\n" not in text
    assert text.startswith("SamplerStats(interval_ns=1000000, running=False,")
    assert all(f"{f.name}=" in text for f in dataclasses.fields(SamplerStats))
