"""Senders on the command line: ``stroboscope record … --sender NAME[:key=value,…]``.

``cli/record.py`` adds the options with :func:`add_sender_arguments` and, when any ``--sender`` was
given, feeds each drained table to a :class:`RecordPublisher`: the package's window publisher
(:class:`stroboscope.compat._publisher.WindowPublisher`) closes one window per
``--publish-every`` seconds, and this module hands each event (canonical column names, e.g.
``cpu.util_pct``) to every sender, each on its own worker thread.
"""

from __future__ import annotations

import argparse
import inspect
import os
import re
from collections.abc import Mapping, Sequence
from typing import Any

import pyarrow as pa

import stroboscope.senders as senders_module
from stroboscope._base.checks import check_seconds
from stroboscope._base.files import identity, unlink_if_same
from stroboscope.analysis.windows import AGGREGATES, Aggregate, WindowInfo
from stroboscope.cli import _args
from stroboscope.compat import WindowPublisher
from stroboscope.sampling import Column
from stroboscope.senders import (
    BUILTIN_SENDERS,
    AbstractBackendSender,
    Fanout,
    available_senders,
    load_sender,
)


def parse_sender_spec(text: str) -> tuple[str, dict[str, Any]]:
    """``"prometheus:port=9464,addr=0.0.0.0"`` → ``("prometheus", {"port": 9464, "addr": …})``.

    Each value is converted by the type the sender's class declares for that argument: a
    ``path`` stays text even when it reads as a number (``path=1e3``), a ``port: int`` becomes an
    int. Where the type is not known (plugins, ``Any``), values that read as int, float or
    true/false become those; anything else stays text.
    """
    name, _, rest = text.partition(":")
    name = name.strip()
    if not name:
        raise ValueError(f"--sender {text!r}: give a sender name, e.g. csv:path=metrics.csv")
    declared = _declared_types(name)
    kwargs: dict[str, Any] = {}
    for part in rest.split(",") if rest else ():
        key, eq, value = part.partition("=")
        key = key.strip()
        if not eq or not key:
            raise ValueError(f"--sender {text!r}: {part!r} is not key=value")
        kwargs[key] = _value(value.strip(), declared.get(key))
    return name, kwargs


_TYPE_WORDS = re.compile(r"\b(Any|bool|int|float|str|PathLike|Path)\b")


def _parameters(name: str) -> list[inspect.Parameter] | None:
    """The constructor's parameters of a built-in sender (None when unknown: a plugin, or a
    module that cannot be imported here, which load_sender then reports)."""
    target = BUILTIN_SENDERS.get(name)
    if target is None:
        return None
    try:
        cls = getattr(senders_module, target.rpartition(":")[2])
        return list(inspect.signature(cls).parameters.values())
    except (ImportError, AttributeError, TypeError, ValueError):
        return None


def check_sender_options(text: str, name: str, kwargs: Mapping[str, Any]) -> None:
    """Refuse a built-in sender's spec that lacks a required option or names one the sender
    does not take, listing the sender's options (a plugin's are checked by its constructor)."""
    params = _parameters(name)
    if params is None:
        return
    named = [p for p in params if p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY)]
    required = [p.name for p in named if p.default is p.empty]
    optional = [p.name for p in named if p.default is not p.empty]
    missing = [n for n in required if n not in kwargs]
    open_ended = any(p.kind is p.VAR_KEYWORD for p in params)
    unknown = [] if open_ended else sorted(set(kwargs) - {p.name for p in named})
    if not missing and not unknown:
        return
    problem = (
        f"the {name} sender needs {', '.join(f'{n}=...' for n in missing)}"
        if missing
        else f"the {name} sender takes no option {', '.join(map(repr, unknown))}"
    )
    takes = f"required: {', '.join(required) or 'none'}; optional: {', '.join(optional) or 'none'}"
    if open_ended:
        takes += " and its library's own"
    example = ",".join(f"{n}=..." for n in required)
    raise ValueError(
        f"--sender {text}: {problem} ({takes}), e.g. --sender {name}"
        f"{':' + example if example else ''}"
    )


def check_sender_specs(specs: Sequence[str]) -> None:
    """Check every ``--sender`` spec (syntax, and a built-in sender's options) before anything
    is started: ValueError naming the option."""
    for text in specs:
        check_sender_options(text, *parse_sender_spec(text))


def _declared_types(name: str) -> dict[str, set[str]]:
    """Argument name → the simple types its annotation names, for a built-in sender (empty
    when unknown: a plugin, or a module that cannot be imported here)."""
    params = _parameters(name)
    if params is None:
        return {}
    out: dict[str, set[str]] = {}
    for p in params:
        annotation = p.annotation
        if annotation is inspect.Parameter.empty:
            continue
        text = annotation if isinstance(annotation, str) else getattr(annotation, "__name__", "")
        out[p.name] = set(_TYPE_WORDS.findall(str(text)))
    return out


