"""The gateway's error hierarchy.

    GatewayError                    code, message, status, retryable, details
     +-- RequestError               the caller's mistake (400/404/413/422)
     +-- UpstreamError              the provider failed (502 by default)
     |    +-- UpstreamTimeout       connect/read timeout (504)
     |    +-- UpstreamRateLimited   429, with retry_after passed on
     |    +-- UpstreamBadRequest    the provider refused the request (400, upstream message)
     |    +-- UpstreamNotFound      unknown model upstream (404)
     +-- UpstreamBlocked            the provider refused the content (final status "blocked")

Raised before the first event, a GatewayError becomes the HTTP status and JSON body of
DESIGN.md section 1; raised after it, it becomes `final{status: "error"}` with `error` set.
Provider modules map SDK and transport errors into this hierarchy once, at their boundary.
"""

from __future__ import annotations

from typing import Any

from app.core.secrets import scrub, scrub_value

__all__ = [
    "GatewayError",
    "RequestError",
    "UpstreamBadRequest",
    "UpstreamBlocked",
    "UpstreamError",
    "UpstreamNotFound",
    "UpstreamRateLimited",
    "UpstreamTimeout",
]


class GatewayError(Exception):
    status: int = 500
    code: str = "internal_error"
    retryable: bool = False
    final_status: str = "error"
    """The `final.status` this error gives when raised after the first event."""

    def __init__(
        self,
        message: str,
        *,
        code: str | None = None,
        status: int | None = None,
        retryable: bool | None = None,
        **details: Any,
    ) -> None:
        message = scrub(message)  # upstream text may quote the gateway's key (app/core/secrets.py)
        super().__init__(message)
        self.message = message
        if code is not None:
            self.code = code
        if status is not None:
            self.status = status
        if retryable is not None:
            self.retryable = retryable
        self.details = {k: scrub_value(v) for k, v in details.items() if v is not None}

    def to_dict(self) -> dict[str, Any]:
        """The `error` object of an HTTP error body or of `final.error`."""
        return {"code": self.code, "message": self.message, "retryable": self.retryable, **self.details}


class RequestError(GatewayError):
    status = 400
    code = "invalid_request"


class UpstreamError(GatewayError):
    status = 502
    code = "upstream_error"


class UpstreamTimeout(UpstreamError):
    status = 504
    code = "upstream_timeout"
    retryable = True


class UpstreamRateLimited(UpstreamError):
    status = 429
    code = "rate_limited"
    retryable = True

    def __init__(self, message: str, *, retry_after: str | None = None, **kw: Any) -> None:
        super().__init__(message, retry_after=retry_after, **kw)
        self.retry_after = retry_after


class UpstreamBadRequest(UpstreamError):
    status = 400
    code = "upstream_bad_request"


class UpstreamNotFound(UpstreamError):
    status = 404
    code = "model_not_found"


class UpstreamBlocked(GatewayError):
    """The provider refused the prompt or the output (e.g. Gemini promptFeedback.blockReason)."""

    status = 400
    code = "upstream_blocked"
    final_status = "blocked"
