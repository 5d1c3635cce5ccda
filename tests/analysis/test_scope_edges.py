"""shared_intervals: the scope calls of every process and producer of a shared-events directory,
in the one intervals schema with the writer's pid and producer, each stack kept apart."""

from __future__ import annotations

from pathlib import Path

from _shared_events import SCOPES, run
from stroboscope.analysis._intervals import INTERVAL_FIELDS, PROCESS_FIELDS, check_intervals
from stroboscope.analysis.scope_edges import shared_intervals


def test_processes_and_producers_are_stacks_of_their_own(tmp_path: Path) -> None:
    run(SCOPES.format(n=30), tmp_path)
    run(SCOPES.format(n=10), tmp_path)
    files = sorted(tmp_path.iterdir())
    assert len(files) == 2
    # A second producer on the very same threads (as NVTX ranges of one process would be):
    # the py file's records under the producer name "nvtx".
    data = bytearray(files[0].read_bytes())
    data[96:128] = b"nvtx".ljust(32, b"\0")
    pid = files[0].name.split(".")[0]
    (tmp_path / f"{pid}.nvtx.sev").write_bytes(bytes(data))

    iv = shared_intervals(tmp_path)
    assert iv.schema.names[: len(INTERVAL_FIELDS) + 2] == [
        f.name for f in (*INTERVAL_FIELDS, *PROCESS_FIELDS)
    ]
    assert iv.schema.names[len(INTERVAL_FIELDS) + 2 :] == ["step"]
    rows = iv.to_pylist()
    assert len(rows) == 2 * (30 + 30 + 10)
    per = {(r["pid"], r["producer"]) for r in rows}
    assert per == {(int(pid), "py"), (int(pid), "nvtx"), (int(files[1].name.split(".")[0]), "py")}
    stacks: dict[int, set[tuple[int, str]]] = {}
    for r in rows:
        stacks.setdefault(r["stack_id"], set()).add((r["pid"], r["producer"]))
    assert len(stacks) == 3 and all(len(v) == 1 for v in stacks.values())
    # Paired within each stack: every call closed, every inner inside its outer.
    assert all(r["end_ns"] is not None for r in rows)
    assert {r["path"] for r in rows} == {"outer", "outer/inner"}
    assert sorted(r["step"] for r in rows if r["name"] == "outer" and r["producer"] == "nvtx") == (
        sorted(str(i % 3) for i in range(30))
    )
    assert check_intervals(iv).labels == ["step"]  # pid and producer are no labels


def test_an_empty_directory_gives_the_schema(tmp_path: Path) -> None:
    iv = shared_intervals(tmp_path)
    assert iv.num_rows == 0
    assert iv.schema.names == [f.name for f in (*INTERVAL_FIELDS, *PROCESS_FIELDS)]
    assert iv.schema.metadata[b"events_lost"] == b"0"
