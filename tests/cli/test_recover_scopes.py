"""``stroboscope recover SPOOL -o FILE`` after the recorder died: the scope calls of the spool's
events sidecar are written beside the rows (``<stem>.scopes.parquet``), equal to the calls the
sampler itself listed before it was killed, edge counters included."""

from __future__ import annotations

import textwrap
from pathlib import Path

import pyarrow.parquet as pq
import pytest
from _killed import kill_after_first_line
from stroboscope.analysis.scope_edges import recovered_intervals
from stroboscope.cli import main
from stroboscope.formats.provenance import from_schema
from stroboscope.formats.spool_read import recover_events

CHILD = textwrap.dedent(
    """
    import json, sys, time
    import stroboscope
    from stroboscope.recording.sampler import Sampler
    s = Sampler(0.005, sources=["memory"], spool=sys.argv[1], segment_seconds=0.5,
                capacity=4096, edge_counters="cpu").start()
    for n in range(20):
        with stroboscope.labels(phase="warmup" if n < 5 else "train"):
            with stroboscope.annotate("step"):
                with stroboscope.annotate("forward"):
                    sum(range(20000))
    with stroboscope.annotate("open"):  # still open when the recorder dies
        while s.segments.events_written < 82:  # the writer appends them (no deadline on speed)
            time.sleep(0.01)
        calls = s.scope_intervals().select(["name", "path", "begin_ns", "end_ns", "phase",
                                            "cpu_ns"])
        print(json.dumps(calls.to_pydict()), flush=True)
        time.sleep(60)
    """
)


def test_recover_writes_the_scopes_of_the_events_sidecar(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], caplog: pytest.LogCaptureFixture
) -> None:
    spool = tmp_path / "run.spool"
    listed = kill_after_first_line(CHILD, str(spool))
    out = tmp_path / "rec.parquet"
    assert main(["recover", str(spool), "-o", str(out)]) == 0
    printed = capsys.readouterr().out
    scopes = tmp_path / "rec.scopes.parquet"
    assert f"recovered 41 scope calls to {scopes}" in printed
    table = pq.read_table(scopes)
    got = table.select(list(listed)).to_pydict()
    assert got == listed
    assert got["name"].count("step") == 20 and got["path"].count("step/forward") == 20
    assert got["end_ns"][got["name"].index("open")] is None
    assert all(c is not None and c >= 0 for c in got["cpu_ns"][:40])
    prov = from_schema(table.schema)
    assert prov is not None and prov["rows"] == 41
    recording = from_schema(pq.read_schema(out))
    assert recording is not None and prov["pid"] == recording["pid"]
    assert "or still being written" not in caplog.text  # whole: nothing to say
    # The last byte flipped (its chunk fails its check): the calls in that chunk are left
    # out, and said to be.
    side = Path(f"{spool}.events")
    data = bytearray(side.read_bytes())
    data[-1] ^= 0xFF
    side.write_bytes(bytes(data))
    capsys.readouterr()
    assert main(["recover", str(spool), "-o", str(tmp_path / "cut.parquet")]) == 0
    printed = capsys.readouterr().out
    said = [r.getMessage() for r in caplog.records if "or still being written" in r.getMessage()]
    assert len(said) == 1 and str(spool) in said[0], said
    events = recover_events(spool)  # what the sidecar still holds, and the bytes cut
    left = int(events.schema.metadata[b"stroboscope.events_cut_bytes"])
    assert left > 0 and f"the last {left} bytes of its events file" in said[0]
    kept = recovered_intervals(events).num_rows
    assert kept < 41
    cut = tmp_path / "cut.scopes.parquet"
    if kept:  # calls in chunks before the damaged one are kept
        assert pq.read_table(cut).num_rows == kept
        assert f"recovered {kept} scope calls" in printed
    else:
        assert not cut.exists() and "scope calls" not in printed
