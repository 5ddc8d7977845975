"""Gemini request mapping, and the adapter the gateway builds from its key (its own aiohttp client)
against a loopback provider."""

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
from app.providers.config import ProviderConfig
from app.providers.gemini import (
    build_gemini,
    endpoint,
    gemini_request,
    messages_to_gemini,
    model_url,
    tool_choice_to_gemini,
    tool_specs_to_gemini,
    upstream_request,
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

RECORDING = {r.name: r for r in recordings("gemini")}
Reply = Callable[[Recorded], Response]
WEATHER = ToolSpec(name="get_weather", description="Weather for a city",
                   parameters={"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]})
CONVERSATION = (
    Message(role="system", content="Be brief."),
    Message(role="user", content="Weather in Paris and Rome?"),
    Message(role="assistant", content="Checking.", tool_calls=(
        ToolCall(id="call_r1_0", name="get_weather", arguments={"city": "Paris"}),
        ToolCall(id="call_r1_1", name="get_weather", arguments={"city": "Rome"})),
        reasoning=(ReasoningBlock(text="thinking", provider="gemini"),
                   ReasoningBlock(signature="anthropic-sig", provider="anthropic"),
                   ReasoningBlock(signature="sig-1", provider="gemini"))),
    Message(role="tool", tool_call_id="call_r1_0", content='{"temp_c": 21}'),
    Message(role="tool", tool_call_id="call_r1_1", content="sunny"),
    Message(role="system", content="Use Celsius."),
)


# -- request mapping --------------------------------------------------------------------------


def test_messages_to_gemini_maps_a_tool_round_trip() -> None:
    system, contents = messages_to_gemini(CONVERSATION)
    assert system == {"parts": [{"text": "Be brief."}, {"text": "Use Celsius."}]}
    assert contents == [
        {"role": "user", "parts": [{"text": "Weather in Paris and Rome?"}]},
        {"role": "model", "parts": [
            {"text": "Checking."},
            {"functionCall": {"name": "get_weather", "args": {"city": "Paris"}}, "thoughtSignature": "sig-1"},
            {"functionCall": {"name": "get_weather", "args": {"city": "Rome"}}},
        ]},
        {"role": "user", "parts": [
            {"functionResponse": {"name": "get_weather", "response": {"temp_c": 21}}},
            {"functionResponse": {"name": "get_weather", "response": {"output": "sunny"}}},
        ]},
    ]


def test_signature_of_a_text_only_answer_goes_on_its_text() -> None:
    answer = Message(role="assistant", content="Hi", reasoning=(ReasoningBlock(signature="s", provider="gemini"),))
    _, contents = messages_to_gemini([Message(role="user", content="Yo"), answer, Message(role="user", content="And?")])
    assert contents[1] == {"role": "model", "parts": [{"text": "Hi", "thoughtSignature": "s"}]}


def test_tool_result_needs_a_name() -> None:
    orphan = Message(role="tool", tool_call_id="call_x", content="1")
    with pytest.raises(AdapterError, match="answers no earlier"):
        messages_to_gemini([Message(role="user", content="hi"), orphan])
    named = Message(role="tool", tool_call_id="call_x", name="lookup", content="1")
    _, contents = messages_to_gemini([Message(role="user", content="hi"), named])
    assert contents[-1]["parts"][-1] == {"functionResponse": {"name": "lookup", "response": {"output": "1"}}}
    with pytest.raises(AdapterError, match="at least one"):
        messages_to_gemini([Message(role="system", content="rules only")])


def test_tool_specs_use_json_schema_declarations() -> None:
    assert tool_specs_to_gemini([WEATHER]) == [{
        "name": "get_weather", "description": "Weather for a city",
        "parametersJsonSchema": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
    }]
    with pytest.raises(AdapterError, match="duplicate"):
        tool_specs_to_gemini([WEATHER, WEATHER])


@pytest.mark.parametrize(
    ("choice", "tools", "wire"),
    [(None, [WEATHER], None), ("auto", [WEATHER], {"functionCallingConfig": {"mode": "AUTO"}}),
     ("none", [WEATHER], {"functionCallingConfig": {"mode": "NONE"}}),
     ("required", [WEATHER], {"functionCallingConfig": {"mode": "ANY"}}),
     ("get_weather", [WEATHER], {"functionCallingConfig": {"mode": "ANY", "allowedFunctionNames": ["get_weather"]}}),
     ("auto", [], None)],
)
def test_tool_choice(choice: str | None, tools: list[ToolSpec], wire: Any) -> None:
    assert tool_choice_to_gemini(choice, tools) == wire


@pytest.mark.parametrize(("choice", "tools"), [("required", []), ("nope", [WEATHER])])
def test_tool_choice_errors(choice: str, tools: list[ToolSpec]) -> None:
    with pytest.raises(AdapterError):
        tool_choice_to_gemini(choice, tools)


def request(model: str = "gemini-2.5-flash", **kw: Any) -> ProviderRequest:
    kw.setdefault("messages", (Message(role="user", content="Hi"),))
    return ProviderRequest(model=model, **kw)


def test_gemini_request_body_and_options() -> None:
    body = gemini_request(request(
        messages=CONVERSATION, tools=(WEATHER,), tool_choice="auto", temperature=0.4, max_tokens=99,
        options={"generationConfig": {"thinkingConfig": {"includeThoughts": True}, "temperature": None},
                 "builtin_tools": [{"googleSearch": {}}], "safetySettings": [{"category": "X", "threshold": "Y"}]}))
    assert body["generationConfig"] == {"maxOutputTokens": 99, "thinkingConfig": {"includeThoughts": True}}
    assert body["tools"] == [{"functionDeclarations": tool_specs_to_gemini([WEATHER])}, {"googleSearch": {}}]
    assert body["toolConfig"] == {"functionCallingConfig": {"mode": "AUTO"}}
    assert body["safetySettings"] == [{"category": "X", "threshold": "Y"}]
    assert body["systemInstruction"]["parts"][0] == {"text": "Be brief."}
    assert gemini_request(request())["generationConfig"] == {}  # none asked for: none invented
    plain = gemini_request(request(temperature=0.0))
    assert plain == {"contents": [{"role": "user", "parts": [{"text": "Hi"}]}], "generationConfig": {"temperature": 0.0}}


@pytest.mark.parametrize("options", [{"contents": []}, {"tools": []}, {"systemInstruction": {}},
                                     {"builtin_tools": "googleSearch"}, {"generationConfig": 3}])
def test_provider_options_cannot_override_what_the_gateway_owns(options: dict[str, Any]) -> None:
    with pytest.raises(AdapterError):
        gemini_request(request(options=options))


# -- the adapter the gateway builds from its key, against a loopback provider ---------------------


@contextlib.asynccontextmanager
async def gemini_on(reply: Reply, **config: Any) -> AsyncIterator[tuple[Any, Scripted]]:
    fake = Scripted(reply)
    async with serve(fake.app()) as url:
        adapter = http_adapter("gemini", url, **config)
        try:
            yield adapter, fake
        finally:
            await adapter.aclose()


async def test_stream_posts_to_stream_generate_content_and_reads_raw_bytes() -> None:
    raw = RECORDING["function-call"].body
    async with gemini_on(lambda _: sse(raw, step=50)) as (adapter, fake):
        events = await drain(adapter, request(messages=CONVERSATION, tools=(WEATHER,)))
    final = events[-1].data()
    assert final["status"] == "ok" and final["stop_reason"] == "tool_calls"
    assert final["message"]["tool_calls"] == [{"id": "call_1lpeaMTxIpW1nvgP-O3vwQY_0", "name": "get_capital",
                                               "arguments": {"country": "France"}}]
    (req,) = fake.requests
    assert req.url == "/v1beta/models/gemini-2.5-flash:streamGenerateContent?alt=sse"
    assert req.headers["x-goog-api-key"] == "gm-test-key" and req.headers["content-type"] == "application/json"
    assert req.body == gemini_request(request(messages=CONVERSATION, tools=(WEATHER,)))
    default = upstream_request(request(), ProviderConfig(values={"gemini_api_key": "k"}))
    assert default.url == ("https://generativelanguage.googleapis.com/v1beta/models/gemini-2.5-flash"
                           ":streamGenerateContent?alt=sse")


@pytest.mark.parametrize(
    ("base", "model", "url"),
    [("http://127.0.0.1:9/", "models/gemini-pro", "http://127.0.0.1:9/v1beta/models/gemini-pro:generateContent"),
     ("http://proxy/google/v1", "gemini-pro", "http://proxy/google/v1/models/gemini-pro:generateContent"),
     ("https://europe-west4-aiplatform.googleapis.com/v1/projects/p/locations/europe-west4/publishers/google",
      "gemini-2.5-pro", "https://europe-west4-aiplatform.googleapis.com/v1/projects/p/locations/europe-west4"
      "/publishers/google/models/gemini-2.5-pro:generateContent")],
)
def test_base_url_and_model_name(base: str, model: str, url: str) -> None:
    root, _ = endpoint("gm-test-key", base)
    assert model_url(root, model, "generateContent") == url
    with pytest.raises(AdapterError):
        model_url(root, "tunedModels/x", "generateContent")


async def test_aclose_closes_the_upstream_response() -> None:
    closed = asyncio.Event()
    async with gemini_on(lambda _: sse(RECORDING["text"].body[:100], hold=True, closed=closed)) as (adapter, _):
        stream = await adapter.open_stream(request())
        await stream.aclose()
        await asyncio.wait_for(closed.wait(), 5)  # the provider sees the gateway let go


async def test_transport_failure_mid_body_ends_with_a_retryable_error_keeping_text() -> None:
    raw = RECORDING["text"].body
    closed = asyncio.Event()
    async with gemini_on(lambda _: cut(raw[: raw.rindex(b"data: ")], closed=closed)) as (adapter, _):
        events = await drain(adapter, request())
    final = events[-1].data()
    assert final["status"] == "error" and final["error"]["code"] == "upstream_disconnected"
    assert final["message"]["content"] == "The capital of France"
    assert closed.is_set()


def google_error(code: int, status: str, message: str, details: list[dict[str, Any]] | None = None,
                 headers: dict[str, str] | None = None) -> Reply:
    error = {"error": {"code": code, "message": message, "status": status, "details": details or []}}
    return lambda _: answer(code, error, headers)


BAD_KEY = [{"@type": "type.googleapis.com/google.rpc.ErrorInfo", "reason": "API_KEY_INVALID"}]
RETRY_INFO = [{"@type": "type.googleapis.com/google.rpc.RetryInfo", "retryDelay": "12.2s"}]


@pytest.mark.parametrize(
    ("reply", "kind", "http", "code", "retry_after"),
    [
        (google_error(400, "INVALID_ARGUMENT", "contents is empty"), UpstreamBadRequest, 400, "upstream_bad_request", None),
        (google_error(400, "INVALID_ARGUMENT", "API key not valid: gm-test-key", BAD_KEY), UpstreamError, 502,
         "upstream_auth", None),
        (google_error(403, "PERMISSION_DENIED", "denied"), UpstreamError, 502, "upstream_auth", None),
        (google_error(404, "NOT_FOUND", "models/x is not found"), UpstreamNotFound, 404, "model_not_found", None),
        (google_error(429, "RESOURCE_EXHAUSTED", "quota", headers={"retry-after": "3"}), UpstreamRateLimited, 429,
         "rate_limited", "3"),
        (google_error(429, "RESOURCE_EXHAUSTED", "quota", RETRY_INFO), UpstreamRateLimited, 429, "rate_limited", "13"),
        (google_error(500, "INTERNAL", "oops"), UpstreamError, 502, "upstream_error", None),
        (google_error(503, "UNAVAILABLE", "overloaded"), UpstreamError, 502, "upstream_error", None),
        (lambda _: answer(502, b"<html>bad gateway</html>"), UpstreamError, 502, "upstream_error", None),
        (lambda _: silent(), UpstreamTimeout, 504, "upstream_timeout", None),  # silence before the head
        (None, UpstreamError, 502, "upstream_unavailable", None),  # a closed port: refused
    ],
)
async def test_errors_before_the_body_are_raised_from_open_stream(
    reply: Reply | None, kind: type[GatewayError], http: int, code: str, retry_after: str | None
) -> None:
    if reply is None:
        adapter = http_adapter("gemini", closed_port_url())
        with pytest.raises(kind) as info:
            await adapter.open_stream(request())
        await adapter.aclose()
    else:
        async with gemini_on(reply, read_timeout=read_timeout_for(code)) as (adapter, _):
            with pytest.raises(kind) as info:
                await adapter.open_stream(request())
    error = info.value
    assert (error.status, error.code) == (http, code)
    assert "gm-test-key" not in str(error.to_dict())
    assert error.to_dict().get("retry_after") == retry_after
    assert error.retryable == (http >= 500 and code != "upstream_auth" or http == 429)


async def test_json_instead_of_an_event_stream_is_an_upstream_error() -> None:
    async with gemini_on(lambda _: answer(200, [{"candidates": []}])) as (adapter, _):
        with pytest.raises(UpstreamError, match="expected an event stream"):
            await adapter.open_stream(request())


async def test_schema_violations_are_request_errors() -> None:
    async with gemini_on(lambda _: pytest.fail("no request expected")) as (adapter, fake):
        with pytest.raises(RequestError):
            await adapter.open_stream(request(tool_choice="missing", tools=(WEATHER,)))
        with pytest.raises(RequestError):
            await adapter.open_stream(request(options={"contents": []}))
        with pytest.raises(RequestError):
            await adapter.open_stream(request(model="a/b"))
    assert fake.requests == []


async def test_generate_returns_the_assistant_message() -> None:
    async with gemini_on(lambda _: sse(RECORDING["function-call"].body)) as (adapter, fake):
        message = await adapter.generate(request().messages, model="gemini-2.5-flash")
    assert message.tool_calls == (ToolCall(id="call_1lpeaMTxIpW1nvgP-O3vwQY_0", name="get_capital",
                                           arguments={"country": "France"}),)
    assert fake.requests[0].url.split("?")[0].endswith("/models/gemini-2.5-flash:streamGenerateContent")
    async with gemini_on(lambda _: answer(200, [])) as (adapter, _):
        with pytest.raises(UpstreamError, match="expected an event stream"):
            await adapter.generate(request().messages, model="m")


def settings(**kw: Any) -> Settings:
    return Settings(_env_file=None, **kw)  # type: ignore[call-arg]


async def test_registry_serves_gemini_with_a_key_and_uses_an_injected_session(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("GEMINI_API_KEY", raising=False)
    monkeypatch.delenv("GOOGLE_API_KEY", raising=False)
    assert build_gemini(settings().provider_config(), {}) == {}
    async with aiohttp.ClientSession() as injected:
        assert build_gemini(settings().provider_config(), {"gemini": injected}) == {}  # a session is no key
        keyed = settings(gemini_api_key="gm-test-key").provider_config()
        adapter = build_gemini(keyed, {"gemini": injected})["gemini"]
        assert isinstance(adapter, HttpAdapter) and adapter._session is injected
        with pytest.raises(TypeError, match=r"clients\['gemini'\] must be an aiohttp.ClientSession"):
            build_registry(keyed, {"gemini": object()})
    monkeypatch.setenv("GOOGLE_API_KEY", "from-google-env")
    config = Settings().provider_config()
    registry = build_registry(config)
    served = registry.get("gemini")
    assert isinstance(served, HttpAdapter) and served.ready()  # the gateway's own client (upstream.py)
    sent = upstream_request(ProviderRequest(model="gemini-2.5-pro", messages=(Message(role="user", content="hi"),)),
                            config)
    assert sent.headers["x-goog-api-key"] == "from-google-env"
    assert registry.resolve("gemini/gemini-2.5-pro")[2] == "gemini-2.5-pro"
    await registry.aclose()
