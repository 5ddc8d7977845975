"""What a stream store answers besides a stream: its errors, and the outcomes of a cancel.

Every store raises the same errors (memory or Redis), so the API maps them once."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Literal, Protocol

from app.core.errors import ErrorData, GatewayError

__all__ = ["CANCELLED_BY_REQUEST", "CancelOutcome", "ClaimHook", "ClaimedRun", "CursorAhead", "EventTooLarge", "FinalDelivered",
           "ReplayUnavailable", "RunTags", "StoreFull", "StoreUnavailable", "SweptHook", "SweptRecord"]


class ReplayUnavailable(GatewayError):
    status = 410
    code = "replay_unavailable"


class EventTooLarge(GatewayError):
    """One event (a tool call's whole arguments, a tool's output) whose frame alone passes the
    stream's byte cap (FOUNDRY_MAX_STREAM_BYTES): no stream may hold it, so the run ends here with
    an error final instead of an event no reader could be given whole."""

    status = 502
    code = "stream_too_large"


class StoreFull(GatewayError):
    status = 503
    code = "overloaded"
    retryable = True


class FinalDelivered(Exception):
    """The cursor is the final's id of a finished stream: the reader has it all (the API answers
    204, which makes an EventSource stop reconnecting), whichever replica it asks."""

    def __init__(self, last_seq: int) -> None:
        super().__init__(f"the stream ended at event {last_seq}, the cursor")
        self.last_seq = last_seq


class CursorAhead(GatewayError):
    """A replay cursor past the stream's last event (the API answers 400 naming the field)."""

    status = 400
    code = "cursor_ahead"

    def __init__(self, last_seq: int) -> None:
        super().__init__(f"the cursor is past the stream's last event ({last_seq})")
        self.last_seq = last_seq


class StoreUnavailable(GatewayError):
    """The stream store cannot take new streams (unreachable, or its write buffer is full)."""

    status = 503
    code = "store_unavailable"
    retryable = True


CANCELLED_BY_REQUEST: ErrorData = {"code": "cancelled", "retryable": False,
                                   "message": "the run was cancelled through the API (POST /v1/stream/{id}/cancel)"}
"""The error of the final of a run ended by `cancel()` (the API's cancel, on any replica)."""

CancelOutcome = Literal["cancelled", "cancelling", "finished"]
"""`cancelled`: the run ended here; `cancelling`: asked of the replica running it; `finished`:
it had already ended (a no-op)."""


@dataclass(slots=True, frozen=True, kw_only=True)
class RunTags:
    """What a shared store keeps beside a stream so that another replica can end and record its
    run when the replica running it dies: the request, and the key's concurrency slot to free."""

    request_id: str | None = None
    slot: str | None = None


@dataclass(slots=True, frozen=True, kw_only=True)
class ClaimedRun:
    """A run this replica ended for a replica that cannot (its lease lapsed, or a cancel nobody
    else could serve): as far as the store has it, for its run record and its key's slot."""

    stream_id: str
    model: str
    provider: str
    owner: str | None
    """The API key that started it."""
    tags: RunTags
    created_at: float
    status: str
    error: ErrorData
    transcript: dict[str, Any] | None
    """The last transcript snapshot the owner wrote (None if it wrote none), ended as claimed."""


class ClaimHook(Protocol):
    """Told of each run this replica ends for another (app/main.py): its key's slot first, then the run."""

    async def free_slot(self, owner: str, slot: str) -> None:
        """Free the key's concurrency slot the run held, before its final is written: a client that
        reads that final and asks again at once finds the slot free. Idempotent (claimers may race)."""

    async def claimed(self, run: ClaimedRun) -> None:
        """This replica wrote the run's final (once, only the claimer): its record."""


@dataclass(slots=True, frozen=True, kw_only=True)
class SweptRecord:
    """A run's record that travelled with its final in the shared store (its outbox) and that the
    replica which wrote them did not confirm written (it died, or its writer gave the record up):
    the record as that replica built it, and the final transcript snapshot written with it."""

    stream_id: str
    payload: bytes
    """The record as its owner built it (app/records: `RunRecord.payload`)."""
    transcript: dict[str, Any] | None


SweptHook = Callable[[SweptRecord], None]
"""Told of each record this replica takes from another's outbox (app/main.py: to the records writer)."""
