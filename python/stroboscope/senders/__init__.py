"""Senders: where the published metrics of a monitor go, and the registry that finds them.

Built in (the optional libraries are extras, imported only when the sender is made):

- ``csv``: :class:`~stroboscope.senders.csv_file.CSVSender`
- ``jsonl``: :class:`~stroboscope.senders.jsonl_file.JSONLinesSender`
- ``parquet``: :class:`~stroboscope.senders.parquet_file.ParquetSender`
- ``logging``: :class:`~stroboscope.senders.log.LoggingSender`
- ``tensorboard``: :class:`~stroboscope.senders.tensorboard.TensorBoardSender`
  (``stroboscope[tensorboard]``)
- ``wandb``: :class:`~stroboscope.senders.wandb.WandbSender` (``stroboscope[wandb]``)
- ``mlflow``: :class:`~stroboscope.senders.mlflow.MlflowSender` (``stroboscope[mlflow]``)
- ``prometheus``: :class:`~stroboscope.senders.prometheus.PrometheusSender`
  (``stroboscope[prometheus]``)

Third-party senders register an entry point in the group ``stroboscope.senders`` whose object is
a sender class, or a factory returning a sender or a plain callable::

    [project.entry-points."stroboscope.senders"]
    mysender = "mypkg.metrics:MySender"

and are made with ``stroboscope.load_sender("mysender", **kwargs)``.
"""

from __future__ import annotations

import importlib
import importlib.metadata
import logging
from typing import Any

from stroboscope._base.lazy import face
from stroboscope.senders._base import (
    AbstractBackendSender,
    BuiltinSender,
    CallableSender,
    GPUHandle,
    SamplerDict,
    SenderLike,
    StatsDict,
    as_sender,
    flatten_event,
)
from stroboscope.senders._dispatch import Fanout

logger = logging.getLogger("stroboscope.senders")

ENTRY_POINT_GROUP = "stroboscope.senders"

BUILTIN_SENDERS: dict[str, str] = {
    "csv": "stroboscope.senders.csv_file:CSVSender",
    "jsonl": "stroboscope.senders.jsonl_file:JSONLinesSender",
    "parquet": "stroboscope.senders.parquet_file:ParquetSender",
    "logging": "stroboscope.senders.log:LoggingSender",
    "tensorboard": "stroboscope.senders.tensorboard:TensorBoardSender",
    "wandb": "stroboscope.senders.wandb:WandbSender",
    "mlflow": "stroboscope.senders.mlflow:MlflowSender",
    "prometheus": "stroboscope.senders.prometheus:PrometheusSender",
}
"""Built-in sender name → ``module:attribute`` of its class."""


def _entry_points() -> list[importlib.metadata.EntryPoint]:
    eps = importlib.metadata.entry_points()
    if hasattr(eps, "select"):  # Python >= 3.10
        return list(eps.select(group=ENTRY_POINT_GROUP))
    return list(eps.get(ENTRY_POINT_GROUP, ()))  # type: ignore[attr-defined, unused-ignore]


def available_senders() -> dict[str, str]:
    """Every sender name that :func:`load_sender` knows → where it comes from (``module:attr``).

    Built-ins first; then plugins from the ``stroboscope.senders`` entry points (a plugin is
    listed without being imported, so a broken one shows here and fails only when loaded).
    """
    out = dict(BUILTIN_SENDERS)
    for ep in _entry_points():
        out.setdefault(ep.name, ep.value)
    return out


def _import_target(name: str, target: str) -> Any:
    module_name, _, attr = target.partition(":")
    module = importlib.import_module(module_name)
    obj: Any = module
    for part in attr.split(".") if attr else ():
        obj = getattr(obj, part)
    return obj


def load_sender(name: str, **kwargs: Any) -> AbstractBackendSender:
    """Make the sender registered as ``name`` with ``kwargs``.

    Parameters
    ----------
    name : str
        A built-in name (``csv``, ``jsonl``, ``parquet``, ``logging``, ``tensorboard``, ``wandb``,
        ``mlflow``, ``prometheus``) or the name of a ``stroboscope.senders`` entry point.
    **kwargs
        Arguments of the sender class (e.g. ``path=`` for ``csv``, ``port=`` for ``prometheus``).

    Returns
    -------
    AbstractBackendSender
        The sender; a plugin factory that returns a plain callable is wrapped in
        :class:`CallableSender`.

    Raises
    ------
    ValueError
        No sender has this name (the message lists the known ones).
    ImportError
        The sender's module or its optional library cannot be imported (the message names the
        plugin or the extra to install).
    """
    target = BUILTIN_SENDERS.get(name)
    if target is not None:
        factory = _import_target(name, target)
    else:
        matches = [ep for ep in _entry_points() if ep.name == name]
        if not matches:
            known = ", ".join(sorted(available_senders()))
            raise ValueError(f"unknown sender {name!r}; known senders: {known}")
        ep = matches[0]
        try:
            factory = ep.load()
        except Exception as exc:
            dist = getattr(getattr(ep, "dist", None), "name", None)
            where = f" (from distribution {dist})" if dist else ""
            raise ImportError(
                f"sender plugin {name!r} = {ep.value!r}{where} failed to load: "
                f"{type(exc).__name__}: {exc}"
            ) from exc
    if not callable(factory):
        raise TypeError(f"sender {name!r} is {type(factory).__name__}, not a class or factory")
    made = factory(**kwargs)
    return as_sender(made)


# The sender classes load on first use, so this face imports no optional library.
_SENDER_CLASSES = {
    target.partition(":")[2]: "." + target.partition(":")[0].rpartition(".")[2]
    for target in BUILTIN_SENDERS.values()
}

__all__ = [
    *sorted(_SENDER_CLASSES),
    "BUILTIN_SENDERS",
    "ENTRY_POINT_GROUP",
    "AbstractBackendSender",
    "BuiltinSender",
    "CallableSender",
    "Fanout",
    "GPUHandle",
    "SamplerDict",
    "SenderLike",
    "StatsDict",
    "as_sender",
    "available_senders",
    "flatten_event",
    "load_sender",
]

__getattr__, __dir__ = face(__name__, __all__, _SENDER_CLASSES)
