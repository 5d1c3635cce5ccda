"""Where the tests find the repository, wherever a test file sits under ``tests/``."""

from __future__ import annotations

from pathlib import Path

TESTS = Path(__file__).resolve().parent
"""The ``tests/`` directory: shared helpers, recorded data, the fake libraries' sources."""
ROOT = TESTS.parent
"""The repository's root: docs/, examples/, bench/, README.md."""
DATA = TESTS / "data"
"""Recorded inputs (``/proc`` trees, spools, traces; see ``tests/data/README.md``)."""
