"""The gateway's error hierarchy, and the typed `error` object it becomes.

    GatewayError                    code, message, status, retryable + its `ErrorDetails`
     +-- RequestError               the caller's mistake (400/404/413/422)
     +-- UpstreamError              the provider failed (502 by default)
     |    +-- UpstreamTimeout       connect/read timeout (504)
     |    +-- UpstreamRateLimited   429, with retry_after passed on
     |    +-- UpstreamBadRequest    the provider refused the request (400, upstream message)
     |    +-- UpstreamNotFound      unknown model upstream (404)
     +-- UpstreamBlocked            the provider refused the content (final status "blocked")

Upstream text (the message and details of an `UpstreamError` or `UpstreamBlocked`) is cut to
`UPSTREAM_TEXT_BYTES` of UTF-8 on a character boundary, with a marker, after the secrets are
scrubbed: a provider's 5 MiB error message reaches no caller, record or log line whole.

Raised before the first event, a GatewayError becomes the HTTP status and JSON body of
DESIGN.md section 1; raised after it, it becomes `final{status: "error"}` with `error` set to
its `to_dict()`. `status` is the HTTP status of the first case only: the run never reads it (the
API layer maps a run's error to a status, app/api/responses.py). Provider modules map SDK and
transport errors into this hierarchy once, at their boundary (app/providers/errors.py).
"""

from __future__ import annotations

from dataclasses import InitVar, dataclass, fields
from dataclasses import field as dataclass_field
from typing import Annotated, Any, Literal, NotRequired, cast

from pydantic import Field
from typing_extensions import TypedDict

from app.core.secrets import scrub

__all__ = [
    "AttemptData",
    "ErrorData",
    "ErrorDetails",
    "FinalStatus",
    "GatewayError",
    "RequestError",
    "UpstreamBadRequest",
    "UpstreamBlocked",
    "UpstreamError",
    "UpstreamNotFound",
    "UpstreamRateLimited",
    "UpstreamTimeout",
    "UPSTREAM_TEXT_BYTES",
    "clip_text",
]

UPSTREAM_TEXT_BYTES = 1024

FinalStatus = Literal["ok", "blocked", "error", "cancelled"]


class AttemptData(TypedDict):
    """One try of one routing target before the first content (app/routing)."""

    target: Annotated[str, Field(description="`provider/model` tried.", examples=["openai/gpt-4.1"])]
    outcome: Annotated[Literal["ok", "error", "timeout", "rate_limited", "skipped", "cancelled"], Field(
        description="`skipped`: its circuit was open; `cancelled`: a hedge that lost, or the run went away.")]
    duration_ms: float
    status: NotRequired[Annotated[int, Field(description="The provider's HTTP status.")]]
    code: NotRequired[str]
    step: NotRequired[Annotated[int, Field(description="The run's step (tool loops), when past the first.")]]


class ErrorData(TypedDict):
    """The `error` object: of an HTTP error body, and of `final.error` (one definition for both)."""

    code: Annotated[str, Field(examples=["invalid_request"])]
    message: str
    retryable: bool
    field: NotRequired[Annotated[str, Field(description="Path of the offending field, e.g. `messages.0.content`.")]]
    provider: NotRequired[str]
    upstream_status: NotRequired[Annotated[int, Field(description="The provider's HTTP status.")]]
    # Annotated with a field of its own: typing caches `NotRequired[str | int]` as equal to a
    # library's `NotRequired[int | str]`, and the schema would take whichever order came first.
    upstream_code: NotRequired[Annotated[str | int, Field(description="The provider's own error code (some give numbers).")]]
    upstream_type: NotRequired[str]
    request_id: NotRequired[Annotated[str, Field(description="The provider's request id.")]]
    retry_after: NotRequired[str]
    validator: NotRequired[Annotated[str, Field(description="The validator that blocked the stream.")]]
    reason: NotRequired[Annotated[str, Field(description="Why the validator failed.")]]
    block_reason: NotRequired[Annotated[str, Field(description="Why the provider blocked the content.")]]
    first_available: NotRequired[Annotated[int, Field(description="The oldest event id a replay can start after, less one.")]]
    errors: NotRequired[Annotated[list[dict[str, Any]], Field(description="Every invalid field (422).")]]
    deadline: NotRequired[Annotated[Literal["first_token", "idle", "total"], Field(
        description="Which deadline passed (code `timeout`).")]]
    attempts: NotRequired[Annotated[list[AttemptData], Field(
        description="Before the first event: every upstream attempt the route made.")]]


