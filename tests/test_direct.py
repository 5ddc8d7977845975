"""The prepared streamed request (app/providers/direct.py) against the SDK's own `client.post`.

For the three SDK-backed adapters, a client the gateway builds opens its streams through
`DirectPost`; the same client without it goes through the SDK. On a loopback server that records
every request (`upstream_fakes.FakeUpstream`), both must send the same request (method, URL, JSON body, headers apart from the
SDK's per-call bookkeeping) and map the same error answer to the same gateway error.
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator
from typing import Any

import orjson
import pytest
from pydantic import SecretStr

from app.core.errors import GatewayError
from app.core.messages import Message, ToolSpec
from app.providers.anthropic import AnthropicAdapter, build_anthropic
from app.providers.base import ProviderAdapter, ProviderRequest
from app.providers.config import CompatibleProvider, ProviderConfig
from app.providers.direct import _json
from app.providers.openai_chat import OpenAIAdapter, build_openai
from app.providers.openai_responses import OpenAIResponsesAdapter, build_openai_responses
from tests.support import serve
from tests.upstream_fakes import FakeUpstream, sends_counted

# Headers the SDK computes per call (attempt count, timeouts as sent, its raw-response marker).
_PER_CALL = {"x-stainless-retry-count", "x-stainless-timeout", "x-stainless-read-timeout",
             "x-stainless-raw-response"}

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
    """A recording upstream answering `reply` to both requests of a test (prepared, then SDK)."""
    fake = FakeUpstream(_PATHS[kind], [reply, reply])
    async with serve(fake.app()) as url:
        yield fake, url


def _adapters(kind: str, url: str) -> tuple[ProviderAdapter, ProviderAdapter]:
    """(gateway-built with the prepared request, the same client through the SDK's post)."""
    direct: Any
    if kind == "chat":
        config = ProviderConfig(compatible=(CompatibleProvider(name="up", base_url=f"{url}/v1",
                                                               api_key_env="DIRECT_TEST_KEY"),))
        direct = build_openai(config, {})["up"]
        return direct, OpenAIAdapter(direct._client, name="up", max_tokens_field="max_tokens")
    if kind == "responses":
        config = ProviderConfig(openai_api_key=SecretStr("sk-direct-test"), openai_base_url=f"{url}/v1")
        direct = build_openai_responses(config, {})["openai-responses"]
        return direct, OpenAIResponsesAdapter(direct._client)
    config = ProviderConfig(anthropic_api_key=SecretStr("sk-ant-direct-test"), anthropic_base_url=url)
    direct = build_anthropic(config, {})["anthropic"]
    return direct, AnthropicAdapter(direct._client)


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
async def test_the_prepared_request_is_the_sdks_request(kind: str, body: bytes, monkeypatch) -> None:
    monkeypatch.setenv("DIRECT_TEST_KEY", "sk-up-direct-test")
    async with upstream(kind, body) as (fake, url):
        direct, sdk = _adapters(kind, url)
        assert direct._direct is not None and sdk._direct is None  # type: ignore[attr-defined]
        try:
            await _open(direct)
            await _open(sdk)
        finally:
            await direct.aclose()
    prepared, through_sdk = fake.requests  # both POSTs to the one path it serves
    assert prepared.url == through_sdk.url == _PATHS[kind]
    assert prepared.body == through_sdk.body
    assert prepared.body["stream"] is True and prepared.body["model"] == "m"

    def comparable(headers: dict[str, str]) -> dict[str, str]:
        return {k: v for k, v in headers.items() if k not in _PER_CALL and k != "content-length"}

    assert comparable(prepared.headers) == comparable(through_sdk.headers)
    key = {"chat": "sk-up-direct-test", "responses": "sk-direct-test", "anthropic": "sk-ant-direct-test"}[kind]
    assert any(key in value for value in prepared.headers.values())  # the key, as the SDK sends it


@pytest.mark.parametrize("kind", ["chat", "responses", "anthropic"])
@pytest.mark.parametrize(("status", "body"), [
    (429, {"error": {"message": "slow down", "type": "rate_limit_error", "code": "rate_limit_exceeded"}}),
    (400, {"error": {"message": "bad field", "type": "invalid_request_error", "code": "invalid_value"}}),
    (503, {"error": {"message": "overloaded", "type": "overloaded_error"}}),
    (401, {"error": {"message": "key sk-up-direct-test is wrong", "type": "authentication_error"}}),
    (500, {"unexpected": "shape"}),
])
async def test_an_error_answer_maps_as_through_the_sdk(kind: str, status: int, body: dict, monkeypatch) -> None:
    monkeypatch.setenv("DIRECT_TEST_KEY", "sk-up-direct-test")
    errors: list[GatewayError] = []
    async with upstream(kind, (status, body, {"retry-after": "7", "request-id": "req_1", "x-request-id": "req_1"})) \
            as (_, url):
        direct, sdk = _adapters(kind, url)
        try:
            for adapter in (direct, sdk):
                with pytest.raises(GatewayError) as caught:
                    await _open(adapter)
                errors.append(caught.value)
        finally:
            await direct.aclose()
    prepared, through_sdk = errors
    assert type(prepared) is type(through_sdk)
    assert prepared.to_dict() == through_sdk.to_dict()
    assert prepared.to_dict()["upstream_status"] == status
    assert "sk-up-direct-test" not in str(prepared.to_dict())


def test_a_body_orjson_refuses_is_still_sent_whole() -> None:
    body = {"model": "m", "seed": 2**70, "text": "héllo"}
    assert orjson.loads(_json({"model": "m"})) == {"model": "m"}
    assert _json(body) == b'{"model":"m","seed":1180591620717411303424,"text":"h\xc3\xa9llo"}'


async def test_the_prepared_request_goes_to_the_transport_not_through_the_clients_send(monkeypatch) -> None:
    monkeypatch.setenv("DIRECT_TEST_KEY", "sk-up-direct-test")
    sent = sends_counted(monkeypatch)
    async with upstream("chat", _CHAT) as (fake, url):
        direct, sdk = _adapters("chat", url)
        try:
            await _open(direct)
            assert sent == [] and len(fake.requests) == 1  # on the wire
            await _open(sdk)
            assert len(sent) == 1  # the SDK's path goes through the client
        finally:
            await direct.aclose()


async def test_a_redirect_answered_on_the_wire_is_followed_by_the_client() -> None:
    from starlette.applications import Starlette
    from starlette.requests import Request
    from starlette.responses import RedirectResponse, Response
    from starlette.routing import Route

    target = FakeUpstream("/v2/chat/completions", [_CHAT])

    async def moved(request: Request) -> Response:
        return RedirectResponse("/v2/chat/completions", status_code=307)

    app = Starlette(routes=[Route("/v1/chat/completions", moved, methods=["POST"]),
                            Route(target.path, target.handle, methods=["POST"])])
    async with serve(app) as url:
        config = ProviderConfig(compatible=(CompatibleProvider(name="up", base_url=f"{url}/v1"),))
        adapter: Any = build_openai(config, {})["up"]
        try:
            stream = await adapter.open_stream(_REQUEST)
            patches = [batch async for batch in stream]
            await stream.aclose()
        finally:
            await adapter.aclose()
    assert patches and target.requests[0].body["model"] == "m"  # the body went along (307)
