"""aitune's dump: the summary per (Module, Backend), its log table and the CSV file.

The summary follows aitune 0.6.0's ``get_metrics_summary``: rows without a module or backend are
left out; per (module, backend): the maximum of every ``*memory_used`` column in GB (1024**3
bytes, host memory included), the mean and maximum of every ``*utilization`` column in %, and
of every ``*power_usage_milliwatts`` column in W, all rounded to 2 decimals, under aitune's
column titles (``"Cuda:0\\nMem [GB]"``, ``"Cuda:0\\nUtil% mean"``, ``"Power [W]\\nmean"``).
"""

from __future__ import annotations

import datetime
import io
import logging
import os
import sys
from pathlib import Path
from typing import TYPE_CHECKING

from stroboscope._base.files import replace_private

if TYPE_CHECKING:
    import pandas

logger = logging.getLogger("stroboscope")

_KEYS = ["module_name", "backend"]
_SPLIT = 6  # metric columns per logged table, as aitune logs them


def _no_metrics(df: pandas.DataFrame) -> pandas.DataFrame:
    import pandas

    out: pandas.DataFrame = pandas.DataFrame(
        index=pandas.MultiIndex.from_frame(df[_KEYS].drop_duplicates())
    )
    return out


def _memory(df: pandas.DataFrame) -> pandas.DataFrame:
    cols = [c for c in df.columns if c.endswith("memory_used")]
    if not cols:
        return _no_metrics(df)
    out: pandas.DataFrame = (df[[*cols, *_KEYS]].groupby(_KEYS).max() / 1024**3).round(2)
    out.columns = [c.replace("_memory_used", "").title() + "\nMem [GB]" for c in out.columns]
    return out


def _mean_max(df: pandas.DataFrame, suffix: str, scale: float) -> pandas.DataFrame:
    cols = [c for c in df.columns if c.endswith(suffix)]
    if not cols:
        return _no_metrics(df)
    out: pandas.DataFrame = df[[*cols, *_KEYS]].groupby(_KEYS).agg(["mean", "max"])
    out = (out if scale == 1 else out / scale).round(2)  # an int max stays int, as aitune's
    pairs: list[tuple[str, str]] = [(str(c[0]), str(c[1])) for c in out.columns.tolist()]
    if suffix == "utilization":
        out.columns = [f"{c.replace('_utilization', '').title()}\nUtil% {s}" for c, s in pairs]
    else:  # aitune's power titles name no device
        out.columns = [f"Power [W]\n{s}" for _, s in pairs]
    return out


def metrics_summary(df: pandas.DataFrame) -> pandas.DataFrame | None:
    """The summary table of ``df`` (index Module, Backend), or None when there is nothing to
    summarise (no rows, no ``module_name`` column, or no row with both module and backend)."""
    import pandas

    if df.empty or "module_name" not in df.columns:
        return None
    df = df.dropna(subset=_KEYS)
    if df.empty:
        return None
    parts = [
        _memory(df),
        _mean_max(df, "utilization", 1.0),
        _mean_max(df, "power_usage_milliwatts", 1000.0),
    ]
    out = pandas.concat(parts, axis=1)
    out.index.names = ["Module", "Backend"]
    return out


def _split_params(text: str) -> list[str]:
    """``text`` split at the commas outside parentheses."""
    parts, depth, start = [], 0, 0
    for i, ch in enumerate(text):
        depth += (ch == "(") - (ch == ")")
        if ch == "," and depth == 0:
            parts.append(text[start:i].strip())
            start = i + 1
    tail = text[start:].strip()
    return [*parts, tail] if tail else parts


def backend_label(label: str, indent: str = "") -> str:
    """A backend description such as ``B(a=1,c=C(p='x'))`` with one parameter a line,
    nested calls indented further (aitune's display of its backend labels)."""
    name, paren, rest = label.partition("(")
    if not paren or not rest[:-1]:
        return label
    inner = indent + "    "
    lines = []
    for part in _split_params(rest[:-1]):
        key, eq, value = part.partition("=")
        if eq and "(" not in key:
            lines.append(f"{key}={backend_label(value, inner)}")
        else:
            lines.append(backend_label(part, inner))
    body = f",\n{inner}".join(lines)
    return f"{name}(\n{inner}{body}\n{indent})"


