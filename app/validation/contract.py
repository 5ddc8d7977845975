"""The validation gate as a run uses it (`Gate`), and the gate of a run no validator applies to."""

from __future__ import annotations

from typing import Protocol

from app.core.events import StreamEvent, ValidationData

__all__ = ["Gate", "PassThroughGate"]


class Gate(Protocol):
    """The validation gate as a run uses it: `ValidationGate`, or `PassThroughGate` when no
    validator applies."""

    @property
    def rewrites(self) -> bool:
        """A validator may release text other than the provider's (a redaction)."""

    async def admit_all(self, events: list[StreamEvent]) -> list[StreamEvent]:
        """Take a batch of events; return the events released (whole, in order; maybe none)."""

    async def close_text(self) -> list[StreamEvent]:
        """The response's text is over and the gateway's tools run next: its pending fragments
        are checked and released, as an event of another kind would do (no final check: the
        turn ends with its calls)."""

    async def finish(self) -> list[StreamEvent]:
        """End of stream: the events still held, once every final check passed."""

    def summary(self) -> ValidationData | None:
        """What the gate did, for `final.validation`; None for a pass-through."""

    def close(self) -> None:
        """The run ended (however): checks still in flight are cancelled."""


class PassThroughGate:
    """No validator applies: every event is released as it comes, at no added latency."""

    __slots__ = ()

    rewrites = False

    async def admit_all(self, events: list[StreamEvent]) -> list[StreamEvent]:
        return events

    async def close_text(self) -> list[StreamEvent]:
        return []

    async def finish(self) -> list[StreamEvent]:
        return []

    def summary(self) -> ValidationData | None:
        return None

    def close(self) -> None:
        return None
