"""Provider failures -> the gateway's errors, in one place for every adapter.

`status_error()` is the one HTTP-status ladder (an error answer before the body: DESIGN.md
section 1); `stream_error()` the one mapping of an error reported inside a stream (it ends the
stream with `final{status: "error"}`); `transport_error()` maps a connection failure or timeout
before the body and `read_error()` one while reading it. Each adapter only extracts the
provider's own fields (message, type, retry hint) and calls these.

Connection failures arrive as aiohttp's `ClientError`s (the gateway's own client,
app/providers/upstream.py) or asyncio's timeout. A timeout is decided by the root cause: aiohttp's
`ServerTimeoutError` family when aiohttp's error is in the chain, else asyncio's timeout anywhere
in it; a refused connection (`ClientConnectorError`) or an upstream that hung up
(`ServerDisconnectedError`) is a connection failure (502), never a timeout.
"""

from __future__ import annotations

import asyncio
import email.utils
import time

import aiohttp

from app.core.errors import (
    UpstreamBadRequest,
    UpstreamError,
    UpstreamNotFound,
    UpstreamRateLimited,
    UpstreamTimeout,
)

__all__ = ["CONNECTION_ERRORS", "RETRY_AFTER_MAX", "is_timeout", "read_error", "retryable_status", "sane_retry_after",
           "status_error", "stream_error", "transport_error"]

RETRY_AFTER_MAX = 3600

CONNECTION_ERRORS: tuple[type[Exception], ...] = (aiohttp.ClientError,)
"""No answer, or an answer cut off (aiohttp's timeouts subclass it too)."""

# Error kinds providers report in a stream (OpenAI `type`/`code`, Anthropic `error.type`, Google
# `status`) -> the gateway's code; any other kind is `upstream_error`.
_KIND_CODES = {
    "overloaded_error": "upstream_overloaded",
    "rate_limit_error": "rate_limited",
    "timeout_error": "upstream_timeout",
    "invalid_request_error": "upstream_bad_request",
}
_RETRYABLE_KINDS = frozenset({
    "server_error", "overloaded_error", "api_error", "rate_limit_error", "service_unavailable", "timeout",
    "timeout_error", "RESOURCE_EXHAUSTED", "UNAVAILABLE", "INTERNAL", "DEADLINE_EXCEEDED",
})


_KIND_STATUS = {"invalid_request_error": 400, "rate_limit_error": 429}
"""Kinds that name an HTTP class when the provider sends no status (OpenAI's and Anthropic's types)."""


def retryable_status(status: int | None) -> bool:
    return status is not None and (status in (408, 429) or status >= 500)


def sane_retry_after(value: str | None) -> str | None:
    """An upstream `Retry-After` as the gateway passes it on: whole seconds (RFC 9110 section
    10.2.3: delay-seconds, or an HTTP-date made relative), clamped to 1..RETRY_AFTER_MAX; None
    for anything else (`nan`, `-5`, `1e309`, `2.5`, a value carrying other text)."""
    if value is None:
        return None
    text = value.strip(" ")
    if text.isascii() and text.isdigit():
        seconds = RETRY_AFTER_MAX if len(text) > 6 else int(text)
    elif 20 <= len(text) <= 40 and text.isprintable():
        try:
            when = email.utils.parsedate_to_datetime(text)
        except (TypeError, ValueError):
            return None
        if when.tzinfo is None:
            return None
        seconds = round(min(when.timestamp() - time.time(), RETRY_AFTER_MAX))
    else:
        return None
    return str(min(max(seconds, 1), RETRY_AFTER_MAX))


