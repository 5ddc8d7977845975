"""Anthropic on the gateway's own client (the adapter built from its key) against a loopback
provider: wire, errors, lifetime; an injected `aiohttp.ClientSession`."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Callable
from typing import Any

import aiohttp
import pytest
from starlette.responses import Response

from app.core.errors import (
    GatewayError,
    RequestError,
    UpstreamBadRequest,
    UpstreamError,
    UpstreamNotFound,
    UpstreamRateLimited,
    UpstreamTimeout,
)
from app.core.events import FinalEvent
from app.core.messages import AdapterError, Message, ToolCall, ToolSpec
from app.providers.anthropic import build_anthropic
from app.providers.anthropic_wire import AnthropicHttpAdapter
from app.providers.base import ProviderRequest
from app.providers.registry import build_registry
from app.settings import Settings
from tests.support import recordings, serve
from tests.upstream_fakes import (
    Recorded,
    Scripted,
    answer,
    closed_port_url,
    cut,
    drain,
    http_adapter,
    read_timeout_for,
    silent,
    sse,
)

RECORDING = {r.name: r for r in recordings("anthropic")}
Reply = Callable[[Recorded], Response]


@contextlib.asynccontextmanager
async def anthropic_on(reply: Reply, **config: Any) -> AsyncIterator[tuple[Any, Scripted]]:
    fake = Scripted(reply)
    async with serve(fake.app()) as url:
        adapter = http_adapter("anthropic", url, **config)
        try:
            yield adapter, fake
        finally:
            await adapter.aclose()


def request(**kw: Any) -> ProviderRequest:
    return ProviderRequest(model="claude-haiku-4-5", messages=(Message(role="user", content="Hi"),), **kw)


async def test_stream_reads_raw_bytes_and_sends_the_documented_body() -> None:
    rec = RECORDING["thinking-then-tool-use"]
    closed = asyncio.Event()
    req = request(
        tools=(ToolSpec(name="fixed_version", description="The version"),), tool_choice="auto",
        options={"thinking": {"type": "enabled", "budget_tokens": 1024}, "metadata": {"user_id": "u1"}},
    )
    async with anthropic_on(lambda _: sse(rec.body, step=97, closed=closed)) as (adapter, fake):
        events = await drain(adapter, req)
        await asyncio.wait_for(closed.wait(), 5)
    final = events[-1]
    assert isinstance(final, FinalEvent) and final.status == "ok" and final.stop_reason == "tool_calls"
    assert [c.name for c in final.message.tool_calls] == ["fixed_version"]
    assert final.message.reasoning[0].signature
    (sent,) = fake.requests
    assert sent.url == "/v1/messages" and sent.headers["authorization"] == "Bearer test-key"
    wire = sent.body
    assert wire == {
        "model": "claude-haiku-4-5",
        "max_tokens": 1024 + 4096,  # the thinking budget plus the default answer room
        "messages": [{"role": "user", "content": "Hi"}],
        "stream": True,
        "tools": [{"name": "fixed_version", "description": "The version",
                   "input_schema": {"type": "object", "properties": {}}}],
        "tool_choice": {"type": "auto"},
        "thinking": {"type": "enabled", "budget_tokens": 1024},
        "metadata": {"user_id": "u1"},
    }
    assert "temperature" not in wire  # API 2026-10-21 refuses it (module docstring)


async def test_aclose_closes_the_upstream_response() -> None:
    closed = asyncio.Event()
    body = RECORDING["thinking-signature"].body[:2000]
    async with anthropic_on(lambda _: sse(body, hold=True, closed=closed)) as (adapter, _):
        stream = await adapter.open_stream(request())
        assert not closed.is_set()
        await stream.aclose()
        await asyncio.wait_for(closed.wait(), 5)  # the provider sees the gateway let go
        await stream.aclose()  # idempotent


async def test_transport_failure_mid_body_ends_with_a_retryable_error() -> None:
    rec = RECORDING["text"]
    closed = asyncio.Event()
    async with anthropic_on(lambda _: cut(rec.body[:600], closed=closed)) as (adapter, _):
        events = await drain(adapter, request())
    final = events[-1]
    assert isinstance(final, FinalEvent) and final.status == "error"
    assert final.error["code"] == "upstream_disconnected" and final.error["retryable"]
    assert closed.is_set()


def status(code: int, etype: str, headers: dict[str, str] | None = None) -> Reply:
    payload = {"type": "error", "error": {"type": etype, "message": f"{etype} says no"}}
    return lambda _: answer(code, payload, {"request-id": "req_1", **(headers or {})})


@pytest.mark.parametrize(
    ("reply", "kind", "http", "code", "retryable"),
    [
        (status(400, "invalid_request_error"), UpstreamBadRequest, 400, "upstream_bad_request", False),
        (status(401, "authentication_error"), UpstreamError, 502, "upstream_auth", False),
        (status(403, "permission_error"), UpstreamError, 502, "upstream_auth", False),
        (status(404, "not_found_error"), UpstreamNotFound, 404, "model_not_found", False),
        (status(429, "rate_limit_error", {"retry-after": "7"}), UpstreamRateLimited, 429, "rate_limited", True),
        (status(529, "overloaded_error"), UpstreamError, 502, "upstream_overloaded", True),
        (status(500, "api_error"), UpstreamError, 502, "upstream_error", True),
        (status(503, "api_error"), UpstreamError, 502, "upstream_error", True),
        (None, UpstreamError, 502, "upstream_unavailable", True),  # a closed port: refused
        (lambda _: silent(), UpstreamTimeout, 504, "upstream_timeout", True),  # silence before the head
    ],
    ids=["400", "401", "403", "404", "429", "529", "500", "503", "refused", "timeout"],
)
async def test_errors_before_the_body_are_raised_from_open_stream(
    reply: Reply | None, kind: type[GatewayError], http: int, code: str, retryable: bool
) -> None:
    async with anthropic_on(reply or (lambda _: answer(200, {})), read_timeout=read_timeout_for(code)) as (adapter, _):
        if reply is None:
            adapter = http_adapter("anthropic", closed_port_url())
        with pytest.raises(kind) as info:
            await drain(adapter, request())
        with pytest.raises(kind):
            await adapter.generate([Message(role="user", content="Hi")], model="claude-haiku-4-5")
        await adapter.aclose()
    err = info.value
    assert (err.status, err.code, err.retryable) == (http, code, retryable)
    assert "test-key" not in str(err.to_dict())
    if http == 429:
        assert err.retry_after == "7"
    if http == 400:
        assert "invalid_request_error says no" in err.message


async def test_schema_violations_are_request_errors() -> None:
    async with anthropic_on(lambda _: pytest.fail("no request may be sent")) as (adapter, fake):
        with pytest.raises(RequestError):
            await adapter.open_stream(request(options={"model": "other"}))
        with pytest.raises(RequestError):
            await adapter.open_stream(request(tool_choice="required"))
    assert fake.requests == []


async def test_generate_sends_the_request_and_returns_the_assistant_message() -> None:
    rec = RECORDING["thinking-then-tool-use"]
    async with anthropic_on(lambda _: sse(rec.body)) as (adapter, fake):
        message = await adapter.generate([Message(role="user", content="Hi")], model="claude-haiku-4-5",
                                         tools=[ToolSpec(name="add")], max_tokens=64, metadata={"user_id": "u"})
        with pytest.raises(AdapterError):
            await adapter.generate([Message(role="user", content="Hi")], model="m", stream=True)
    seen = [r.body for r in fake.requests]
    (call,) = rec.expected["tool_calls"]
    assert message.content == "" and message.tool_calls == (ToolCall(id=call["id"], name=call["name"], arguments={}),)
    (thinking,) = message.reasoning
    assert thinking.text == rec.expected["reasoning"] and thinking.signature and thinking.provider == "anthropic"
    assert seen[0]["max_tokens"] == 64 and seen[0]["metadata"] == {"user_id": "u"} and seen[0]["stream"] is True
    assert seen[0]["tools"][0]["name"] == "add"
    assert len(seen) == 1


async def test_a_json_answer_to_a_stream_request_is_an_upstream_error() -> None:
    async with anthropic_on(lambda _: answer(200, {"type": "message", "content": []})) as (adapter, _):
        with pytest.raises(UpstreamError, match="expected an event stream"):
            await adapter.open_stream(request())


async def test_a_body_that_is_no_answer_is_an_upstream_error_from_generate() -> None:
    async with anthropic_on(lambda _: answer(200, b"<html>", {"content-type": "text/html"})) as (adapter, _):
        with pytest.raises(UpstreamError, match="ended before message_stop"):
            await adapter.generate([Message(role="user", content="Hi")], model="m")


def settings(**kw: Any) -> Settings:
    return Settings(anthropic_api_key=kw.pop("key", None), anthropic_base_url=kw.pop("base_url", None), **kw)


async def test_registry_serves_anthropic_only_with_a_key_and_uses_an_injected_session() -> None:
    assert build_registry(settings().provider_config()).get("anthropic") is None
    registry = build_registry(settings(key="sk-ant-test-000000", base_url="http://127.0.0.1:9").provider_config())
    adapter = registry.get("anthropic")
    assert isinstance(adapter, AnthropicHttpAdapter) and adapter.ready()  # the gateway's own client
    sent = adapter.plan(ProviderRequest(model="claude", messages=(Message(role="user", content="hi"),))).request
    assert sent.url == "http://127.0.0.1:9/v1/messages"
    await registry.aclose()

    async with aiohttp.ClientSession() as injected:
        assert build_anthropic(settings().provider_config(), {"anthropic": injected}) == {}  # a session is no key
        built = build_anthropic(settings(key="sk-ant-test-000000").provider_config(), {"anthropic": injected})
        assert built["anthropic"]._session is injected  # type: ignore[attr-defined]
        await built["anthropic"].aclose()  # type: ignore[attr-defined]
        assert not injected.closed  # injected: the caller's to close
