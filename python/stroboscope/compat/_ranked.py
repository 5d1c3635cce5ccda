"""How the drop-in monitor's ``rank`` reaches the built-in senders that label ranks themselves.

The original monitors put the rank in every key (``rank3.cpu``), and :class:`SystemMonitor` still
does, in ``sampler`` and for every user sender. W&B, MLflow and TensorBoard have their own place
for it (``x_label``, run tags, run directories), where the built-in senders put it; given the
prefixed keys too, they would say the rank twice (``rank3.cpu/l:rank_3``). So the monitor offers
each built-in sender its rank through the ``label_rank`` hook of
:class:`~stroboscope.senders.BuiltinSender`, and feeds one that takes it the keys without the
prefix.
"""

from __future__ import annotations

from typing import Any

from stroboscope.senders import AbstractBackendSender, BuiltinSender, StatsDict


class RankLabelledSender(BuiltinSender):
    """A built-in sender that labels the rank itself, fed the events without the monitor's
    ``rank{r}.`` key prefix (else the rank is said twice, e.g. ``rank0.cpu/l:rank_0``).

    The fan-out names its worker thread after this class: ``stroboscope-sender-RankLabelledSender``.
    """

    def __init__(self, sender: BuiltinSender, prefix: str) -> None:
        super().__init__()
        self.sender = sender
        self._prefix = prefix

    def publish(self, event: StatsDict, **kwargs: Any) -> None:
        n = len(self._prefix)
        unprefixed = {k[n:] if k.startswith(self._prefix) else k: v for k, v in event.items()}
        self.sender.publish(unprefixed, **kwargs)

    def close(self) -> None:
        self.sender.close()

    def __repr__(self) -> str:
        return repr(self.sender)


def rank_aware(
    senders: list[AbstractBackendSender], rank: int | None
) -> list[AbstractBackendSender]:
    """The senders as the fan-out feeds them: each built-in sender is told ``rank`` (its
    ``label_rank`` hook); one that labels the rank in its backend gets unprefixed keys. User
    senders, and every sender when ``rank`` is None, get the events as they are."""
    if rank is None:
        return senders
    prefix = f"rank{rank}."  # CompatKeys' prefix (tests/compat/test_scaffold.py pins both)
    return [
        RankLabelledSender(s, prefix) if isinstance(s, BuiltinSender) and s.label_rank(rank) else s
        for s in senders
    ]