def status_error(
    status: int,
    detail: str,
    *,
    provider: str,
    retry_after: str | None = None,
    upstream_code: str | int | None = None,
    upstream_type: str | None = None,
    request_id: str | None = None,
    credentials_refused: bool = False,
) -> UpstreamError:
    """An HTTP error answer: 400 with the upstream message, the gateway's credentials refused
    (401/403, or `credentials_refused`) 502 without echoing the upstream text (it can quote the
    key), 404, 408 -> 504, 429 with Retry-After, 529 overloaded and 5xx -> 502 retryable."""
    def error(cls: type[UpstreamError], message: str, *, code: str | None = None,
              retryable: bool | None = None) -> UpstreamError:
        return cls(message, code=code, retryable=retryable, provider=provider, upstream_status=status,
                   upstream_code=upstream_code, upstream_type=upstream_type, request_id=request_id,
                   retry_after=sane_retry_after(retry_after) if status == 429 else None)

    if 300 <= status < 400:  # never followed: the request carries the gateway's credential (DESIGN.md section 4)
        return error(UpstreamError, f"{provider}: the provider answered a redirect (HTTP {status}); redirects are "
                     "not followed", code="upstream_redirect", retryable=False)
    if status in (401, 403) or credentials_refused:
        return error(UpstreamError, f"{provider}: the provider refused the gateway's credentials (HTTP {status})",
                     code="upstream_auth")
    message = f"{provider}: {detail or f'HTTP {status}'}"
    if status == 404:
        return error(UpstreamNotFound, message)
    if status == 408:
        return error(UpstreamTimeout, message)
    if status == 429:
        if upstream_code == "insufficient_quota":  # billing, not load: retrying will not help
            return error(UpstreamError, message, code="upstream_quota")
        return error(UpstreamRateLimited, message)
    if status == 529:
        return error(UpstreamError, message, code="upstream_overloaded", retryable=True)
    if status < 500:
        return error(UpstreamBadRequest, message)
    return error(UpstreamError, message, retryable=True)


def stream_error(
    provider: str,
    message: str,
    *,
    status: int | None = None,
    kind: str | None = None,
    upstream_code: str | int | None = None,
    request_id: str | None = None,
    retry_after: str | None = None,
) -> UpstreamError:
    """An error the provider reported inside its stream. `kind` is its error type; retryable
    when the status or the kind says so (overload, rate limit, server error, timeout).

    With an HTTP status (OpenRouter and compatible servers put one in the error object) it keeps
    the provider's class, as an error answer with that status would (`status_error`): before any
    output 400 answers 400 (the caller's fault, not retryable), 429 answers 429 with Retry-After
    (the provider's hint, else 1 s), 5xx answers 502. A 400-class kind without a status
    (`invalid_request_error`) is a 400 too, `rate_limit_error` a 429."""
    if status is None:
        status = _KIND_STATUS.get(kind or "")
    if status is not None and 400 <= status <= 599 and status not in (401, 403):
        return status_error(status, message, provider=provider, upstream_code=upstream_code, upstream_type=kind,
                            request_id=request_id, retry_after=(retry_after or "1") if status == 429 else None)
    retryable = retryable_status(status) or kind in _RETRYABLE_KINDS or upstream_code in _RETRYABLE_KINDS
    return UpstreamError(
        f"{provider}: {message}", code=_KIND_CODES.get(kind or "", "upstream_error"), retryable=retryable,
        provider=provider, upstream_status=status, upstream_code=upstream_code, upstream_type=kind,
        request_id=request_id,
    )


def _chain(exc: BaseException) -> list[BaseException]:
    chain = [exc]
    while chain[-1].__cause__ is not None and len(chain) < 16:
        chain.append(chain[-1].__cause__)
    return chain


def _aiohttp_cause(exc: BaseException) -> aiohttp.ClientError | None:
    return next((link for link in _chain(exc) if isinstance(link, aiohttp.ClientError)), None)


def is_timeout(exc: BaseException) -> bool:
    """Whether a connection failure was a timeout: aiohttp's own error when it is behind it
    (module docstring), else asyncio's timeout anywhere in the chain."""
    cause = _aiohttp_cause(exc)
    if cause is not None:
        return isinstance(cause, aiohttp.ServerTimeoutError)
    return any(isinstance(link, asyncio.TimeoutError) for link in _chain(exc))


def _cause_name(exc: BaseException) -> str:
    cause = _aiohttp_cause(exc)
    return type(cause if cause is not None else _chain(exc)[-1]).__name__


def transport_error(exc: BaseException, provider: str) -> UpstreamError:
    """No answer: a timeout (504) or a connection failure (502 `upstream_unavailable`, retryable)."""
    if is_timeout(exc):
        return UpstreamTimeout(f"{provider}: the provider did not answer in time", provider=provider)
    return UpstreamError(f"{provider}: cannot reach the provider ({_cause_name(exc)})",
                         code="upstream_unavailable", retryable=True, provider=provider)


def read_error(exc: BaseException, provider: str) -> UpstreamError:
    """The body cut short: silence past the read timeout (504), or the connection lost (502)."""
    if is_timeout(exc):
        return UpstreamTimeout(f"{provider}: read timed out mid-stream", provider=provider)
    return UpstreamError(f"{provider}: connection lost mid-stream ({_cause_name(exc)})",
                         code="upstream_disconnected", retryable=True, provider=provider)
