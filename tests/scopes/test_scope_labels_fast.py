"""A scope with labels of its own (``annotate("step", step=step)``) takes its edges in C once
its merged labels id is made, and what it records is what the Python path records: the same
stored text per label set (the JSON ``json.dumps(sort_keys=True)`` writes), the same edges, the
same labels read back."""

from __future__ import annotations

import json
from typing import Any

import pytest
import stroboscope.scopes as scopes
from stroboscope import _core
from stroboscope.recording.sampler import Sampler
from stroboscope.scopes._stack import check_labels, encode_labels


class Counted(scopes.annotate):
    """A scope that counts the entries the Python path took."""

    __slots__ = ()
    slow = 0

    def _enter_slow(self) -> scopes.annotate:
        Counted.slow += 1
        return super()._enter_slow()


@pytest.mark.parametrize(
    "labels",
    [
        {"step": "3"},
        {"b": "2", "a": "1", "c": "x"},
        {"quote": 'say "hi"\\', "tab": "a\tb\n"},
        {"ünï": "café ✓ 𝄞", "ctl": "\x00\x1f\x7f"},
        {"Z": "", "a": "-1.5e-07"},
    ],
)
def test_encode_labels_is_the_json_a_reader_decodes(labels: dict[str, str]) -> None:
    text = encode_labels(labels)
    assert text == json.dumps(labels, sort_keys=True, separators=(",", ":"))
    assert json.loads(text) == labels


def test_values_keep_their_str_form_and_bad_ones_are_refused() -> None:
    got = check_labels("annotate()", {"i": -12, "b": True, "f": 0.1, "s": "x", "n": 10**30})
    assert got == {"i": "-12", "b": "True", "f": "0.1", "s": "x", "n": str(10**30)}
    with pytest.raises(ValueError, match="reserved"):
        check_labels("annotate()", {"name": 1})
    with pytest.raises(ValueError, match=r"annotate\(\): label x '\\udc80' holds a lone surrogate"):
        check_labels("annotate()", {"x": "\udc80"})
    with pytest.raises(TypeError, match="must be a str, int, float or bool"):
        check_labels("annotate()", {"x": None})
    with pytest.raises(ValueError, match="finite"):
        check_labels("annotate()", {"x": float("nan")})


def _edges(first: int) -> list[tuple[Any, ...]]:
    t = _core.events_read(first).to_arrow()
    cols = ("kind", "scope_id", "depth", "labels_id")
    return list(zip(*(t.column(c).to_pylist() for c in cols)))


def _loop(n: int) -> None:
    for step in range(n):
        with Counted("step", step=step, even=step % 2 == 0), Counted("inner"):
            pass
    with scopes.labels(run="r1"):
        made_inside = Counted("step", step=99)
        with made_inside:
            pass


def test_labelled_scopes_take_c_and_write_what_python_writes(scope_sampler: Sampler) -> None:
    Counted.slow = 0
    first = _core.events_written()
    _loop(20)
    fast, fast_slow = _edges(first), Counted.slow
    assert fast_slow == 0  # made while recording: every edge in C

    # The same scopes through the Python path: the same edges, the same ids.
    Counted.slow = 0
    first = _core.events_written()
    saved = scopes.annotate._edges_in_c
    scopes.annotate._edges_in_c = lambda self: -1  # type: ignore[method-assign]
    try:
        _loop(20)
    finally:
        scopes.annotate._edges_in_c = saved  # type: ignore[method-assign]
    assert Counted.slow == 2 * 20 + 1
    assert _edges(first) == fast

    strings = _core.events_strings()
    begins = [e for e in fast if e[0] == 1 and e[2] == 0]
    assert [json.loads(strings[e[3]]) for e in begins] == [
        *({"step": str(i), "even": str(i % 2 == 0)} for i in range(20)),
        {"run": "r1", "step": "99"},
    ]


def test_labels_read_back_as_given(scope_sampler: Sampler) -> None:
    for step in range(30):
        with scopes.annotate("step", step=step, lr=0.5, tag="é"):
            pass
    iv = scope_sampler.scope_intervals().to_pylist()
    rows = [r for r in iv if r["name"] == "step"]
    assert [r["step"] for r in rows] == [str(i) for i in range(30)]
    assert {(r["lr"], r["tag"]) for r in rows} == {("0.5", "é")}


def test_a_scope_made_before_recording_or_under_other_labels_still_writes_its_own() -> None:
    early = Counted("early", k=1)  # nothing records: no id made yet
    Counted.slow = 0
    with Sampler(0.005, sources=["memory"]) as s:
        with early:
            pass
        with early:
            pass
        assert Counted.slow == 1  # the first entry makes the id in Python; the next is C's
        with scopes.labels(run="b"), early:  # other ambient labels: made again, in Python
            pass
        assert Counted.slow == 2
    rows = [r for r in s.scope_intervals().to_pylist() if r["name"] == "early"]
    assert [(r["k"], r.get("run")) for r in rows] == [("1", None), ("1", None), ("1", "b")]
