"""A scope's own labels checked, written and interned in one C call (``ScopeEdges._take_labels``)
give what the Python path gives: the same label strs, the same stored text (the JSON
``json.dumps(sort_keys=True, separators=(",", ":"))`` writes, which ``_stack.encode_labels``
writes too), the same id, and for every value C does not take plainly, the Python path's own
result or error. The intern table under it keeps one stable id per text as it grows."""

from __future__ import annotations

import enum
import json
from typing import Any

import pytest
import stroboscope.scopes as scopes
from stroboscope import _core
from stroboscope.analysis.scope_columns import RESERVED_LABELS
from stroboscope.recording.sampler import Sampler
from stroboscope.scopes import _stack
from stroboscope.scopes._stack import check_labels, encode_labels

_NO_CACHE = (1 << 64) - 1


class Color(enum.IntEnum):
    RED = 1


class Text(str):
    pass


class Ratio(float):
    pass


OWN: list[dict[str, Any]] = [
    {"step": 0},
    {"step": -12},
    {"step": 10**30, "neg": -(10**25)},
    {"b": True, "c": False},
    {"lr": 0.1, "tiny": -1.5e-07, "huge": 1e300, "whole": 2.0, "neg0": -0.0},
    {"s": 'say "hi" \\ /'},
    {"s": "tab\tnl\ncr\rbs\bff\f"},
    {"s": "\x00\x01\x1f\x7f\x80"},
    {"ünï": "café ✓", "k": "𝄞 and \U0010ffff", "e": ""},
    {"zeta": 1, "Alpha": 2, "alpha": 3, "_": 4, "é": 5, "a1": 6, "a": 7},
]

AMBIENT: list[list[dict[str, str]]] = [
    [],
    [{"run": "r1"}],
    [{"run": "r1", "step": "outer"}, {"zz": "2", "host": "ä\n"}],
]


def _take(own: dict[str, Any]) -> tuple[scopes.annotate, dict[str, str] | None]:
    """A scope object given ``own`` through the C call alone (its names checked first)."""
    check_labels("annotate()", own)  # the names pass the Python checks (and are remembered)
    scope = scopes.annotate.__new__(scopes.annotate)
    return scope, scope._take_labels(dict(own), _stack._names_checked)


def _enter_all(stack: list[dict[str, str]], inner: Any) -> Any:
    if not stack:
        return inner()
    with scopes.labels(**stack[0]):
        return _enter_all(stack[1:], inner)


@pytest.mark.parametrize("ambient", AMBIENT, ids=range(len(AMBIENT)))
@pytest.mark.parametrize("own", OWN, ids=range(len(OWN)))
def test_c_labels_match_the_python_encoder(
    scope_sampler: Sampler, own: dict[str, Any], ambient: list[dict[str, str]]
) -> None:
    def check() -> None:
        scope, got = _take(own)
        assert got is not None  # C took it
        assert got == check_labels("annotate()", own)
        assert list(got) == list(own)  # the order given, as check_labels keeps it
        amb, amb_id = _stack.ambient()
        assert scope._labels_cache >> 32 == amb_id
        merged = {**amb, **got}
        lid = scope._labels_cache & 0xFFFFFFFF
        text = _core.events_strings()[lid]
        assert text == encode_labels(merged)
        assert text == json.dumps(merged, sort_keys=True, separators=(",", ":"))
        assert json.loads(text) == merged
        assert _stack.labels_id(merged) == lid  # the Python path interns the same text
        # And through the scope itself: its edges carry that id.
        first = _core.events_written()
        with scopes.annotate("in_c", **own):
            pass
        ids = _core.events_read(first).to_arrow().column("labels_id").to_pylist()
        assert ids == [lid, lid]

    _enter_all(ambient, check)


def test_nothing_recording_makes_no_id() -> None:
    scope, got = _take({"step": 5})
    assert got == {"step": "5"}
    assert scope._has_labels
    assert scope._labels_cache == _NO_CACHE  # made when entered while something records


@pytest.mark.parametrize(
    "value",
    [float("nan"), float("inf"), -float("inf"), None, [1], b"x", 1j, "a\udc80b"],
    ids=["nan", "inf", "-inf", "None", "list", "bytes", "complex", "surrogate"],
)
def test_values_c_leaves_to_python_raise_its_errors(scope_sampler: Sampler, value: Any) -> None:
    scope, got = _take({"ok": 1})
    assert got is not None
    assert scope._take_labels({"v": value}, {"v"}) is None  # the Python path decides
    with pytest.raises((TypeError, ValueError)) as by_python:
        check_labels("annotate()", {"v": value})
    with pytest.raises(type(by_python.value)) as by_scope:
        scopes.annotate("s", v=value)
    assert str(by_scope.value) == str(by_python.value)


def test_names_not_checked_yet_go_through_python(scope_sampler: Sampler) -> None:
    scope = scopes.annotate.__new__(scopes.annotate)
    assert scope._take_labels({"never_seen_name_x9": 1}, _stack._names_checked) is None
    reserved = sorted(RESERVED_LABELS - {"name", "color", "nvtx"})[0]
    with pytest.raises(ValueError, match="reserved names are") as by_scope:
        bad: dict[str, Any] = {reserved: 1}
        scopes.annotate("s", **bad)
    with pytest.raises(ValueError) as by_python:
        check_labels("annotate()", {reserved: 1})
    assert str(by_scope.value) == str(by_python.value)
    assert scopes.annotate("s", never_seen_name_x9=1)._labels == {"never_seen_name_x9": "1"}


@pytest.mark.parametrize(
    "value", [Color.RED, Text("t"), Ratio(0.25)], ids=["IntEnum", "str-subclass", "float-subclass"]
)
def test_subclassed_values_keep_the_python_result(scope_sampler: Sampler, value: Any) -> None:
    scope, _ = _take({"ok": 1})
    assert scope._take_labels({"v": value}, {"v"}) is None
    made = scopes.annotate("s", v=value)
    assert made._labels == check_labels("annotate()", {"v": value})
    lid = made._labels_cache & 0xFFFFFFFF
    assert _core.events_strings()[lid] == encode_labels(made._labels)


def test_intern_table_keeps_one_stable_id_per_text_as_it_grows() -> None:
    texts = [f'{{"probe":"{i}"}}' for i in range(5000)] + ["", "é", "𝄞", "a\x00b"]
    ids = [_core.events_intern(t) for t in texts]
    assert ids[-4] == 0  # the empty string
    assert len(set(ids)) == len(texts)
    assert [_core.events_intern(t) for t in texts] == ids  # found again, after the growth
    strings = _core.events_strings()
    assert [strings[i] for i in ids] == texts
