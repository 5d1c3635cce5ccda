"""The environment of a command recorded from outside (``scopes/_outside.py``): the events
directory, and the NVTX injection library where it is installed and not refused."""

from __future__ import annotations

from pathlib import Path

import pytest
from stroboscope.formats.shared_events import EVENTS_DIR_ENV, NVTX_INJECTION_ENV
from stroboscope.scopes import _outside, nvtx_capture


def test_the_environment_names_the_directory_and_the_library(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    library = str(tmp_path / "lib.so")
    monkeypatch.setattr(nvtx_capture, "nvtx_injection_path", lambda: library)
    env = _outside.command_environment(tmp_path, base={"PATH": "/bin"})
    assert env == {"PATH": "/bin", EVENTS_DIR_ENV: str(tmp_path), NVTX_INJECTION_ENV: library}
    assert NVTX_INJECTION_ENV not in _outside.command_environment(tmp_path, nvtx=False, base={})
    assert _outside.nvtx_taken_by(env) is None


def test_without_the_library_nvtx_is_left_alone(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(nvtx_capture, "nvtx_injection_path", lambda: None)
    assert _outside.command_environment(tmp_path, base={}) == {EVENTS_DIR_ENV: str(tmp_path)}


def test_another_tools_library_is_kept_and_named(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(nvtx_capture, "nvtx_injection_path", lambda: str(tmp_path / "ours.so"))
    theirs = {NVTX_INJECTION_ENV: "/opt/nsight/libToolsInjection64.so"}
    env = _outside.command_environment(tmp_path, base=theirs)
    assert env[NVTX_INJECTION_ENV] == theirs[NVTX_INJECTION_ENV]
    assert _outside.nvtx_taken_by(env) == theirs[NVTX_INJECTION_ENV]
