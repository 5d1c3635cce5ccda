"""The spool file's layout, as the C++ core defines it (``cpp/include/stroboscope/spool.hpp``).

Standard library only, so the watchdog child can read a spool without loading the extension
whose crash it handles. ``tests/test_spool_layout.py`` keeps this file equal to
``_core.SPOOL_LAYOUT`` (the constants the C++ writer uses) and checks it against a spool the C++
side wrote; when the layout changes there, that test prints this file's new text.
"""

MAGIC = b"STROBSPL"
VERSION = 1
PAGE = 4096
SCHEMA_OFFSET = 192
FIELDS = (
    ("magic", 0, "s"),
    ("version", 8, "I"),
    ("header_size", 12, "I"),
    ("capacity", 16, "Q"),
    ("columns", 24, "I"),
    ("schema_size", 28, "I"),
    ("anchor_ns", 32, "q"),
    ("interval_ns", 40, "q"),
    ("created_ns", 48, "q"),
    ("pid", 56, "I"),
    ("words", 60, "I"),
    ("total_size", 64, "Q"),
    ("write_begin", 128, "Q"),
    ("head", 136, "Q"),
)
