"""OpenAI Chat: the reference `generate()` (app/providers/reference.py) and the stream on the gateway's own
client against a loopback provider (errors before the body, mid-stream failures,
closing); builders and an injected `aiohttp.ClientSession`."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Callable
from typing import Any

import aiohttp
import openai
import orjson
import pytest
from starlette.responses import Response

from app.core.accumulator import Accumulator
from app.core.errors import (
    GatewayError,
    RequestError,
    UpstreamBadRequest,
    UpstreamError,
    UpstreamNotFound,
    UpstreamRateLimited,
    UpstreamTimeout,
)
from app.core.events import FinalEvent, StreamEvent
from app.core.messages import AdapterError, Message, ToolCall, ToolSpec
from app.core.released import Released
from app.providers.base import PatchStream, ProviderRequest
from app.providers.openai_chat import build_openai
from app.providers.reference import generate, openai_adapter
from app.providers.registry import build_registry
from app.providers.upstream import HttpAdapter
from app.settings import CompatibleProvider, Settings
from tests.support import Recording, recordings, serve
from tests.upstream_fakes import Recorded, Scripted, answer, closed_port_url, cut, http_adapter, silent, sse

KEY = "sk-test-0123456789abcdef"
HI = (Message(role="user", content="hi"),)
ADD = ToolSpec(name="add", parameters={"type": "object", "properties": {"a": {"type": "integer"}}})


# -- generate() (app/providers/reference.py) on the gateway's own client, against a loopback provider --


def reply_chunk(delta: dict[str, Any], finish: str | None = None) -> bytes:
    choice = {"index": 0, "delta": delta, "finish_reason": finish}
    return b"data: " + orjson.dumps({"id": "c", "model": "gpt-x", "choices": [choice]}) + b"\n\n"


@contextlib.asynccontextmanager
async def reference_on(body: bytes) -> AsyncIterator[tuple[Any, Scripted]]:
    """The reference's OpenAI adapter (`openai_adapter`) against a loopback provider streaming `body`."""
    fake = Scripted(lambda _: sse(body))
    async with serve(fake.app()) as url:
        adapter = openai_adapter(KEY, base_url=f"{url}/v1")
        try:
            yield adapter, fake
        finally:
            await adapter.aclose()


async def test_generate_defaults_temperature_and_returns_the_assistant_message() -> None:
    async with reference_on(reply_chunk({"role": "assistant", "content": "4"}, "stop") + b"data: [DONE]\n\n") as (adapter, fake):
        message = await generate(adapter, HI, model="gpt-x")
    assert message == Message(role="assistant", content="4")
    (sent,) = fake.requests
    assert sent.body == {"model": "gpt-x", "messages": [{"role": "user", "content": "hi"}], "stream": True,
                         "stream_options": {"include_usage": True}, "temperature": 0}
    assert sent.headers["authorization"] == f"Bearer {KEY}"


async def test_generate_keeps_caller_temperature_and_maps_tools() -> None:
    call = {"index": 0, "id": "call_1", "type": "function", "function": {"name": "add", "arguments": '{"a": 2}'}}
    body = reply_chunk({"role": "assistant", "content": None, "tool_calls": [call]}, "tool_calls") + b"data: [DONE]\n\n"
    async with reference_on(body) as (adapter, fake):
        message = await generate(adapter, HI, model="gpt-x", tools=[ADD], temperature=0.7, tool_choice="add")
    assert message.tool_calls == (ToolCall(id="call_1", name="add", arguments={"a": 2}),)
    assert message.content == ""
    sent = fake.requests[0].body
    assert sent["temperature"] == 0.7
    assert sent["tools"] == [{"type": "function", "function": {"name": "add", "parameters": dict(ADD.parameters)}}]
    assert sent["tool_choice"] == {"type": "function", "function": {"name": "add"}}


async def test_generate_answers_a_refusal_as_the_content() -> None:
    body = reply_chunk({"role": "assistant", "refusal": "I can't help with that."}, "stop") + b"data: [DONE]\n\n"
    async with reference_on(body) as (adapter, _):
        assert (await generate(adapter, HI, model="gpt-x")).content == "I can't help with that."


