"""Responses API request mapping, and the adapter the gateway builds from its key (its own aiohttp
client) against a loopback provider."""

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
from app.core.messages import AdapterError, Message, ReasoningBlock, ToolCall, ToolSpec
from app.providers.base import ProviderRequest
from app.providers.openai_responses import (
    build_openai_responses,
    messages_to_responses,
    responses_request,
    tool_choice_to_responses,
    tool_specs_to_responses,
)
from app.providers.registry import build_registry
from app.providers.upstream import HttpAdapter
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

RECORDING = {r.name: r for r in recordings("openai-responses")}
ADD = ToolSpec(name="add", description="Add", parameters={"type": "object", "properties": {"a": {"type": "integer"}}})
CONVERSATION = (
    Message(role="system", content="Be brief."),
    Message(role="user", content="2+2?"),
    Message(role="assistant", content="Let me add.", tool_calls=(ToolCall(id="call_1", name="add", arguments={"a": 2}),),
            reasoning=(ReasoningBlock(text="think", signature="sig", provider="anthropic"),)),
    Message(role="tool", tool_call_id="call_1", content="4"),
    Message(role="system", content="Answer in words."),
)


# -- request mapping --------------------------------------------------------------------------


def test_messages_to_responses_maps_a_tool_round_trip() -> None:
    instructions, items = messages_to_responses(CONVERSATION)
    assert instructions == "Be brief."
    assert items == [
        {"type": "message", "role": "user", "content": "2+2?"},
        {"type": "message", "role": "assistant", "content": "Let me add."},
        {"type": "function_call", "call_id": "call_1", "name": "add", "arguments": '{"a":2}'},
        {"type": "function_call_output", "call_id": "call_1", "output": "4"},
        {"type": "message", "role": "system", "content": "Answer in words."},
    ]


def test_messages_to_responses_refuses_what_is_outside_the_schema() -> None:
    with pytest.raises(AdapterError):
        messages_to_responses([{"role": "user", "content": "hi"}])  # type: ignore[list-item]
    with pytest.raises(AdapterError, match="at least one"):
        messages_to_responses([Message(role="system", content="only rules")])


def test_tool_specs_are_function_tools_not_strict() -> None:
    assert tool_specs_to_responses([ADD]) == [{
        "type": "function", "name": "add", "description": "Add", "strict": False,
        "parameters": {"type": "object", "properties": {"a": {"type": "integer"}}},
    }]
    with pytest.raises(AdapterError, match="duplicate"):
        tool_specs_to_responses([ADD, ADD])


@pytest.mark.parametrize(
    ("choice", "tools", "wire"),
    [(None, [ADD], None), ("auto", [ADD], "auto"), ("none", [ADD], "none"), ("required", [ADD], "required"),
     ("add", [ADD], {"type": "function", "name": "add"}), ("auto", [], None)],
)
def test_tool_choice(choice: str | None, tools: list[ToolSpec], wire: Any) -> None:
    assert tool_choice_to_responses(choice, tools) == wire


@pytest.mark.parametrize(("choice", "tools"), [("required", []), ("mul", [ADD])])
def test_tool_choice_errors(choice: str, tools: list[ToolSpec]) -> None:
    with pytest.raises(AdapterError):
        tool_choice_to_responses(choice, tools)


def request(model: str = "gpt-4o", **kw: Any) -> ProviderRequest:
    kw.setdefault("messages", (Message(role="user", content="Hi"),))
    return ProviderRequest(model=model, **kw)


def test_responses_request_body() -> None:
    body = responses_request(request(messages=CONVERSATION, tools=(ADD,), tool_choice="add", max_tokens=64,
                                     temperature=0.3))
    assert body["model"] == "gpt-4o" and body["stream"] is True
    assert body["instructions"] == "Be brief."
    assert body["temperature"] == 0.3 and body["max_output_tokens"] == 64
    assert body["tool_choice"] == {"type": "function", "name": "add"}
    assert [t["name"] for t in body["tools"]] == ["add"]


