"""Programs and Python packages some tests drive (a browser, a Prometheus server; torch, Lightning,
transformers) that the README's test command does not install: a test skips with a reason where
they are missing, except where the environment variable ``STROBOSCOPE_TEST_REQUIRE`` names them
(``.ci/run`` sets it after installing them), so CI cannot pass by skipping."""

from __future__ import annotations

import importlib
import importlib.util
import os
import shutil
from types import ModuleType

import pytest

REQUIRE_VARIABLE = "STROBOSCOPE_TEST_REQUIRE"


def binary(*names: str, install: str) -> str:
    """The path of the first of ``names`` on PATH; else skip (or fail where it is required)."""
    for name in names:
        found = shutil.which(name)
        if found is not None:
            return found
    required = os.environ.get(REQUIRE_VARIABLE, "").split()
    message = f"{names[0]} is not installed ({install}, as .ci/run does)"
    if names[0] in required:
        pytest.fail(f"{message}, and {REQUIRE_VARIABLE} says this run needs it")
    pytest.skip(message)


def python_module(name: str, *, install: str) -> ModuleType:
    """``import name``; where its top-level package is not installed, skip (or fail where it is
    required, by that top-level name)."""
    top = name.split(".")[0]
    if importlib.util.find_spec(top) is None:
        message = f"{top} is not installed ({install}, as .ci/run does)"
        if top in os.environ.get(REQUIRE_VARIABLE, "").split():
            pytest.fail(f"{message}, and {REQUIRE_VARIABLE} says this run needs it")
        pytest.skip(message)
    return importlib.import_module(name)