def render_table(headers: list[str], rows: list[list[str]], left: int) -> str:
    """A boxed text table; cells and headers may span lines; the first ``left`` columns are
    aligned left, the others centred."""
    cells = [[str(h).split("\n") for h in headers]] + [[c.split("\n") for c in r] for r in rows]
    widths = [max(len(line) for row in cells for line in row[j]) for j in range(len(headers))]

    def rule(left_c: str, mid: str, right_c: str, fill: str) -> str:
        return left_c + mid.join(fill * (w + 2) for w in widths) + right_c

    def line(row: list[list[str]]) -> list[str]:
        height = max(len(c) for c in row)
        out = []
        for k in range(height):
            texts = []
            for j, cell in enumerate(row):
                text = cell[k] if k < len(cell) else ""
                texts.append(text.ljust(widths[j]) if j < left else text.center(widths[j]))
            out.append("│ " + " │ ".join(texts) + " │")
        return out

    lines = [rule("╒", "╤", "╕", "═"), *line(cells[0]), rule("╞", "╪", "╡", "═")]
    for n, row in enumerate(cells[1:]):
        if n:
            lines.append(rule("├", "┼", "┤", "─"))
        lines.extend(line(row))
    lines.append(rule("╘", "╧", "╛", "═"))
    return "\n".join(lines)


def _format(value: object) -> str:
    return "" if value != value else f"{value:g}" if isinstance(value, float) else str(value)


def log_summary(summary: pandas.DataFrame) -> None:
    """Log ``summary`` as aitune does: boxed tables of (Module, Backend) and up to 6 figures."""
    flat = summary.reset_index()
    flat["Backend"] = [backend_label(str(b)) for b in flat["Backend"]]
    figures = list(range(2, flat.shape[1]))  # by position: aitune's power titles repeat
    chunks = [figures[i : i + _SPLIT] for i in range(0, len(figures), _SPLIT)] or [[]]
    for n, chunk in enumerate(chunks):
        part = flat.iloc[:, [0, 1, *chunk]]
        rows = [[_format(v) for v in r] for r in part.itertuples(index=False)]
        label = f" ({n + 1}/{len(chunks)})" if len(chunks) > 1 else ""
        table = render_table([str(c) for c in part.columns], rows, left=2)
        logger.info("Hardware metrics summary%s:\n%s", label, table)


def _int_env(*names: str, default: int) -> int:
    for name in names:
        value = os.environ.get(name)
        if value is not None:
            try:
                return int(value)
            except ValueError:
                continue
    return default


def rank_and_world() -> tuple[int, int]:
    """This process's rank and the world size: torch.distributed's when it is initialised
    (torch already imported), else ``RANK``/``OMPI_COMM_WORLD_RANK`` and
    ``WORLD_SIZE``/``OMPI_COMM_WORLD_SIZE`` (aitune's sources), else 0 and 1."""
    dist = getattr(sys.modules.get("torch"), "distributed", None)
    try:
        if dist is not None and dist.is_available() and dist.is_initialized():
            return int(dist.get_rank()), int(dist.get_world_size())
    except Exception:  # a half-torn-down process group: fall back on the launcher's variables
        pass
    rank = _int_env("RANK", "OMPI_COMM_WORLD_RANK", default=0)
    return rank, _int_env("WORLD_SIZE", "OMPI_COMM_WORLD_SIZE", default=1)


def output_path(path: str | os.PathLike[str]) -> Path:
    """``path``, or ``<stem>.rank-R-of-W<suffix>`` beside it in a multi-process run."""
    p = Path(path)
    rank, world = rank_and_world()
    if world <= 1:
        return p
    return p.with_name(f"{p.stem}.rank-{rank}-of-{world}{p.suffix}")


def write_csv(df: pandas.DataFrame, path: str | os.PathLike[str]) -> None:
    """``df`` as CSV (pandas' text, no index), in a file created 0600, written whole and then
    renamed over ``path``: a failure half-way (a full disk) leaves the previous file intact."""
    with replace_private(path) as raw:
        f = io.TextIOWrapper(raw, encoding="utf-8", newline="")
        df.to_csv(f, index=False)
        f.flush()
        f.detach()  # the raw file stays open: replace_private syncs and renames it


def dump_to(metrics: pandas.DataFrame, name: str | None) -> None:
    """Log the summary of ``metrics`` and write them as CSV to ``name`` (aitune's
    ``AITUNE_HARDWARE_METRICS_PATH``; None: ``hardware_metrics_<YYYYmmdd_HHMMSS>.csv`` in the
    working directory), named per rank in a multi-process run. Nothing is written when there is
    nothing to summarise (aitune's rule)."""
    summary = metrics_summary(metrics)
    if summary is None:
        return
    log_summary(summary)
    if name is None:
        name = f"hardware_metrics_{datetime.datetime.now():%Y%m%d_%H%M%S}.csv"
    path = output_path(name)
    write_csv(metrics, path)
    logger.info("Dumped hardware metrics to CSV file: %s", path)