@pytest.mark.parametrize(("kwargs", "match"), [
    ({"model": "m", "messages": []}, "messages"),
    ({"model": "m", "stream": True}, "does not stream"),
    ({"model": "m", "stream": False}, "does not stream"),
    ({"model": ""}, "model is required"),
])
async def test_generate_refuses_overrides(kwargs: dict[str, Any], match: str) -> None:
    async with reference_on(b"data: [DONE]\n\n") as (adapter, fake):
        with pytest.raises(AdapterError, match=match):
            await generate(adapter, HI, **kwargs)
    assert fake.requests == []


_PROTOCOL = "upstream_protocol_error"


@pytest.mark.parametrize(("body", "code"), [
    (b"data: null\n\n", _PROTOCOL),
    (b'data: {"choices": "x"}\n\n', _PROTOCOL),
    (b"data: {oops\n\n", _PROTOCOL),
    (reply_chunk({"role": "assistant", "content": 7}, "stop"), _PROTOCOL),
    (reply_chunk({"role": "assistant", "tool_calls": [{"index": 0, "id": "c", "type": "function",
                                                      "function": {"name": "f", "arguments": "{oops"}}]}, "tool_calls"),
     "invalid_tool_arguments"),
], ids=["null", "choices-not-a-list", "not-json", "content-not-a-string", "arguments-not-json"])
async def test_generate_on_a_malformed_stream_raises_the_error_that_ended_it(body: bytes, code: str) -> None:
    async with reference_on(body + b"data: [DONE]\n\n") as (adapter, _):
        with pytest.raises(GatewayError) as info:
            await generate(adapter, HI, model="m")
    assert info.value.status == 502 and info.value.code == code


# -- open_stream() on the gateway's own client, against a loopback provider ----------------


def local(url: str, **kw: Any) -> Settings:
    return Settings(openai_api_key=None, openai_base_url=None, upstream_max_retries=0,
                    providers=[CompatibleProvider(name="local", base_url=f"{url}/v1", **kw)])


async def drain(stream: PatchStream) -> tuple[list[StreamEvent], FinalEvent]:
    """What the pipeline does with a patch stream, minus HTTP."""
    acc, events = Accumulator(model="m", provider="openai"), []
    try:
        async for batch in stream:
            events += acc.push_all(batch)
    except GatewayError as exc:
        return events, Released.of(events, provider="openai").final(acc, "error", error=exc.to_dict())
    assert acc.completed
    return events, Released.of(events, provider="openai").final(acc, "ok")


@contextlib.asynccontextmanager
async def openai_on(reply: Callable[[Recorded], Response], **config: Any) -> AsyncIterator[tuple[Any, Scripted]]:
    """The `openai` adapter the gateway builds from its key, against a loopback provider."""
    fake = Scripted(reply)
    async with serve(fake.app()) as url:
        adapter = http_adapter("openai", url, values={"openai_api_key": KEY}, **config)
        try:
            yield adapter, fake
        finally:
            await adapter.aclose()


@pytest.mark.parametrize("rec", recordings("openai-chat"), ids=repr)
async def test_every_recording_through_the_gateways_client(rec: Recording) -> None:
    async with openai_on(lambda _: sse(rec.body, step=700)) as (adapter, fake):
        _, final = await drain(await adapter.open_stream(ProviderRequest(model="gpt-x", messages=HI)))
    assert final.status == ("error" if rec.expected["errors"] else "ok")
    assert final.message.content == (rec.expected["text"] or "") + (rec.expected["refusal"] or "")
    assert [c.id for c in final.message.tool_calls] == [c["id"] for c in rec.expected["tool_calls"]]
    assert fake.requests[0].headers["authorization"] == f"Bearer {KEY}"


