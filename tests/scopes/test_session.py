"""The default session: enabled explicitly or by the environment, started by the first scope,
stopped (rows kept) by disable(); open hooks; edge rows."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
import time
from collections.abc import Iterator

import pytest
import stroboscope.scopes as scopes
from stroboscope.recording.sampler import Sampler
from stroboscope.scopes import _switchboard as _events


@pytest.fixture
def session_off() -> Iterator[None]:
    yield
    scopes.disable()
    s = scopes.session()
    if s is not None:
        s.close()


def test_enable_builds_but_only_the_first_scope_starts(session_off: None) -> None:
    scopes.enable(0.002, sources=["memory"])
    s = scopes.session()
    assert s is not None and not s.running and scopes.is_enabled()
    with scopes.annotate("first"):
        assert s.running
    with scopes.annotate("second"):
        deadline = time.monotonic() + 60  # a row at 2 ms: wait for it, not for a set time
        while s.stats().rows_written < 1:
            assert time.monotonic() < deadline, "no row after 60 s"
            time.sleep(0.002)
    scopes.disable()
    assert not s.running and not scopes.is_enabled() and not _events.state.recording
    with scopes.annotate("not recorded"):
        pass
    assert [r["name"] for r in s.scope_intervals().to_pylist()] == ["first", "second"]
    assert len(s.snapshot()) >= 1  # rows kept after disable()
    scopes.enable()  # no arguments: the same session resumes on the next scope
    assert scopes.session() is s and not s.running
    with scopes.annotate("third"):
        assert s.running
    assert [r["name"] for r in s.scope_intervals().to_pylist()][-1] == "third"


def test_enable_checks_its_arguments_before_any_scope(session_off: None) -> None:
    with pytest.raises(ValueError, match="interval"):
        scopes.enable(0)
    with pytest.raises(ValueError, match="sources"):
        scopes.enable(0.01, sources=["no-such-source"])
    assert not scopes.is_enabled()


def test_module_functions_need_a_session() -> None:
    code = textwrap.dedent(
        """
        import stroboscope.scopes as s
        try:
            s.summary()
        except RuntimeError as e:
            print(e)
        """
    )
    out = subprocess.run(
        [sys.executable, "-c", code], env=_env(), capture_output=True, text=True, timeout=120
    )
    assert "no default session: call stroboscope.enable()" in out.stdout, out.stderr


def _env(**extra: str) -> dict[str, str]:
    return {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path), **extra}


def test_the_environment_enables_the_session() -> None:
    code = textwrap.dedent(
        """
        import stroboscope.scopes as scopes
        assert scopes.is_enabled()
        s = scopes.session()
        assert s is not None and not s.running
        with scopes.annotate("from-env"):
            assert s.running
        print([r["name"] for r in s.scope_intervals().to_pylist()])
        """
    )
    env = _env(STROBOSCOPE_ENABLED="yes")
    out = subprocess.run(
        [sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=120
    )
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "['from-env']"
    env["STROBOSCOPE_ENABLED"] = "0"
    off = subprocess.run(
        [sys.executable, "-c", "import stroboscope.scopes as s; print(s.is_enabled())"],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert off.stdout.strip() == "False", off.stderr


def test_open_hooks_see_every_scope_while_recording() -> None:
    seen: list[str] = []
    remove = scopes.add_open_hook(seen.append)

    def broken(name: str) -> None:
        raise RuntimeError("hook bug")

    remove_broken = scopes.add_open_hook(broken)
    try:
        with scopes.annotate("unrecorded"):
            pass
        with Sampler(0.005, sources=["memory"]), scopes.annotate("a"), scopes.annotate("b"):
            pass
    finally:
        remove()
        remove_broken()
    assert seen == ["a", "b"]  # the failing hook changed nothing for the code or the others
    assert _events.state.open_hooks == ()
