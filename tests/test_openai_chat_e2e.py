"""End to end: the gateway under uvicorn on loopback, in front of a fake OpenAI-compatible server
on loopback that replays the recordings. Canonical SSE out, HTTP errors before the first event,
honest errors after it, and a client disconnect that closes the upstream connection."""

from __future__ import annotations

import asyncio
import json
import socket
from collections.abc import AsyncIterator
from typing import Any

import aiohttp
import httpx
import openai
import pytest

from app.main import create_app
from app.settings import CompatibleProvider, Settings
from tests.support import parse_sse, read_asgi_request, recordings, serve, until_disconnect

RECORDINGS = {rec.name: rec for rec in recordings("openai-chat")}
HELLO = [{"role": "user", "content": "Hello"}]
_FIRST = (b'data: {"id":"c","model":"m","choices":[{"index":0,"delta":{"role":"assistant","content":""}}]}\n\n'
          b'data: {"id":"c","model":"m","choices":[{"index":0,"delta":{"content":"first"}}]}\n\n')


class FakeUpstream:
    """A raw ASGI app for POST /v1/chat/completions; the request's `model` picks the answer:
    a recording's name replays it; `status-<N>` answers HTTP N; `hang` sends one token and then
    waits for the client to go (setting `closed`); `no-headers` never answers; `truncated` sends
    half a recording and ends the body."""

    def __init__(self) -> None:
        self.requests: list[dict[str, Any]] = []
        self.closed = asyncio.Event()

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        body = await read_asgi_request(scope, receive, send)
        if body is None:
            return
        request = json.loads(body)
        self.requests.append(request)
        model: str = request["model"]
        if model.startswith("status-"):
            status = int(model.removeprefix("status-"))
            error = {"message": f"upstream says {status}", "type": "invalid_request_error"}
            headers = [(b"content-type", b"application/json")] + ([(b"retry-after", b"7")] if status == 429 else [])
            await send({"type": "http.response.start", "status": status, "headers": headers})
            await send({"type": "http.response.body", "body": json.dumps({"error": error}).encode()})
            return
        if model.startswith("instream-"):  # an error chunk (OpenRouter's shape) before any output
            status = int(model.removeprefix("instream-"))
            error = {"code": status, "message": f"upstream says {status} in the stream"}
            await send({"type": "http.response.start", "status": 200,
                        "headers": [(b"content-type", b"text/event-stream")]})
            chunk = {"id": "c", "model": "m", "error": error,
                     "choices": [{"index": 0, "delta": {"role": "assistant", "content": ""}}]}
            await send({"type": "http.response.body",
                        "body": b"data: " + json.dumps(chunk).encode() + b"\n\ndata: [DONE]\n\n"})
            return
        if model == "no-headers":
            await until_disconnect(receive)
            return
        await send({"type": "http.response.start", "status": 200,
                    "headers": [(b"content-type", b"text/event-stream")]})
        if model == "hang":
            await send({"type": "http.response.body", "body": _FIRST, "more_body": True})
            await until_disconnect(receive)
            self.closed.set()
            return
        recording = RECORDINGS["text-include-usage" if model == "truncated" else model].body
        if model == "truncated":
            recording = recording[: len(recording) // 2]
        for start in range(0, len(recording), 512):
            await send({"type": "http.response.body", "body": recording[start:start + 512], "more_body": True})
        await send({"type": "http.response.body", "body": b""})


def gateway_settings(upstream: str, **kw: Any) -> Settings:
    with socket.socket() as sock:  # a loopback port nobody listens on
        sock.bind(("127.0.0.1", 0))
        closed_port = sock.getsockname()[1]
    kw.setdefault("openai_api_key", None)
    return Settings(
        upstream_max_retries=0,
        providers=[CompatibleProvider(name="fake", base_url=f"{upstream}/v1"),
                   CompatibleProvider(name="down", base_url=f"http://127.0.0.1:{closed_port}/v1")],
        **kw,
    )


@pytest.fixture
async def upstream() -> AsyncIterator[tuple[FakeUpstream, str]]:
    fake = FakeUpstream()
    async with serve(fake) as url:
        yield fake, url


def _check_canonical(events: list[tuple[int, str, dict[str, Any]]]) -> dict[str, Any]:
    assert [i for i, _, _ in events] == list(range(1, len(events) + 1))
    assert events[0][1] == "start" and [e for _, e, _ in events].count("final") == 1 and events[-1][1] == "final"
    return events[-1][2]


async def test_every_recording_end_to_end(upstream: tuple[FakeUpstream, str]) -> None:
    fake, url = upstream
    async with serve(create_app(gateway_settings(url))) as gateway, httpx.AsyncClient(base_url=gateway) as client:
        for name, rec in RECORDINGS.items():
            response = await client.post("/v1/stream", json={"model": f"fake/{name}", "messages": HELLO})
            assert response.status_code == 200 and response.headers["content-type"].startswith("text/event-stream")
            events = parse_sse(response.content)
            final = _check_canonical(events)
            exp = rec.expected
            text = (exp["text"] or "") + (exp["refusal"] or "")
            assert "".join(d["content"] for _, e, d in events if e == "token") == text, name
            assert "".join(d["content"] for _, e, d in events if e == "reasoning") == (exp["reasoning"] or ""), name
            assert final["message"]["content"] == text
            assert final["status"] == ("error" if exp["errors"] else "ok"), name
            assert final["usage"]["input_tokens"] == (exp["usage"] or {}).get("prompt_tokens", 0), name
            if exp["usage"]:  # whatever the provider reported, even on the chunk carrying its error
                assert final["usage"]["output_tokens"] == exp["usage"]["completion_tokens"], name
            calls = [(d["id"], d["name"], d["arguments"]) for _, e, d in events if e == "tool_call" and d["is_final"]]
            assert calls == [(c["id"], c["name"], json.loads(c["arguments"])) for c in exp["tool_calls"]], name
            assert final["message"]["tool_calls"] == [
                {"id": c["id"], "name": c["name"], "arguments": json.loads(c["arguments"])} for c in exp["tool_calls"]]
    sent = fake.requests[0]
    assert sent["stream"] is True and sent["stream_options"] == {"include_usage": True}
    assert sent["temperature"] == 0 and sent["messages"] == HELLO and "max_tokens" not in sent
    assert {r["model"] for r in fake.requests} == set(RECORDINGS)


async def test_injected_session_end_to_end(upstream: tuple[FakeUpstream, str]) -> None:
    fake, url = upstream
    session = aiohttp.ClientSession()
    app = create_app(gateway_settings(url, openai_api_key="sk-test", openai_base_url=f"{url}/v1"),
                     clients={"openai": session})
    async with serve(app) as gateway, httpx.AsyncClient(base_url=gateway) as client:
        ready = (await client.get("/readyz")).json()
        assert "openai" in json.dumps(ready) and "fake" in json.dumps(ready)
        body = {"model": "openai/tool-call-single-include-usage", "messages": HELLO,
                "tools": [{"name": "get_capital", "parameters": {"type": "object", "properties": {}}}],
                "tool_choice": "get_capital", "provider_options": {"seed": 3}}
        final = _check_canonical(parse_sse((await client.post("/v1/stream", json=body)).content))
        assert final["stop_reason"] == "tool_calls" and final["message"]["tool_calls"][0]["arguments"] == {"country": "UK"}
    sent = fake.requests[-1]
    assert sent["tool_choice"] == {"type": "function", "function": {"name": "get_capital"}} and sent["seed"] == 3
    assert not session.closed  # injected: the embedder's to close
    await session.close()


def test_an_injected_sdk_client_is_refused_naming_the_key() -> None:
    sdk = openai.AsyncOpenAI(api_key="sk-test", base_url="http://127.0.0.1:9/v1", max_retries=0)
    with pytest.raises(TypeError, match=r"clients\['openai'\] must be an aiohttp.ClientSession, got AsyncOpenAI"):
        create_app(gateway_settings("http://127.0.0.1:9"), clients={"openai": sdk})


@pytest.mark.parametrize(("model", "status", "code"), [
    ("fake/status-400", 400, "upstream_bad_request"),
    ("fake/status-401", 502, "upstream_auth"),
    ("fake/status-403", 502, "upstream_auth"),
    ("fake/status-404", 404, "model_not_found"),
    ("fake/status-429", 429, "rate_limited"),
    ("fake/status-500", 502, "upstream_error"),
    ("down/any-model", 502, "upstream_unavailable"),
])
async def test_errors_before_the_first_event_are_http_errors(
    upstream: tuple[FakeUpstream, str], model: str, status: int, code: str
) -> None:
    _, url = upstream
    async with serve(create_app(gateway_settings(url))) as gateway, httpx.AsyncClient(base_url=gateway) as client:
        response = await client.post("/v1/stream", json={"model": model, "messages": HELLO})
    assert response.status_code == status
    error = response.json()["error"]
    assert error["code"] == code
    if status == 400:
        assert error["message"] == "fake: upstream says 400"
    if status == 429:
        assert response.headers["retry-after"] == "7"


@pytest.mark.parametrize("path", ["/v1/stream", "/v1/generate", "/v1/chat/completions", "/v1/messages"])
@pytest.mark.parametrize(("upstream_status", "status", "retryable"), [(400, 400, False), (429, 429, True),
                                                                      (503, 502, True)])
async def test_an_in_stream_error_before_any_output_keeps_the_provider_class(
    upstream: tuple[FakeUpstream, str], path: str, upstream_status: int, status: int, retryable: bool
) -> None:
    _, url = upstream
    body = {"model": f"fake/instream-{upstream_status}", "messages": HELLO, "max_tokens": 100}
    async with serve(create_app(gateway_settings(url))) as gateway, httpx.AsyncClient(base_url=gateway) as client:
        response = await client.post(path, json=body)
    assert response.status_code == status, response.text
    error = response.json()["error"]
    assert f"upstream says {upstream_status} in the stream" in error["message"]
    if path in ("/v1/stream", "/v1/generate"):
        assert error["retryable"] is retryable and error["upstream_status"] == upstream_status
    if status == 429:
        assert response.headers["retry-after"] == "1"


async def test_the_openrouter_recording_keeps_its_usage_through_the_api(upstream: tuple[FakeUpstream, str]) -> None:
    _, url = upstream
    body = {"model": "fake/openrouter-error-midstream", "messages": HELLO}
    async with serve(create_app(gateway_settings(url))) as gateway, httpx.AsyncClient(base_url=gateway) as client:
        final = _check_canonical(parse_sse((await client.post("/v1/stream", json=body)).content))
        answer = (await client.post("/v1/generate", json=body)).json()
    for usage in (final["usage"], answer["usage"]):
        assert usage["input_tokens"] == 43 and usage["output_tokens"] == 10 and usage["total_tokens"] == 53
    assert final["status"] == "error" and final["error"]["upstream_status"] == 400


async def test_upstream_silence_before_headers_is_a_504(upstream: tuple[FakeUpstream, str]) -> None:
    _, url = upstream
    app = create_app(gateway_settings(url, read_timeout=0.2))
    async with serve(app) as gateway, httpx.AsyncClient(base_url=gateway) as client:
        response = await client.post("/v1/stream", json={"model": "fake/no-headers", "messages": HELLO})
    assert response.status_code == 504 and response.json()["error"]["code"] == "upstream_timeout"


async def test_a_body_cut_short_ends_in_final_error_with_the_text_so_far(upstream: tuple[FakeUpstream, str]) -> None:
    _, url = upstream
    async with serve(create_app(gateway_settings(url))) as gateway, httpx.AsyncClient(base_url=gateway) as client:
        response = await client.post("/v1/stream", json={"model": "fake/truncated", "messages": HELLO})
    events = parse_sse(response.content)
    final = _check_canonical(events)
    assert final["status"] == "error" and final["stop_reason"] == "error"
    assert final["error"]["code"] == "upstream_incomplete"
    text = "".join(d["content"] for _, e, d in events if e == "token")
    assert text and final["message"]["content"] == text
    assert RECORDINGS["text-include-usage"].expected["text"].startswith(text)


async def test_client_disconnect_closes_the_upstream_connection(upstream: tuple[FakeUpstream, str]) -> None:
    fake, url = upstream
    async with serve(create_app(gateway_settings(url))) as gateway, httpx.AsyncClient(base_url=gateway) as client:
        async with client.stream("POST", "/v1/stream", json={"model": "fake/hang", "messages": HELLO}) as response:
            async for line in response.aiter_lines():
                if line.startswith("event: token"):
                    break
            assert not fake.closed.is_set()  # the upstream is held open while the client reads
        # The client is gone; the fake upstream must see its connection close (DESIGN.md section 6).
        await asyncio.wait_for(fake.closed.wait(), timeout=5.0)