@dataclass(eq=False, repr=False, kw_only=True)
class ErrorDetails:
    """What an error may say beside its code and message: the one list of these facts. They are
    `GatewayError`'s keyword arguments and attributes, and, when set, the optional keys of its
    `error` object (`ErrorData` describes each of them for the OpenAPI document; a test holds the
    two lists equal). Their text passes through `scrub` (app/core/secrets.py): a provider's text
    may quote the gateway's key."""

    field: str | None = None
    provider: str | None = None
    upstream_status: int | None = None
    upstream_code: str | int | None = None
    upstream_type: str | None = None
    request_id: str | None = None
    retry_after: str | None = None
    validator: str | None = None
    reason: str | None = None
    block_reason: str | None = None
    first_available: int | None = None
    deadline: str | None = None

    def _scrub_details(self) -> None:
        for name in _DETAIL_NAMES:
            if isinstance(value := getattr(self, name), str):
                setattr(self, name, scrub(value))


_DETAIL_NAMES = tuple(f.name for f in fields(ErrorDetails))


@dataclass(eq=False, repr=False)
class _ErrorArguments(ErrorDetails, Exception):
    """`GatewayError`'s constructor: the message, then by keyword an instance's own code, status and
    retryable (each class has its defaults) and the details."""

    message: str
    code: InitVar[str | None] = dataclass_field(default=None, kw_only=True)
    status: InitVar[int | None] = dataclass_field(default=None, kw_only=True)
    retryable: InitVar[bool | None] = dataclass_field(default=None, kw_only=True)

    def __post_init__(self, code: str | None, status: int | None, retryable: bool | None) -> None:
        self.message = scrub(self.message)  # upstream text may quote the gateway's key (app/core/secrets.py)
        self.args = (self.message,)
        self._scrub_details()
        for name, value in (("code", code), ("status", status), ("retryable", retryable)):
            if value is not None:
                setattr(self, name, value)  # this error's own, over its class's default


class GatewayError(_ErrorArguments):
    status: int = 500
    code: str = "internal_error"
    retryable: bool = False
    final_status: FinalStatus = "error"
    """The `final.status` this error gives when raised after the first event."""
    attempts: tuple[AttemptData, ...] | None = None
    """Set by the routing layer when every attempt before the first event failed."""

    def to_dict(self) -> ErrorData:
        """The `error` object of an HTTP error body or of `final.error`: the details that are set."""
        out: dict[str, Any] = {"code": self.code, "message": self.message, "retryable": self.retryable}
        for name in _DETAIL_NAMES:
            if (value := getattr(self, name)) is not None:
                out[name] = value
        if self.attempts is not None:
            out["attempts"] = list(self.attempts)
        return cast(ErrorData, out)  # ErrorDetails' fields are ErrorData's optional keys


class RequestError(GatewayError):
    status = 400
    code = "invalid_request"


def clip_text(text: str, limit: int = UPSTREAM_TEXT_BYTES) -> str:
    """`text` in at most `limit` bytes of UTF-8 (whole characters), then a marker if it was cut."""
    if len(text) * 4 <= limit:
        return text
    encoded = text.encode("utf-8", "surrogatepass")
    if len(encoded) <= limit:
        return text
    return encoded[:limit].decode("utf-8", "ignore") + _CUT


_CUT = "… [truncated]"
_SCRUB_WINDOW = 4 * UPSTREAM_TEXT_BYTES
"""Upstream text is cut to this many characters before the (regex) scrub and to the limit after it:
scrubbing a huge text costs nothing, and a key straddling the final cut is already redacted."""
_DETAILS = ("upstream_type", "upstream_code", "request_id", "reason", "block_reason", "retry_after")


class _UpstreamText(GatewayError):
    """A GatewayError whose text comes from the provider: clipped (module docstring)."""

    def __init__(self, message: str, **kwargs: Any) -> None:
        for name in _DETAILS:
            if isinstance(value := kwargs.get(name), str):
                kwargs[name] = value[:_SCRUB_WINDOW]
        super().__init__(message[:_SCRUB_WINDOW], **kwargs)
        clipped = clip_text(self.message)
        if len(message) > _SCRUB_WINDOW and not clipped.endswith(_CUT):
            clipped += _CUT
        self.message = clipped
        self.args = (clipped,)
        for name in _DETAILS:
            if isinstance(value := getattr(self, name), str):
                setattr(self, name, clip_text(value))


class UpstreamError(_UpstreamText):
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


class UpstreamBadRequest(UpstreamError):
    status = 400
    code = "upstream_bad_request"


class UpstreamNotFound(UpstreamError):
    status = 404
    code = "model_not_found"


class UpstreamBlocked(_UpstreamText):
    """The provider refused the prompt or the output (e.g. Gemini promptFeedback.blockReason)."""

    status = 400
    code = "upstream_blocked"
    final_status = "blocked"
