"""AnthropicAdapter through a real AsyncAnthropic over httpx2.MockTransport: wire, errors, lifetime."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import anthropic
import httpx2
import orjson
import pytest

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
from app.providers.anthropic import AnthropicAdapter, build_anthropic
from app.providers.anthropic_wire import AnthropicHttpAdapter
from app.providers.base import ProviderRequest
from app.providers.registry import build_registry
from app.settings import Settings
from tests.support import recordings
from tests.upstream_fakes import Body, drain, event_stream

RECORDING = {r.name: r for r in recordings("anthropic")}
Handler = Callable[[httpx2.Request], httpx2.Response]


def client_for(handler: Handler) -> anthropic.AsyncAnthropic:
    return anthropic.AsyncAnthropic(
        api_key="test-key", base_url="http://anthropic.test", max_retries=0,
        http_client=httpx2.AsyncClient(transport=httpx2.MockTransport(handler)),
    )


def request(**kw: Any) -> ProviderRequest:
    return ProviderRequest(model="claude-haiku-4-5", messages=(Message(role="user", content="Hi"),), **kw)


async def test_stream_reads_raw_bytes_and_sends_the_documented_body() -> None:
    seen: list[httpx2.Request] = []
    rec = RECORDING["thinking-then-tool-use"]
    body = Body([rec.body[i:i + 97] for i in range(0, len(rec.body), 97)])

    def handler(req: httpx2.Request) -> httpx2.Response:
        seen.append(req)
        return event_stream(body)

    adapter = AnthropicAdapter(client_for(handler))
    req = request(
        tools=(ToolSpec(name="fixed_version", description="The version"),), tool_choice="auto",
        options={"thinking": {"type": "enabled", "budget_tokens": 1024}, "metadata": {"user_id": "u1"}},
    )
    events = await drain(adapter, req)
    final = events[-1]
    assert isinstance(final, FinalEvent) and final.status == "ok" and final.stop_reason == "tool_calls"
    assert [c.name for c in final.message.tool_calls] == ["fixed_version"]
    assert final.message.reasoning[0].signature
    assert body.closed

    (sent,) = seen
    assert sent.url.path == "/v1/messages"
    wire = orjson.loads(sent.content)
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
    body = Body([RECORDING["thinking-signature"].body[:2000]])
    adapter = AnthropicAdapter(client_for(lambda req: event_stream(body)))
    stream = await adapter.open_stream(request())
    assert not body.closed
    await stream.aclose()
    assert body.closed
    await stream.aclose()  # idempotent


async def test_transport_failure_mid_body_ends_with_a_retryable_error() -> None:
    rec = RECORDING["text"]
    body = Body([rec.body[:600]], fail=httpx2.ReadError("connection reset"))
    events = await drain(AnthropicAdapter(client_for(lambda req: event_stream(body))), request())
    final = events[-1]
    assert isinstance(final, FinalEvent) and final.status == "error"
    assert final.error["code"] == "upstream_disconnected" and final.error["retryable"]
    assert body.closed


def status(code: int, etype: str, headers: dict[str, str] | None = None) -> Handler:
    payload = {"type": "error", "error": {"type": etype, "message": f"{etype} says no"}}
    return lambda req: httpx2.Response(code, json=payload, headers={"request-id": "req_1", **(headers or {})})


def raising(exc: Exception) -> Handler:
    def handler(req: httpx2.Request) -> httpx2.Response:
        raise exc
    return handler


@pytest.mark.parametrize(
    ("handler", "kind", "http", "code", "retryable"),
    [
        (status(400, "invalid_request_error"), UpstreamBadRequest, 400, "upstream_bad_request", False),
        (status(401, "authentication_error"), UpstreamError, 502, "upstream_auth", False),
        (status(403, "permission_error"), UpstreamError, 502, "upstream_auth", False),
        (status(404, "not_found_error"), UpstreamNotFound, 404, "model_not_found", False),
        (status(429, "rate_limit_error", {"retry-after": "7"}), UpstreamRateLimited, 429, "rate_limited", True),
        (status(529, "overloaded_error"), UpstreamError, 502, "upstream_overloaded", True),
        (status(500, "api_error"), UpstreamError, 502, "upstream_error", True),
        (status(503, "api_error"), UpstreamError, 502, "upstream_error", True),
        (raising(httpx2.ConnectError("connection refused")), UpstreamError, 502, "upstream_unavailable", True),
        (raising(httpx2.ReadTimeout("slow")), UpstreamTimeout, 504, "upstream_timeout", True),
    ],
    ids=["400", "401", "403", "404", "429", "529", "500", "503", "refused", "timeout"],
)
async def test_errors_before_the_body_are_raised_from_open_stream(
    handler: Handler, kind: type[GatewayError], http: int, code: str, retryable: bool
) -> None:
    adapter = AnthropicAdapter(client_for(handler))
    with pytest.raises(kind) as info:
        await adapter.open_stream(request())
    err = info.value
    assert (err.status, err.code, err.retryable) == (http, code, retryable)
    assert "test-key" not in str(err.to_dict())
    if http == 429:
        assert err.retry_after == "7"
    if http == 400:
        assert "invalid_request_error says no" in err.message
    with pytest.raises(kind):
        await adapter.generate([Message(role="user", content="Hi")], model="claude-haiku-4-5")


async def test_schema_violations_are_request_errors() -> None:
    adapter = AnthropicAdapter(client_for(lambda req: pytest.fail("no request may be sent")))
    with pytest.raises(RequestError):
        await adapter.open_stream(request(options={"model": "other"}))
    with pytest.raises(RequestError):
        await adapter.open_stream(request(tool_choice="required"))


async def test_generate_sends_the_request_and_returns_the_assistant_message() -> None:
    seen: list[dict[str, Any]] = []
    rec = RECORDING["thinking-then-tool-use"]

    def handler(req: httpx2.Request) -> httpx2.Response:
        seen.append(orjson.loads(req.content))
        return event_stream(Body([rec.body]))

    adapter = AnthropicAdapter(client_for(handler))
    message = await adapter.generate([Message(role="user", content="Hi")], model="claude-haiku-4-5",
                                     tools=[ToolSpec(name="add")], max_tokens=64, metadata={"user_id": "u"})
    (call,) = rec.expected["tool_calls"]
    assert message.content == "" and message.tool_calls == (ToolCall(id=call["id"], name=call["name"], arguments={}),)
    (thinking,) = message.reasoning
    assert thinking.text == rec.expected["reasoning"] and thinking.signature and thinking.provider == "anthropic"
    assert seen[0]["max_tokens"] == 64 and seen[0]["metadata"] == {"user_id": "u"} and seen[0]["stream"] is True
    assert seen[0]["tools"][0]["name"] == "add"
    with pytest.raises(AdapterError):
        await adapter.generate([Message(role="user", content="Hi")], model="m", stream=True)
    assert len(seen) == 1


async def test_a_json_answer_to_a_stream_request_is_an_upstream_error() -> None:
    handler = lambda req: httpx2.Response(200, json={"type": "message", "content": []})  # noqa: E731
    with pytest.raises(UpstreamError, match="expected an event stream"):
        await AnthropicAdapter(client_for(handler)).open_stream(request())


async def test_a_body_that_is_no_answer_is_an_upstream_error_from_generate() -> None:
    handler = lambda req: httpx2.Response(200, content=b"<html>", headers={"content-type": "text/html"})  # noqa: E731
    with pytest.raises(UpstreamError, match="ended before message_stop"):
        await AnthropicAdapter(client_for(handler)).generate([Message(role="user", content="Hi")], model="m")


def settings(**kw: Any) -> Settings:
    return Settings(anthropic_api_key=kw.pop("key", None), anthropic_base_url=kw.pop("base_url", None), **kw)


async def test_registry_serves_anthropic_only_with_a_key_or_a_client() -> None:
    assert build_registry(settings().provider_config()).get("anthropic") is None
    registry = build_registry(settings(key="sk-ant-test-000000", base_url="http://127.0.0.1:9").provider_config())
    adapter = registry.get("anthropic")
    assert isinstance(adapter, AnthropicHttpAdapter) and adapter.ready()  # the gateway's own client
    sent = adapter._build(ProviderRequest(model="claude", messages=(Message(role="user", content="hi"),)))
    assert sent.url == "http://127.0.0.1:9/v1/messages"
    await registry.aclose()

    injected = client_for(lambda req: httpx2.Response(500))
    built = build_anthropic(settings(key="sk-ant-test-000000").provider_config(), {"anthropic": injected})
    assert built["anthropic"]._client is injected  # injected clients win over settings
