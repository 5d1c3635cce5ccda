"""The rules both report pages share: each column's panel by unit and scale, and one colour
per scope name."""

from __future__ import annotations

import pyarrow as pa
from stroboscope.export._groups import (
    SCOPE_PALETTE,
    column_scale,
    panel_label,
    scope_colors,
    scope_names,
)


def test_columns_of_one_unit_and_different_wholes_get_their_own_panels() -> None:
    assert panel_label("proc.cpu_pct", "%", "rate") == "% of one core"
    assert panel_label("proc.tree.cpu_pct", "%", "rate") == "% of one core"
    assert panel_label("threads.top2.cpu_pct", "%", "rate") == "% of one core"
    assert panel_label("cpu.util_pct", "%", "rate") == "% of all cores"
    assert panel_label("mem.used_bytes", "bytes", "gauge") == "bytes · host"
    assert panel_label("proc.rss_bytes", "bytes", "gauge") == "bytes · process"
    assert panel_label("gpu.0.proc_mem_bytes", "bytes", "gauge") == "bytes · process"
    assert panel_label("gpu.0.mem_used_bytes", "bytes", "gauge") == "bytes"
    assert (
        panel_label("proc.read_bytes", "bytes", "counter") == "bytes · process (total since start)"
    )
    assert column_scale("psi.cpu.some_pct") == ""


def test_each_scope_name_has_one_colour_by_its_first_call() -> None:
    a = pa.table({"name": ["step", "train", "step"], "begin_ns": [5, 1, 9]})
    b = pa.table({"name": ["eval", "step"], "begin_ns": [0, 3]})
    names = scope_names([a, None, b])
    assert names == ["train", "step", "eval"]
    colors = scope_colors(names)
    assert list(colors.values()) == list(SCOPE_PALETTE[:3])
    assert scope_colors(["x", "x"]) == {"x": SCOPE_PALETTE[0]}
    many = scope_colors(f"s{i}" for i in range(25))
    assert many["s20"] == SCOPE_PALETTE[0] and len(set(many.values())) == len(SCOPE_PALETTE)