def test_reasoning_options_and_temperature_on_reasoning_models() -> None:
    body = responses_request(request(options={"reasoning_effort": "high", "reasoning_summary": "detailed"}))
    assert body["reasoning"] == {"effort": "high", "summary": "detailed"} and "temperature" not in body
    for model in ("o3-mini", "gpt-5", "gpt-5-nano", "o4-mini"):
        assert "temperature" not in responses_request(request(model, temperature=0.0))
    assert responses_request(request("gpt-4.1", temperature=0.0))["temperature"] == 0.0
    assert "temperature" not in responses_request(request("gpt-4.1"))  # none asked for: none invented


def test_provider_options_pass_through_and_may_drop_fields() -> None:
    body = responses_request(request(options={"store": False, "include": ["reasoning.encrypted_content"],
                                              "temperature": None, "builtin_tools": [{"type": "web_search"}]},
                                     tools=(ADD,), tool_choice="required"))
    assert body["store"] is False and body["include"] == ["reasoning.encrypted_content"]
    assert "temperature" not in body
    assert [t.get("name", t["type"]) for t in body["tools"]] == ["add", "web_search"]
    only_builtin = responses_request(request(options={"builtin_tools": [{"type": "web_search"}]},
                                             tool_choice="required"))
    assert only_builtin["tool_choice"] == "required"


@pytest.mark.parametrize("options", [{"input": []}, {"model": "x"}, {"stream": False}, {"tools": []},
                                     {"instructions": "x"}, {"builtin_tools": "web_search"}])
def test_provider_options_cannot_override_what_the_gateway_owns(options: dict[str, Any]) -> None:
    with pytest.raises(AdapterError):
        responses_request(request(options=options))


# -- the adapter the gateway builds from its key, against a loopback provider ---------------------


@contextlib.asynccontextmanager
async def responses_on(reply: Callable[[Recorded], Response], **config: Any) -> AsyncIterator[tuple[Any, Scripted]]:
    fake = Scripted(reply)
    async with serve(fake.app()) as url:
        adapter = http_adapter("openai-responses", url, **config)
        try:
            yield adapter, fake
        finally:
            await adapter.aclose()


async def test_stream_posts_to_responses_and_reads_raw_bytes() -> None:
    body = RECORDING["function-call"].body
    async with responses_on(lambda _: sse(body, step=100)) as (adapter, fake):
        events = await drain(adapter, request(messages=CONVERSATION, tools=(ADD,), options={"store": False}))
    final = events[-1].data()
    assert final["status"] == "ok" and final["stop_reason"] == "tool_calls"
    assert final["message"]["tool_calls"] == [{"id": "call_kL0PCQV7M2WMoVX8V8OtYSAL", "name": "get_capital",
                                               "arguments": {"country": "France"}}]
    (req,) = fake.requests
    assert req.url == "/v1/responses" and req.headers["authorization"] == "Bearer sk-test"
    assert req.body == responses_request(request(messages=CONVERSATION, tools=(ADD,), options={"store": False}))


async def test_aclose_closes_the_upstream_response() -> None:
    closed = asyncio.Event()
    async with responses_on(lambda _: sse(RECORDING["text"].body[:200], hold=True, closed=closed)) as (adapter, _):
        stream = await adapter.open_stream(request())
        await stream.aclose()
        await asyncio.wait_for(closed.wait(), 5)  # the provider sees the gateway let go


async def test_transport_failure_mid_body_ends_with_a_retryable_error_keeping_text() -> None:
    raw = RECORDING["text"].body
    closed = asyncio.Event()
    async with responses_on(lambda _: cut(raw[:raw.index(b"event: response.output_text.done")], closed=closed)) \
            as (adapter, _):
        events = await drain(adapter, request())
    final = events[-1].data()
    assert final["status"] == "error" and final["error"]["code"] == "upstream_disconnected"
    assert final["error"]["retryable"] is True
    assert final["message"]["content"] == "The capital of France is Paris."
    assert closed.is_set()


def status(code: int, error: dict[str, Any], headers: dict[str, str] | None = None) -> Callable[[Recorded], Response]:
    return lambda _: answer(code, {"error": error}, headers)


