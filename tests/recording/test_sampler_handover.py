"""What the crash-safe Sampler (stroboscope.recording.sampler) hands to the end of a recording:
its segment writer, its dataset writer and whether its spool is private, through names of its
own (finish reads no private attribute); and the recording room's modules import in one
direction (the sampler does not import the finish)."""

from __future__ import annotations

import ast
import inspect
from pathlib import Path
from types import ModuleType

import stroboscope.recording._finish as finish_module
import stroboscope.recording.sampler as sampler_module
from stroboscope.formats.writers import FORMATS
from stroboscope.recording.sampler import DUMP_FORMATS, Sampler
from stroboscope.recording.segments import SegmentWriter


def test_a_spooled_sampler_hands_over_its_segment_writer(tmp_path: Path) -> None:
    s = Sampler(0.01, sources=["memory"], spool=tmp_path / "run.spool", capacity=4096)
    try:
        assert isinstance(s.segment_writer, SegmentWriter)
        assert s.segment_writer is s._segments  # the very writer that drains its ring
        assert s.dataset_writer is None and not s.spool_is_private
        s.tick_now(3)
        s.segment_writer.flush()
        assert s.segments is not None and s.segments.segments_written == 1
    finally:
        s.close()


def test_a_crash_safe_sampler_without_spool_has_a_private_one() -> None:
    s = Sampler(0.01, sources=["memory"], crash_safe=True, capacity=4096)
    try:
        assert s.spool_is_private and s.spool is not None
        assert s.segment_writer is not None
    finally:
        s.close()
    plain = Sampler(0.01, sources=["memory"])
    try:
        assert (plain.segment_writer, plain.dataset_writer, plain.spool_is_private) == (
            None,
            None,
            False,
        )
    finally:
        plain.close()


def _imported(module: ModuleType) -> set[str]:
    tree = ast.parse(inspect.getsource(module))
    return {n.module or "" for n in ast.walk(tree) if isinstance(n, ast.ImportFrom)}


def test_the_sampler_does_not_import_the_finish_and_the_finish_reads_no_private_name() -> None:
    assert "stroboscope.recording._finish" not in _imported(sampler_module)
    assert tuple(sorted(FORMATS)) == DUMP_FORMATS
    source = inspect.getsource(finish_module)
    tree = ast.parse(source)
    private = [
        f"{n.value.id}.{n.attr}"
        for n in ast.walk(tree)
        if isinstance(n, ast.Attribute)
        and isinstance(n.value, ast.Name)
        and n.value.id == "sampler"
        and n.attr.startswith("_")
    ]
    assert private == []
