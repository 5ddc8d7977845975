"""The adapter the gateway builds from a key, on its own aiohttp session and on an injected one
(`upstream_fakes.http_adapter`, the one adapter-test setup): against a loopback server that records
every request (`upstream_fakes.FakeUpstream`), both send the same request (URL, JSON body, the
credential and wire headers), and each error answer maps to the gateway error written out below
(what the official SDKs raised for the same answers, mapped), the key never echoed.
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator
from typing import Any

import aiohttp
import pytest

from app.core.errors import GatewayError
from app.core.messages import Message, ToolSpec
from app.providers.base import ProviderAdapter, ProviderRequest
from tests.support import serve
from tests.upstream_fakes import FakeUpstream, http_adapter

# The headers that carry the credential and the wire's version: the same on both paths.
_WIRE = {"content-type", "authorization", "x-api-key", "anthropic-version"}

_CHAT = (b'data: {"id":"c","model":"m","choices":[{"index":0,"delta":{"content":"hi"},"finish_reason":"stop"}]}\n\n'
         b"data: [DONE]\n\n")
_RESPONSES = (b'event: response.completed\ndata: {"type":"response.completed","response":{"id":"r","status":'
              b'"completed","output":[],"usage":{"input_tokens":1,"output_tokens":1}}}\n\n')
_ANTHROPIC = (b'event: message_start\ndata: {"type":"message_start","message":{"id":"m","type":"message",'
              b'"role":"assistant","model":"claude","content":[],"usage":{"input_tokens":1,"output_tokens":0}}}\n\n'
              b'event: message_stop\ndata: {"type":"message_stop"}\n\n')


_PATHS = {"chat": "/v1/chat/completions", "responses": "/v1/responses", "anthropic": "/v1/messages"}


@contextlib.asynccontextmanager
async def upstream(kind: str, reply: Any) -> AsyncIterator[tuple[FakeUpstream, str]]:
    """A recording upstream answering `reply` to both requests of a test (built, then injected)."""
    fake = FakeUpstream(_PATHS[kind], [reply, reply])
    async with serve(fake.app()) as url:
        yield fake, url


_PROVIDERS = {"chat": "openai", "responses": "openai-responses", "anthropic": "anthropic"}


def _adapters(kind: str, url: str, session: aiohttp.ClientSession) -> tuple[ProviderAdapter, ProviderAdapter]:
    """(on a session of its own, on the injected `session`)."""
    provider = _PROVIDERS[kind]
    return http_adapter(provider, url), http_adapter(provider, url, session=session)


_REQUEST = ProviderRequest(
    model="m", messages=(Message(role="system", content="be brief"), Message(role="user", content="héllo ✓")),
    tools=(ToolSpec(name="lookup", description="d", parameters={
        "type": "object", "properties": {"n": {"type": "integer", "maximum": 10}}}),),
    max_tokens=64,
)


async def _open(adapter: ProviderAdapter) -> None:
    stream = await adapter.open_stream(_REQUEST)
    async for _ in stream:
        pass
    await stream.aclose()


@pytest.mark.parametrize(("kind", "body"), [("chat", _CHAT), ("responses", _RESPONSES), ("anthropic", _ANTHROPIC)])
async def test_own_and_injected_sessions_send_the_same_request(kind: str, body: bytes) -> None:
    async with upstream(kind, body) as (fake, url), aiohttp.ClientSession() as session:
        built, injected = _adapters(kind, url, session)
        try:
            for adapter in (built, injected):
                await _open(adapter)
        finally:
            await built.aclose()
            await injected.aclose()
    first, second = fake.requests
    assert first.url == second.url and first.url.endswith(_PATHS[kind])
    assert first.body == second.body
    assert {k: v for k, v in first.headers.items() if k in _WIRE} == \
        {k: v for k, v in second.headers.items() if k in _WIRE}


_ANSWERS: list[tuple[int, dict[str, Any]]] = [
    (429, {"error": {"message": "slow down", "type": "rate_limit_error", "code": "rate_limit_exceeded"}}),
    (400, {"error": {"message": "bad field", "type": "invalid_request_error", "code": "invalid_value"}}),
    (503, {"error": {"message": "overloaded", "type": "overloaded_error"}}),
    (401, {"error": {"message": "key sk-test is wrong", "type": "authentication_error"}}),
    (500, {"unexpected": "shape"}),
]
_REFUSED = "the provider refused the gateway's credentials (HTTP 401)"
_EXPECTED: dict[int, tuple[str, dict[str, Any]]] = {
    429: ("UpstreamRateLimited", {"code": "rate_limited", "message": "slow down", "retryable": True,
                                  "retry_after": "7"}),
    400: ("UpstreamBadRequest", {"code": "upstream_bad_request", "message": "bad field", "retryable": False}),
    503: ("UpstreamError", {"code": "upstream_error", "message": "overloaded", "retryable": True}),
    401: ("UpstreamError", {"code": "upstream_auth", "message": _REFUSED, "retryable": False}),
    500: ("UpstreamError", {"code": "upstream_error", "message": "HTTP 500", "retryable": True}),
}
"""Each answer's error as the SDK adapters mapped it (and the gateway's own client does)."""


def _expected(kind: str, status: int, body: dict[str, Any]) -> tuple[str, dict[str, Any]]:
    name, fields = _EXPECTED[status]
    provider = {"chat": "openai", "responses": "openai-responses", "anthropic": "anthropic"}[kind]
    message = fields["message"]
    if kind == "anthropic" and status == 500:  # the body as sent (the SDK quoted a Python repr of it)
        message = '{"unexpected":"shape"}'
    expected = {**fields, "message": f"{provider}: {message}", "provider": provider, "upstream_status": status}
    error = body.get("error") or {}
    if kind == "anthropic":  # Anthropic's type and request id; OpenAI's code
        expected["request_id"] = "req_1"
        if "type" in error:
            expected["upstream_type"] = error["type"]
    elif "code" in error:
        expected["upstream_code"] = error["code"]
    return name, expected


@pytest.mark.parametrize("kind", ["chat", "responses", "anthropic"])
@pytest.mark.parametrize(("status", "body"), _ANSWERS)
async def test_an_error_answer_maps_as_through_the_sdk(kind: str, status: int, body: dict[str, Any]) -> None:
    errors: list[GatewayError] = []
    async with upstream(kind, (status, body, {"retry-after": "7", "request-id": "req_1", "x-request-id": "req_1"})) \
            as (_, url), aiohttp.ClientSession() as session:
        built, injected = _adapters(kind, url, session)
        try:
            for adapter in (built, injected):
                with pytest.raises(GatewayError) as caught:
                    await _open(adapter)
                errors.append(caught.value)
        finally:
            await built.aclose()
            await injected.aclose()
    name, expected = _expected(kind, status, body)
    for error in errors:
        assert (type(error).__name__, error.to_dict()) == (name, expected)
    assert errors[0].status == {429: 429, 400: 400}.get(status, 502)
    assert "sk-test" not in str(errors[0].to_dict())
