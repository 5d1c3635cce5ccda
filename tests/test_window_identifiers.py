"""The window reducer (monitor, senders, ``record --publish``) publishes an identifier column (a
thread id: unit ``id``, or a name ending in ``.tid`` where the table has no metadata) as its last
valid value whatever aggregate is asked: a mean or max of thread ids names no thread. The rule is
the column summary's (``analysis.column_stats.column_kind``), not a second one."""

from __future__ import annotations

import pyarrow as pa
import pytest
from stroboscope.analysis.windows import AGGREGATES, WindowAggregator

TID = "threads.top0.tid"
CPU = "threads.top0.cpu_pct"
# Two drained tables of one window. By hand: the tids' last valid value is 4101 (the final row
# is null), their mean would be 4176.75 and their max 4303; cpu_pct's mean is 25.0, max 40.0.
FIRST: tuple[list[int | None], list[float]] = ([4101, 4303], [10.0, 20.0])
SECOND: tuple[list[int | None], list[float]] = ([4202, 4101, None], [30.0, 40.0, 25.0])


def drained(tids: list[int | None], cpu: list[float], *, metadata: bool) -> pa.Table:
    meta = {TID: {b"unit": b"id", b"kind": b"gauge"}, CPU: {b"unit": b"%", b"kind": b"rate"}}
    fields = [pa.field("mono_ns", pa.int64())] + [
        pa.field(
            name,
            pa.int64() if name == TID else pa.float64(),
            metadata=meta[name] if metadata else None,
        )
        for name in (TID, CPU)
    ]
    start = 0 if len(tids) == 2 else 2
    rows = {"mono_ns": [(start + k) * 10**6 for k in range(len(tids))], TID: tids, CPU: cpu}
    return pa.table(rows, schema=pa.schema(fields))


@pytest.mark.parametrize("metadata", [True, False], ids=["unit-id", "csv-name-rule"])
def test_an_identifier_is_published_as_its_last_value(metadata: bool) -> None:
    window = WindowAggregator([TID, CPU])  # the caller lists no level: the rule finds the tid
    window.add(drained(*FIRST, metadata=metadata))
    window.add(drained(*SECOND, metadata=metadata))
    means = window.result("mean")
    assert means[TID] == 4101 and isinstance(means[TID], int)
    assert means[CPU] == pytest.approx(25.0, abs=1e-12)
    maxima = window.result("max")
    assert maxima[TID] == 4101 and maxima[CPU] == pytest.approx(40.0, abs=1e-12)
    assert [window.aggregate_of(TID, how) for how in AGGREGATES] == ["last"] * len(AGGREGATES)  # type: ignore[arg-type]
    assert window.aggregate_of(CPU, "mean") == "mean"


def test_a_tid_named_gauge_with_another_unit_is_a_quantity() -> None:
    # With metadata, the unit decides: a column named *.tid whose unit is not "id" is averaged.
    table = pa.table(
        {"x.tid": [1.0, 3.0]},
        schema=pa.schema([pa.field("x.tid", pa.float64(), metadata={b"unit": b"%"})]),
    )
    window = WindowAggregator(["x.tid"])
    window.add(table)
    assert window.result("mean") == {"x.tid": pytest.approx(2.0, abs=1e-12)}
