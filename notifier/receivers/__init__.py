"""Receivers: one small file per integration, its config model beside it.

Every receiver has the same shape (:class:`Receiver`): ``send`` delivers one notification and returns
a receipt, or raises :class:`tailhound.errors.DeliveryError` saying whether a retry may help and how
long the far side asked to wait. Receivers do not retry, back off or dead-letter themselves: the
deliver stage does that the same way for all of them. Each receiver module exposes ``<Kind>Config``
(a pydantic model with ``type: Literal["<kind>"]`` and ``name``) and ``<Kind>Receiver`` built from it.
A receiver that keeps something alive on the far side between notifications (Alertmanager's re-posts)
also has ``resume`` and ``stand_by``: see :mod:`tailhound.notifier.receivers.alertmanager`.
"""

from __future__ import annotations

from typing import Protocol, runtime_checkable

from tailhound.notifier.model import Notification, Receipt


@runtime_checkable
class Receiver(Protocol):
    name: str

    async def send(self, notification: Notification, receipt: Receipt | None) -> Receipt:
        """Deliver `notification`; `receipt` is what this receiver returned for the group's last send."""
        ...

    async def close(self) -> None:
        """Release connections."""
        ...


def truncate(text: str, limit: int, marker: str = "…") -> str:
    """`text` cut to at most `limit` characters, ending with `marker` when cut."""
    if len(text) <= limit:
        return text
    return text[: max(limit - len(marker), 0)] + marker
