"""Errors of the routing layer, in the gateway's hierarchy (app/core/errors.py)."""

from __future__ import annotations

from typing import Literal

from app.core.errors import UpstreamError, UpstreamTimeout

__all__ = ["CircuitOpen", "DeadlineExceeded", "Deadline"]

Deadline = Literal["first_token", "idle", "total"]


class DeadlineExceeded(UpstreamTimeout):
    """A routing deadline passed: 504 before the first event, `final.error.code` "timeout" after."""

    code = "timeout"

    deadline: Deadline

    def __init__(self, deadline: Deadline, seconds: float, *, provider: str | None = None) -> None:
        what = {"first_token": "no content from the provider within", "idle": "the provider was silent for",
                "total": "the run passed its deadline of"}[deadline]
        super().__init__(f"{what} {seconds:g} s", deadline=deadline, provider=provider)


class CircuitOpen(UpstreamError):
    """Every target of the request is cooling down after repeated failures."""

    status = 503
    code = "circuit_open"
    retryable = True
