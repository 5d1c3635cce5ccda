"""The one check behind the bad-input tables (``tests/test_bad_inputs_api.py``,
``tests/sampling/test_sampler_bad_inputs.py``, ``tests/senders/test_senders_bad_inputs.py``): a
row is ``(id, call, exception type, pattern)``; ``call`` gets a :class:`Ctx` and must raise exactly
that type with a message matching the pattern, before it creates anything."""

from __future__ import annotations

import os
import re
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import pytest


@dataclass
class Ctx:
    tmp: Path
    monkeypatch: pytest.MonkeyPatch


Row = tuple[str, Callable[[Ctx], object], type[Exception], str]


def params(rows: list[Row]) -> list[object]:
    """The rows as pytest parameters ``(call, exc, pattern)`` named by their id."""
    return [pytest.param(call, exc, pattern, id=name) for name, call, exc, pattern in rows]


def assert_refused(
    call: Callable[[Ctx], object],
    exc: type[Exception],
    pattern: str,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """``call`` raises ``exc`` itself (not a subclass) matching ``pattern``, in an empty working
    directory that it leaves empty (refused before anything was created)."""
    work = tmp_path / "work"
    work.mkdir()
    monkeypatch.chdir(work)
    with pytest.raises(exc) as info:
        call(Ctx(tmp_path, monkeypatch))
    assert type(info.value) is exc  # not a subclass standing in for it
    assert re.search(pattern, str(info.value)), str(info.value)
    assert os.listdir(work) == []  # refused before anything was created