async def test_request_body_on_the_wire() -> None:
    request = ProviderRequest(model="gpt-x", messages=HI, tools=(ADD,), tool_choice="required", max_tokens=3,
                              options={"seed": 1, "temperature": 0.5})
    async with openai_on(lambda _: sse(b"data: [DONE]\n\n")) as (adapter, fake):
        await drain(await adapter.open_stream(request))
    assert [r.body for r in fake.requests] == [{
        "model": "gpt-x", "messages": [{"role": "user", "content": "hi"}], "stream": True,
        "stream_options": {"include_usage": True}, "temperature": 0.5, "max_completion_tokens": 3, "seed": 1,
        "tool_choice": "required",
        "tools": [{"type": "function", "function": {"name": "add", "parameters": dict(ADD.parameters)}}],
    }]
    fake = Scripted(lambda _: sse(b"data: [DONE]\n\n"))  # a compatible server: no usage asked, max_tokens
    async with serve(fake.app()) as url:
        without_usage, _, _ = build_registry(local(url, include_usage=False).provider_config()).resolve("local/m")
        await drain(await without_usage.open_stream(ProviderRequest(model="m", messages=HI, max_tokens=3)))
        await without_usage.aclose()
    assert "stream_options" not in fake.requests[0].body and fake.requests[0].body["max_tokens"] == 3


async def test_caller_mistakes_are_request_errors_before_any_http() -> None:
    async with openai_on(lambda _: pytest.fail("no request expected")) as (adapter, fake):
        with pytest.raises(RequestError, match="'stream'") as info:
            await adapter.open_stream(ProviderRequest(model="m", messages=HI, options={"stream": False}))
    assert info.value.status == 400 and fake.requests == []


Reply = tuple[int, Any, dict[str, str]]


def error_response(status: int, error: dict[str, Any], headers: dict[str, str] | None = None) -> Reply:
    return status, {"error": error}, headers or {}


@pytest.mark.parametrize(("reply", "kind", "status", "code"), [
    (error_response(400, {"message": "Invalid 'messages[0]'", "type": "invalid_request_error"}),
     UpstreamBadRequest, 400, "upstream_bad_request"),
    (error_response(422, {"message": "unprocessable"}), UpstreamBadRequest, 400, "upstream_bad_request"),
    (error_response(401, {"message": f"Incorrect API key provided: {KEY[:8]}***"}), UpstreamError, 502, "upstream_auth"),
    (error_response(403, {"message": "forbidden"}), UpstreamError, 502, "upstream_auth"),
    (error_response(404, {"message": "The model `nope` does not exist"}), UpstreamNotFound, 404, "model_not_found"),
    (error_response(429, {"message": "Rate limit reached"}, {"retry-after": "7"}), UpstreamRateLimited, 429,
     "rate_limited"),
    (error_response(429, {"message": "You exceeded your quota", "code": "insufficient_quota"}), UpstreamError, 502,
     "upstream_quota"),
    (error_response(500, {"message": "server error"}), UpstreamError, 502, "upstream_error"),
    ((503, b"upstream down", {"content-type": "text/plain"}), UpstreamError, 502, "upstream_error"),
    ((200, {"error": {"message": "not a stream"}}, {}), UpstreamError, 502, "upstream_error"),
])
async def test_http_errors_before_the_body(reply: Reply, kind: type, status: int, code: str) -> None:
    async with openai_on(lambda _: answer(*reply)) as (adapter, _):
        with pytest.raises(GatewayError) as info:
            await adapter.open_stream(ProviderRequest(model="nope", messages=HI))
    err = info.value
    assert type(err) is kind and err.status == status and err.code == code
    assert KEY[:8] not in err.message
    if code in ("upstream_bad_request", "model_not_found", "rate_limited"):
        assert err.message.startswith("openai: ") and err.message[8:] in reply[1]["error"]["message"]
    if kind is UpstreamRateLimited:
        assert err.retry_after == "7" and err.to_dict()["retry_after"] == "7"
    if status == 502 and code == "upstream_error" and reply[0] >= 500:
        assert err.retryable and err.upstream_status == reply[0]


def failing_session(failure: Exception) -> aiohttp.ClientSession:
    """An injected session whose every request fails with `failure` before it is sent (aiohttp's
    public request hook)."""

    async def fail(*_: Any) -> None:
        raise failure

    trace = aiohttp.TraceConfig()
    trace.on_request_start.append(fail)
    return aiohttp.ClientSession(trace_configs=[trace])


