"""Frames: the rows of one snapshot or drain, readable by any Arrow consumer without a copy."""

from __future__ import annotations

import os
from typing import TYPE_CHECKING, Any

import numpy as np
import pyarrow as pa

from stroboscope import _core
from stroboscope._files import open_private

if TYPE_CHECKING:
    import pandas


class _Rows:
    """Conversions shared by every frame: all go through :meth:`to_arrow`."""

    __slots__ = ()

    def to_arrow(self) -> pa.Table:  # pragma: no cover - overridden
        raise NotImplementedError

    def to_pandas(self) -> pandas.DataFrame:
        """Return a pandas DataFrame (nullable integer columns become float64 with NaN)."""
        try:
            import pandas  # noqa: F401
        except ImportError as exc:  # pragma: no cover - depends on the environment
            raise ImportError(
                "to_pandas() needs pandas: pip install 'stroboscope[pandas]'"
            ) from exc
        df: pandas.DataFrame = self.to_arrow().to_pandas()
        return df

    def to_numpy(self) -> dict[str, np.ndarray[Any, Any]]:
        """Return ``{column: numpy array}``.

        ``time`` is ``datetime64[ns]`` (UTC), ``mono_ns`` is ``int64``; numeric columns are
        ``float64`` with NaN for nulls, except integer columns without nulls, which keep their
        type; other columns (such as a ``kind`` label) become object arrays.
        """
        table = self.to_arrow()
        out: dict[str, np.ndarray[Any, Any]] = {}
        for name, column in zip(table.column_names, table.columns):
            if pa.types.is_timestamp(column.type):
                out[name] = column.cast(pa.int64()).to_numpy().astype("datetime64[ns]")
            elif pa.types.is_integer(column.type) and column.null_count == 0:
                out[name] = column.to_numpy()
            elif pa.types.is_integer(column.type) or pa.types.is_floating(column.type):
                out[name] = column.cast(pa.float64()).to_numpy(zero_copy_only=False)
            else:
                out[name] = column.to_numpy(zero_copy_only=False)
        return out

    def write_parquet(self, path: str | os.PathLike[str], *, compression: str = "zstd") -> None:
        """Write the rows to a Parquet file (created with mode 0600; units kept as metadata)."""
        write_table_parquet(self.to_arrow(), path, compression=compression)

    def write_csv(self, path: str | os.PathLike[str]) -> None:
        """Write the rows to a CSV file (created with mode 0600; nulls as empty cells)."""
        write_table_csv(self.to_arrow(), path)


class Frame(_Rows):
    """Rows copied out of the sampler's ring, in buffers this object owns.

    Columns: ``time`` (``timestamp[ns, UTC]``), ``mono_ns`` (``int64``, the clock of
    :func:`time.monotonic_ns`), then one nullable column per metric (``float64`` or ``int64``).
    A null cell means the source was not due on that tick or could not be read.

    The frame implements the Arrow PyCapsule interface (``__arrow_c_stream__``,
    ``__arrow_c_array__``, ``__arrow_c_schema__``), so ``pyarrow.table(frame)``,
    ``polars.DataFrame(frame)`` and DuckDB read its buffers in place.
    """

    __slots__ = ("_core",)

    def __init__(self, core_frame: _core.Frame) -> None:
        self._core = core_frame

    def __len__(self) -> int:
        return len(self._core)

    def __repr__(self) -> str:
        return f"<stroboscope.Frame rows={len(self)} columns={self._core.num_columns}>"

    @property
    def column_names(self) -> list[str]:
        """Names of the columns, ``time`` and ``mono_ns`` first."""
        return list(self._core.column_names)

    @property
    def rows_lost(self) -> int:
        """Rows that were wanted but had been overwritten in the ring before they were copied."""
        return int(self._core.rows_lost)

    @property
    def first_row(self) -> int:
        """Index of this frame's first row in the sampler's lifetime row count."""
        return int(self._core.first_row)

    # -- Arrow PyCapsule interface ---------------------------------------------------------

    def __arrow_c_schema__(self) -> object:
        """Export the schema as an ``arrow_schema`` PyCapsule."""
        return self._core.export_schema()

    def __arrow_c_array__(self, requested_schema: object | None = None) -> tuple[object, object]:
        """Export the rows as one struct array: ``(arrow_schema, arrow_array)`` capsules.

        ``requested_schema`` is accepted for protocol compatibility and ignored: the data is
        returned in its own schema, which consumers check.
        """
        return self._core.export_schema(), self._core.export_array()

    def __arrow_c_stream__(self, requested_schema: object | None = None) -> object:
        """Export the rows as an ``arrow_array_stream`` PyCapsule holding one record batch."""
        return self._core.export_stream()

    # -- conversions -------------------------------------------------------------------------

    def to_arrow(self) -> pa.Table:
        """Return a :class:`pyarrow.Table` over this frame's buffers (no copy)."""
        return pa.RecordBatchReader._import_from_c_capsule(self.__arrow_c_stream__()).read_all()


class TableFrame(_Rows):
    """Rows held in a :class:`pyarrow.Table` (e.g. driver-resolution GPU samples), with the same
    conversions and Arrow PyCapsule interface as :class:`Frame`."""

    __slots__ = ("_table", "rows_lost")

    def __init__(self, table: pa.Table, rows_lost: int = 0) -> None:
        self._table = table
        self.rows_lost = rows_lost

    def __len__(self) -> int:
        return int(self._table.num_rows)

    def __repr__(self) -> str:
        return f"<stroboscope.TableFrame rows={len(self)} columns={self._table.num_columns}>"

    @property
    def column_names(self) -> list[str]:
        """Names of the columns."""
        return list(self._table.column_names)

    def __arrow_c_schema__(self) -> object:
        """Export the schema as an ``arrow_schema`` PyCapsule."""
        return self._table.schema.__arrow_c_schema__()

    def __arrow_c_stream__(self, requested_schema: object | None = None) -> object:
        """Export the rows as an ``arrow_array_stream`` PyCapsule."""
        return self._table.__arrow_c_stream__(requested_schema)

    def to_arrow(self) -> pa.Table:
        """Return the :class:`pyarrow.Table`."""
        return self._table


def write_table_parquet(
    table: pa.Table, path: str | os.PathLike[str], *, compression: str = "zstd"
) -> None:
    """Write an Arrow table as Parquet to a file created 0600."""
    import pyarrow.parquet as pq

    with open_private(path) as f:
        pq.write_table(table, f, compression=compression)


def write_table_csv(table: pa.Table, path: str | os.PathLike[str]) -> None:
    """Write an Arrow table as CSV with ISO-8601 UTC times, to a file created 0600."""
    import pyarrow.csv as pacsv

    with open_private(path) as f:
        pacsv.write_csv(table, f)


def output_format(path: str | os.PathLike[str]) -> str:
    """``"parquet"`` or ``"csv"`` by the suffix of ``path``; ValueError for anything else."""
    lower = os.fspath(path).lower()
    if lower.endswith((".parquet", ".pq")):
        return "parquet"
    if lower.endswith(".csv"):
        return "csv"
    raise ValueError(f"output path {os.fspath(path)!r} must end in .parquet, .pq or .csv")


def write_table(table: pa.Table, path: str | os.PathLike[str]) -> str:
    """Write ``table`` as Parquet or CSV, chosen by the suffix of ``path``; return the format."""
    fmt = output_format(path)
    if fmt == "parquet":
        write_table_parquet(table, path)
    else:
        write_table_csv(table, path)
    return fmt
