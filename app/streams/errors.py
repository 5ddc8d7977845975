"""What a stream store answers besides a stream: its errors, and the outcomes of a cancel.

Every store raises the same errors (memory or Redis), so the API maps them once."""

from __future__ import annotations

from typing import Literal

from app.core.errors import ErrorData, GatewayError

__all__ = ["CANCELLED_BY_REQUEST", "CancelOutcome", "CursorAhead", "ReplayUnavailable", "StoreFull",
           "StoreUnavailable"]


class ReplayUnavailable(GatewayError):
    status = 410
    code = "replay_unavailable"


class StoreFull(GatewayError):
    status = 503
    code = "overloaded"
    retryable = True


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