@pytest.mark.parametrize(
    ("reply", "kind", "http", "code"),
    [
        (status(400, {"message": "bad input", "type": "invalid_request_error"}), UpstreamBadRequest, 400,
         "upstream_bad_request"),
        (status(401, {"message": "bad key sk-abc", "type": "invalid_request_error"}), UpstreamError, 502,
         "upstream_auth"),
        (status(403, {"message": "forbidden"}), UpstreamError, 502, "upstream_auth"),
        (status(404, {"message": "no such model", "code": "model_not_found"}), UpstreamNotFound, 404,
         "model_not_found"),
        (status(429, {"message": "slow down", "code": "rate_limit_exceeded"}, {"retry-after": "7"}),
         UpstreamRateLimited, 429, "rate_limited"),
        (status(500, {"message": "oops", "type": "server_error"}), UpstreamError, 502, "upstream_error"),
        (status(503, {"message": "unavailable"}), UpstreamError, 502, "upstream_error"),
        (lambda _: silent(), UpstreamTimeout, 504, "upstream_timeout"),  # silence before the head
    ],
)
async def test_errors_before_the_body_are_raised_from_open_stream(
    reply: Callable[[Recorded], Response], kind: type[GatewayError], http: int, code: str
) -> None:
    async with responses_on(reply, read_timeout=read_timeout_for(code)) as (adapter, _):
        with pytest.raises(kind) as info:
            await drain(adapter, request())
    assert (info.value.status, info.value.code) == (http, code)
    assert "sk-abc" not in str(info.value.to_dict())  # credentials failures do not echo upstream text
    if code == "rate_limited":
        assert info.value.to_dict()["retry_after"] == "7"
    if http >= 500 and code != "upstream_auth":
        assert info.value.retryable


async def test_a_refused_connection_is_upstream_unavailable() -> None:
    adapter = http_adapter("openai-responses", closed_port_url())
    with pytest.raises(UpstreamError) as info:
        await adapter.open_stream(request())
    assert (info.value.status, info.value.code) == (502, "upstream_unavailable") and info.value.retryable
    await adapter.aclose()


async def test_json_instead_of_an_event_stream_is_an_upstream_error() -> None:
    async with responses_on(lambda _: answer(200, {"id": "resp_1"})) as (adapter, _):
        with pytest.raises(UpstreamError, match="expected an event stream"):
            await adapter.open_stream(request())


async def test_schema_violations_are_request_errors() -> None:
    async with responses_on(lambda _: pytest.fail("no request expected")) as (adapter, fake):
        with pytest.raises(RequestError):
            await adapter.open_stream(request(tool_choice="missing", tools=(ADD,)))
        with pytest.raises(RequestError):
            await adapter.open_stream(request(options={"input": []}))
    assert fake.requests == []


async def test_generate_returns_the_assistant_message() -> None:
    async with responses_on(lambda _: sse(RECORDING["text"].body)) as (adapter, fake):
        message = await adapter.generate(CONVERSATION, model="gpt-4o")
    assert message == Message(role="assistant", content=RECORDING["text"].expected["text"])
    assert fake.requests[0].body["stream"] is True and fake.requests[0].body["instructions"] == "Be brief."
    async with responses_on(lambda _: answer(200, [])) as (adapter, _):
        with pytest.raises(UpstreamError, match="expected an event stream"):
            await adapter.generate(request().messages, model="m")


def settings(**kw: Any) -> Settings:
    return Settings(_env_file=None, **kw)  # type: ignore[call-arg]


async def test_registry_serves_openai_responses_with_a_key_and_an_injected_session(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    assert build_openai_responses(settings().provider_config(), {}) == {}
    async with aiohttp.ClientSession() as shared, aiohttp.ClientSession() as own:
        assert build_openai_responses(settings().provider_config(), {"openai": shared}) == {}  # no credential
        config = settings(openai_api_key="sk-test").provider_config()
        assert build_openai_responses(config, {"openai": shared})["openai-responses"]._session is shared  # type: ignore[attr-defined]
        chosen = build_openai_responses(config, {"openai": shared, "openai-responses": own})
        assert chosen["openai-responses"]._session is own  # type: ignore[attr-defined]
    registry = build_registry(settings(openai_api_key="sk-from-settings").provider_config())
    adapter = registry.get("openai-responses")
    assert isinstance(adapter, HttpAdapter) and adapter.ready()  # the gateway's own client (upstream.py)
    assert registry.resolve("openai-responses/gpt-5")[2] == "gpt-5"
    await registry.aclose()
