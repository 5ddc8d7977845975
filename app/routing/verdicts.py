"""What a failure before the first content means for routing: retry the target, try the next or
stop (`verdict`), whether it counts toward the target's breaker (`breaks`), its attempt outcome,
and an upstream's `Retry-After` in seconds."""

from __future__ import annotations

import email.utils
import time
from typing import Any, Literal

from app.core.errors import GatewayError, RequestError, UpstreamBadRequest, UpstreamBlocked
from app.core.patches import Patch
from app.routing.errors import CircuitOpen, DeadlineExceeded
from app.routing.targets import Outcome

__all__ = ["breaks", "has_content", "has_relay", "outcome", "retry_after_seconds", "verdict"]

_CONTENT_KINDS = frozenset({"tool_start", "tool_delta", "tool_result_start", "tool_result_delta"})
_TARGET_FAULTS = frozenset({"upstream_auth", "model_not_found", "upstream_quota"})
"""Failures of the target's configuration: another target may serve, the same one will not."""
_NOT_BREAKING = frozenset({"model_not_found", "rate_limited"})
"""Never a breaker failure: a model that does not exist is the caller's naming (everyone else's
requests to it would get 503 instead of 404), a 429 is the provider asking to slow down."""


def has_content(batch: list[Patch]) -> bool:
    for patch in batch:
        kind = patch.kind
        if kind in _CONTENT_KINDS or (kind in ("text_delta", "reasoning_delta") and patch.text):  # type: ignore[union-attr]
            return True
    return False


def has_relay(batch: list[Patch]) -> bool:
    """A provider event for the client (a same-wire relay): released at once, so nothing of the
    response can be retried after it."""
    return any(patch.kind == "relay" for patch in batch)


def verdict(exc: GatewayError) -> Literal["retry", "fallback", "stop"]:
    """What a failure before the first content allows: retry the target, try the next, or neither."""
    if isinstance(exc, (RequestError, UpstreamBadRequest, UpstreamBlocked)):
        return "stop"  # the caller's request: no target will take it (never retried)
    if isinstance(exc, DeadlineExceeded):
        return "stop" if exc.deadline == "total" else "fallback"  # a slow first token: move on
    if exc.code in _TARGET_FAULTS or isinstance(exc, CircuitOpen):
        return "fallback"
    status = exc.upstream_status
    if exc.retryable or (status is not None and status >= 500):
        return "retry"
    return "fallback"


def breaks(exc: GatewayError) -> bool:
    """Whether a failure counts toward the target's breaker: the target's own faults only."""
    return verdict(exc) != "stop" and exc.code not in _NOT_BREAKING and not isinstance(exc, CircuitOpen)


def outcome(exc: GatewayError) -> Outcome:
    if isinstance(exc, CircuitOpen):
        return "skipped"
    if exc.code == "rate_limited":
        return "rate_limited"
    if exc.status == 504:
        return "timeout"
    return "error"


def retry_after_seconds(value: Any) -> float | None:
    """A Retry-After header value (seconds or an HTTP date) in seconds; None if absent or unreadable."""
    if value is None:
        return None
    text = str(value).strip()
    try:
        return max(0.0, float(text))
    except ValueError:
        pass
    try:
        when = email.utils.parsedate_to_datetime(text)
    except (TypeError, ValueError):
        return None
    return max(0.0, when.timestamp() - time.time())