def _value(text: str, declared: set[str] | None = None) -> Any:
    lowered = text.lower()
    if not declared or "Any" in declared:  # unknown: what the text reads as
        if lowered in ("true", "false"):
            return lowered == "true"
        for convert in (int, float):
            try:
                return convert(text)
            except ValueError:
                continue
        return text
    if "bool" in declared and lowered in ("true", "false"):
        return lowered == "true"
    for word, convert in (("int", int), ("float", float)):
        if word in declared:
            try:
                return convert(text)
            except ValueError:
                continue
    return text  # text, a path, or a bad number the sender itself refuses by name


def _undo(
    senders: Sequence[AbstractBackendSender], made: Mapping[str, tuple[int, int] | None]
) -> None:
    """Close the senders made so far and remove the files this run made for them: only a path
    that still holds the very file a sender created there."""
    for sender in senders:
        sender.close()
    for path, was in made.items():
        unlink_if_same(path, was)


def _note_made(made: dict[str, tuple[int, int] | None], path: object) -> None:
    """Remember which file now stands at ``path``, a path that was free before a sender was made
    for it (None or a free path: nothing to remember)."""
    if isinstance(path, str):
        made[path] = identity(path)


def add_sender_arguments(parser: argparse.ArgumentParser) -> None:
    """Add ``--sender`` (repeatable), ``--publish-every`` and ``--aggregate`` to ``parser``."""
    parser.add_argument(
        "--sender",
        action="append",
        default=[],
        metavar="NAME[:K=V,...]",
        help=f"also publish aggregated metrics to a sender, e.g. prometheus:port=9464 or "
        f"csv:path=m.csv (repeatable; built in: {', '.join(sorted(available_senders()))})",
    )
    parser.add_argument(
        "--publish-every",
        action=_args.checked(_args.seconds),
        default=2.0,
        metavar="S",
        help="seconds between events published to the senders (default 2; checked at each "
        "drain of the recording, so at most as often as it drains)",
    )
    parser.add_argument(
        "--aggregate",
        choices=AGGREGATES,
        default="mean",
        help="how each published value reduces its window (default mean; totals use the last)",
    )


class RecordPublisher:
    """Aggregates drained tables into windows and publishes one event per window to senders.

    Parameters
    ----------
    senders : sequence
        Senders (or plain callables) to publish to.
    columns : sequence of Column
        The sampler's columns (name and kind): counters are published as their last value.
    every : float
        Seconds between published events.
    aggregate : {"mean", "max", "last"}
        Reduction of each window.
    """

    def __init__(
        self,
        senders: Sequence[object],
        columns: Sequence[Column],
        every: float = 2.0,
        aggregate: Aggregate = "mean",
    ) -> None:
        every = check_seconds("--publish-every", every)
        # Counters, counts, clocks and bitmasks publish the window's last value (the package's
        # one rule, analysis/_last_value.py): a mean of them is a value that never was.
        self._window = WindowPublisher(columns, self._submit, every=every, aggregate=aggregate)
        self._fanout = Fanout(senders)
        self._made: dict[str, tuple[int, int] | None] = {}

    @classmethod
    def from_args(
        cls, args: argparse.Namespace, columns: Sequence[Column]
    ) -> RecordPublisher | None:
        """The publisher for the parsed options, or None when no ``--sender`` was given.

        A sender that cannot be made (unknown name, bad argument, missing library) raises
        ``ValueError`` with a message naming the ``--sender`` option.
        """
        specs = [(text, *parse_sender_spec(text)) for text in args.sender]
        if not specs:
            return None
        senders = []
        made: dict[
            str, tuple[int, int] | None
        ] = {}  # files the senders created: removed on failure
        for text, name, kwargs in specs:
            path = kwargs.get("path")
            fresh = isinstance(path, str) and not os.path.lexists(path)
            try:
                senders.append(load_sender(name, **kwargs))
            except (ImportError, TypeError, ValueError, OSError) as exc:
                _note_made(made, path if fresh else None)  # made before it failed
                _undo(senders, made)
                raise ValueError(f"--sender {text}: {exc}") from None
            _note_made(made, path if fresh else None)
        try:
            publisher = cls(senders, columns, args.publish_every, args.aggregate)
        except BaseException:
            _undo(senders, made)
            raise
        publisher._made = made
        return publisher

    def abandon(self) -> None:
        """Setup failed after the senders were made: close them, publishing nothing, and
        remove the files they created."""
        self._fanout.close(5.0)  # nothing was queued: the workers only close their sender
        _undo([], self._made)

    def feed(self, table: pa.Table) -> None:
        """Add a drained table; publish the window when its time has come."""
        self._window.feed(table)

    def _submit(self, event: dict[str, float | int], info: WindowInfo) -> None:
        if event:
            self._fanout.submit(event)

    def close(self, timeout: float = 30.0) -> None:
        """Publish the last window and close every sender once."""
        self._window.publish()
        self._fanout.close(timeout)