@pytest.mark.parametrize(("failure", "kind", "status"), [
    (aiohttp.ConnectionTimeoutError("connect timed out"), UpstreamTimeout, 504),
    (aiohttp.SocketTimeoutError("read timed out"), UpstreamTimeout, 504),
    (aiohttp.ClientConnectionError("connection refused"), UpstreamError, 502),
])
async def test_transport_failures_before_the_body(failure: Exception, kind: type, status: int) -> None:
    async with failing_session(failure) as session:
        adapter = http_adapter("openai", closed_port_url(), session=session, values={"openai_api_key": KEY})
        with pytest.raises(GatewayError) as info:
            await adapter.open_stream(ProviderRequest(model="m", messages=HI))
        await adapter.aclose()
        assert not session.closed  # injected: used, never closed by the adapter
    assert type(info.value) is kind and info.value.status == status and info.value.retryable


async def test_upstream_silence_before_the_head_is_a_timeout() -> None:
    async with openai_on(lambda _: silent(), read_timeout=0.2) as (adapter, _):
        with pytest.raises(UpstreamTimeout) as info:
            await drain(await adapter.open_stream(ProviderRequest(model="m", messages=HI)))
    assert info.value.status == 504 and info.value.retryable


async def test_connection_refused_on_loopback() -> None:
    adapter = http_adapter("openai", closed_port_url(), values={"openai_api_key": KEY})
    with pytest.raises(UpstreamError) as info:
        await adapter.open_stream(ProviderRequest(model="m", messages=HI))
    assert info.value.status == 502 and info.value.code == "upstream_unavailable"
    await adapter.aclose()


def chunk(content: str) -> bytes:
    return f'data: {{"id":"c","model":"m","choices":[{{"index":0,"delta":{{"content":"{content}"}}}}]}}\n\n'.encode()


@pytest.mark.parametrize(("failure", "code"), [
    ("reset", "upstream_disconnected"),
    ("silence", "upstream_timeout"),
])
async def test_mid_stream_failure_keeps_text_so_far(failure: str, code: str) -> None:
    closed = asyncio.Event()
    reply = (lambda _: cut(chunk("Hel") + chunk("lo"), closed=closed)) if failure == "reset" else \
        (lambda _: sse(chunk("Hel") + chunk("lo"), hold=True, closed=closed))
    async with openai_on(reply, read_timeout=0.3) as (adapter, _):
        events, final = await drain(await adapter.open_stream(ProviderRequest(model="m", messages=HI)))
        await asyncio.wait_for(closed.wait(), 5)  # the upstream's body is over: cut, or let go of
    assert final.status == "error" and final.stop_reason == "error"
    assert final.error["code"] == code and final.error["retryable"] is True
    assert final.message.content == "Hello" and len(events) == 2


async def test_stream_ending_early_is_an_error() -> None:
    async with openai_on(lambda _: sse(chunk("Hel"))) as (adapter, _):
        _, final = await drain(await adapter.open_stream(ProviderRequest(model="m", messages=HI)))
    assert final.error["code"] == "upstream_incomplete" and final.message.content == "Hel"


async def test_aclose_closes_the_upstream_response() -> None:
    closed = asyncio.Event()
    body = chunk("a") + chunk("b") + b"data: [DONE]\n\n"
    async with openai_on(lambda _: sse(body, step=len(chunk("a")), hold=True, closed=closed)) as (adapter, _):
        stream = await adapter.open_stream(ProviderRequest(model="m", messages=HI))
        batches = stream.__aiter__()
        await batches.__anext__()
        assert not closed.is_set()
        await stream.aclose()
        await asyncio.wait_for(closed.wait(), 5)  # the provider sees the gateway let go
        await stream.aclose()  # idempotent
        await batches.aclose()


# -- configuration ------------------------------------------------------------------------


def settings(**kw: Any) -> Settings:
    return Settings(openai_api_key=kw.pop("openai_api_key", None), openai_base_url=None, **kw)


