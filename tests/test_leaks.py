"""The check of tests/conftest.py (``nothing_left_behind``) on tiny test files run by pytest in a
child process: a test that leaves a sampler running, a watchdog, an exporter, an open scope or
the scope events' state behind fails at its teardown, naming what it left; the next test starts
clean; what a wider fixture leaves before a test starts fails that test at its setup."""

from __future__ import annotations

import os
import sys

import pytest
from _paths import TESTS

INNER = """
import pytest
import stroboscope
import stroboscope.scopes as scopes
from stroboscope.cluster.prometheus import PrometheusExporter
from stroboscope.recording.watchdog import DumpJob, Watchdog
from stroboscope import Sampler


def test_leaves_a_sampler_running():
    Sampler(0.01, sources=["memory"]).start()


def test_clean_after_the_sampler():
    with Sampler(0.01, sources=["memory"]):
        pass


def test_leaves_a_watchdog(tmp_path):
    watchdog = Watchdog([DumpJob("journal", str(tmp_path / "j.jsonl"))])
    test_leaves_a_watchdog.kept = watchdog.start()


def test_leaves_an_exporter():
    sampler = Sampler(0.01, sources=["memory"])
    test_leaves_an_exporter.kept = (sampler, PrometheusExporter(sampler, port=0))


def test_leaves_a_scope_open():
    with Sampler(0.01, sources=["memory"]):  # a scope is pushed while something records
        stroboscope.annotate("forgotten").__enter__()


def test_leaves_labels_set():
    stroboscope.labels(run="x").__enter__()


def test_leaves_the_session_enabled():
    scopes.enable(0.01, sources=["memory"])


def test_leaves_an_open_hook():
    scopes.add_open_hook(print)


def test_clean_at_the_end():
    assert not scopes.current_stack() and not scopes.is_enabled()


@pytest.fixture(scope="module")
def held():
    s = Sampler(0.01, sources=["memory"])
    s.start()
    yield s
    s.close()


def test_zz_a_wider_fixture_left_a_sampler(held):
    pass
"""


def test_what_a_test_leaves_behind_fails_it(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    pytester.makeconftest((TESTS / "conftest.py").read_text())
    pytester.makepyfile(test_inner=INNER)
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join([str(TESTS), *sys.path]))
    result = pytester.runpytest_subprocess("-p", "no:cacheprovider", "-p", "no:randomly")
    out = result.stdout.str()
    failed = {
        "test_leaves_a_sampler_running": "a running sampler",
        "test_leaves_a_watchdog": "a watchdog not stopped",
        "test_leaves_an_exporter": "an open PrometheusExporter",
        "test_leaves_a_scope_open": "1 scope(s) open: ['forgotten']",
        "test_leaves_labels_set": "ambient labels set: {'run': 'x'}",
        "test_leaves_the_session_enabled": "the default scope session enabled",
        "test_leaves_an_open_hook": "1 scope open hook(s) added and not removed",
    }
    for name, words in failed.items():
        assert f"ERROR at teardown of {name}" in out, out
        assert words in out, out
    assert "ERROR at setup of test_zz_a_wider_fixture_left_a_sampler" in out, out
    assert "left before this test started" in out, out
    # Every leak ended at its test's teardown: the clean tests after each one pass.
    result.assert_outcomes(passed=9, errors=8)
