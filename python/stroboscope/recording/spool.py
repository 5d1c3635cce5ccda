"""A spool's rows as a frame: :func:`recover`.

The spool file, its Parquet segments and its events sidecar are read by
:mod:`stroboscope.formats.spool_read` (pyarrow and the standard library, never the extension: the
watchdog child reads with it alone); here its table becomes the one frame type of the package.
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING

from stroboscope.formats.spool_read import SpoolError, recover_table

if TYPE_CHECKING:
    from stroboscope.sampling import Frame

__all__ = ["SpoolError", "recover"]


def recover(path: str | os.PathLike[str]) -> Frame:
    """Every row recorded in a spool and its segments, in order and without duplicates.

    Parameters
    ----------
    path : str or PathLike
        The spool file (``Sampler(spool=...)``; the CLI's ``record`` keeps one beside its output).

    Returns
    -------
    Frame
        Columns ``time``, ``mono_ns`` and the metrics, as a live sampler's frames have them.
        ``rows_lost`` (also the schema metadata ``stroboscope.rows_lost``, by cause in
        ``stroboscope.rows_lost_to``) counts the rows recorded that are not in it: overwritten
        in the ring before a segment could take them, in a damaged segment, or held only by a
        damaged spool's ring (never silently dropped).

    Raises
    ------
    SpoolError
        When the file is missing, empty, truncated, corrupt, or not a spool (wrong magic or
        format version): the message says which.
    """
    table, rows_lost = recover_table(path)
    from stroboscope.sampling import Frame  # the one frame type (pyarrow-backed here)

    return Frame(table, rows_lost=rows_lost)
