"""The gateway's own client (app/providers/upstream.py: what the gateway builds from a key) against
the SDK-backed adapters (`client.post` with the raw-stream options, an injected SDK client).

On a loopback server that records every request (`upstream_fakes.FakeUpstream`), both send the
same request (URL, JSON body, the credential and wire headers; each client names itself and the SDK
adds its own bookkeeping) and map the same error answer to the same gateway error, the key never echoed.
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator
from typing import Any

import anthropic
import pytest
from pydantic import SecretStr

from app.core.errors import GatewayError
from app.core.messages import Message, ToolSpec
from app.providers.anthropic import AnthropicAdapter, build_anthropic
from app.providers.base import ProviderAdapter, ProviderRequest
from app.providers.config import CompatibleProvider, ProviderConfig
from app.providers.http import anthropic_http_client
from app.providers.openai_chat import OpenAIAdapter, build_openai, make_client
from app.providers.openai_responses import OpenAIResponsesAdapter, build_openai_responses
from tests.support import serve
from tests.upstream_fakes import FakeUpstream

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


def _adapters(kind: str, url: str) -> tuple[ProviderAdapter, ProviderAdapter]:
    """(gateway-built on its own client, an SDK client injected)."""
    direct: Any
    if kind == "chat":
        config = ProviderConfig(compatible=(CompatibleProvider(name="up", base_url=f"{url}/v1",
                                                               api_key_env="DIRECT_TEST_KEY"),))
        direct = build_openai(config, {})["up"]
        sdk = make_client(api_key="sk-up-direct-test", base_url=f"{url}/v1", config=config)
        return direct, OpenAIAdapter(sdk, name="up", max_tokens_field="max_tokens", owns_client=True)
    if kind == "responses":
        config = ProviderConfig(values={"openai_api_key": SecretStr("sk-direct-test"), "openai_base_url": f"{url}/v1"})
        direct = build_openai_responses(config, {})["openai-responses"]
        sdk = make_client(api_key="sk-direct-test", base_url=f"{url}/v1", config=config)
        return direct, OpenAIResponsesAdapter(sdk, owns_client=True)
    config = ProviderConfig(values={"anthropic_api_key": SecretStr("sk-ant-direct-test"), "anthropic_base_url": url})
    direct = build_anthropic(config, {})["anthropic"]
    sdk = anthropic.AsyncAnthropic(api_key="sk-ant-direct-test", base_url=url, max_retries=0,
                                   http_client=anthropic_http_client(connect_timeout=5, read_timeout=30))
    return direct, AnthropicAdapter(sdk, owns_client=True)


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
async def test_gateway_built_and_injected_clients_send_the_same_request(kind: str, body: bytes, monkeypatch) -> None:
    monkeypatch.setenv("DIRECT_TEST_KEY", "sk-up-direct-test")
    async with upstream(kind, body) as (fake, url):
        built, injected = _adapters(kind, url)
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
            await sdk.aclose()
    built, injected = errors
    assert type(built) is type(injected)
    if "unexpected" in body and kind == "anthropic":  # the SDK quotes a Python repr; the gateway the body
        assert built.to_dict()["message"] == 'anthropic: {"unexpected":"shape"}'
        assert {**built.to_dict(), "message": ""} == {**injected.to_dict(), "message": ""}
    else:
        assert built.to_dict() == injected.to_dict()
    assert built.to_dict()["upstream_status"] == status
    assert built.status == {429: 429, 400: 400}.get(status, 502)
    assert "sk-up-direct-test" not in str(built.to_dict())
