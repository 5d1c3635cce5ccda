"""The spool file's layout, as the C++ core defines it (``cpp/include/stroboscope/spool.hpp``).

Standard library only, so the watchdog child can read a spool without loading the extension
whose crash it handles. ``tests/test_layout.py`` keeps this file equal to
``_core.SPOOL_LAYOUT`` (the constants the C++ writer uses) and checks it against a spool the C++
side wrote; when the layout changes there, that test prints this file's new text.

Version 2 keeps the ring in row blocks of ``BLOCK_ROWS`` rows (each column's cells of the block
contiguous, then one validity word per column); version 1, the layout before it, kept one array
per column and is still read (``V1_FIELDS``; see ``spool_cells``).

``STATS_FIELDS`` are the recorder's figures (:mod:`stroboscope.formats.spool_stats`), in bytes
72 to 127 of the header: bytes the core reserves, leaves zero and never writes, written by the
recorder's Python side. Their home is here, not in the C++ core, which has no part in them;
spools written before them hold zeros there ("not published"), so they need no new version.
"""

MAGIC = b"STROBSPL"
VERSION = 2
VERSIONS_READ = (1, 2)
BLOCK_ROWS = 64
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
    ("block_rows", 60, "I"),
    ("total_size", 64, "Q"),
    ("write_begin", 128, "Q"),
    ("head", 136, "Q"),
)
# Version 1: the same header, except that offset 60 held the validity words per column.
V1_FIELDS = tuple(("words", 60, "I") if f[0] == "block_rows" else f for f in FIELDS)
# The recorder's figures: a sequence word (0: never published; odd while being written), then
# seven u64 words under it.
STATS_FIELDS = (
    ("stats_seq", 72, "Q"),
    ("ticks_taken", 80, "Q"),
    ("ticks_missed", 88, "Q"),
    ("rows_lost", 96, "Q"),
    ("cost_mean_ns", 104, "Q"),
    ("cost_p99_ns", 112, "Q"),
    ("thread_cpu_ns", 120, "Q"),
)