_ASK = ProviderRequest(model="m", messages=(Message(role="user", content="hi"),))


async def test_openai_is_served_only_with_a_key_and_uses_an_injected_session() -> None:
    assert build_openai(settings().provider_config(), {}) == {}
    config = settings(openai_api_key=KEY, connect_timeout=3, read_timeout=30, upstream_max_retries=0).provider_config()
    built = build_openai(config, {})["openai"]
    assert isinstance(built, HttpAdapter)  # the gateway's own client (app/providers/upstream.py)
    sent = built.plan(_ASK).request
    assert sent.url == "https://api.openai.com/v1/chat/completions" and sent.headers["authorization"] == f"Bearer {KEY}"
    assert built._config.connect_timeout == 3 and built._config.read_timeout == 30
    async with aiohttp.ClientSession() as injected:
        assert build_openai(settings().provider_config(), {"openai": injected}) == {}  # a session is no credential
        served = build_openai(settings(openai_api_key=KEY).provider_config(), {"openai": injected})["openai"]
        assert served._session is injected  # type: ignore[attr-defined]


async def test_compatible_providers(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", "sk-must-not-leak-to-third-parties")
    monkeypatch.delenv("FOUNDRY_TEST_GROQ_KEY", raising=False)
    providers = [
        CompatibleProvider(name="groq", base_url="https://api.groq.test/openai/v1", api_key_env="FOUNDRY_TEST_GROQ_KEY"),
        CompatibleProvider(name="local", base_url="http://127.0.0.1:8000/v1", include_usage=False),
    ]
    built = build_openai(settings(providers=providers).provider_config(), {})
    assert set(built) == {"local"}
    local = built["local"]
    sent = local.plan(_ASK).request  # type: ignore[attr-defined]
    assert sent.url == "http://127.0.0.1:8000/v1/chat/completions" and "authorization" not in sent.headers
    assert b"stream_options" not in sent.body and local.name == "local"

    monkeypatch.setenv("FOUNDRY_TEST_GROQ_KEY", "gsk-test")
    built = build_openai(settings(providers=providers).provider_config(), {})
    assert set(built) == {"groq", "local"}
    assert built["groq"].plan(_ASK).request.headers["authorization"] == "Bearer gsk-test"  # type: ignore[attr-defined]

    async with aiohttp.ClientSession() as injected:
        built = build_openai(settings(providers=providers).provider_config(), {"groq": injected})
        assert built["groq"]._session is injected  # type: ignore[attr-defined]
        monkeypatch.delenv("FOUNDRY_TEST_GROQ_KEY")  # its key gone, the session does not serve it
        assert "groq" not in build_openai(settings(providers=providers).provider_config(), {"groq": injected})


async def test_registry_serves_openai_and_closes_only_its_own_clients() -> None:
    injected = aiohttp.ClientSession()
    config = settings(openai_api_key=KEY,
                      providers=[CompatibleProvider(name="local", base_url="http://127.0.0.1:1/v1")]).provider_config()
    registry = build_registry(config, {"openai": injected})
    assert {"openai", "local", "mock"} <= set(registry.readiness())
    adapter, provider, model = registry.resolve("local/llama-3")
    assert (provider, model) == ("local", "llama-3")
    assert isinstance(adapter, HttpAdapter) and adapter._session is None  # its session: made at its first request
    assert registry.get("openai")._session is injected  # type: ignore[attr-defined]
    await registry.aclose()
    assert not injected.closed
    await injected.close()


def test_an_sdk_client_is_refused_naming_its_key() -> None:
    sdk = openai.AsyncOpenAI(api_key=KEY, base_url="http://127.0.0.1:1/v1", max_retries=0)
    with pytest.raises(TypeError, match=r"clients\['openai'\] must be an aiohttp.ClientSession, got AsyncOpenAI"):
        build_registry(settings(openai_api_key=KEY).provider_config(), {"openai": sdk})
    with pytest.raises(TypeError, match=r"clients\['local'\]"):
        build_registry(local("http://127.0.0.1:1").provider_config(), {"local": sdk})
