"""`POST /v1/messages/count_tokens` is an entry point like any: the same body limits (413), and a
hostile Anthropic upstream behind it (an event stream, a body cut short, a count that is not a
count) is the upstream's fault, a 502, never a 500 or a 400 blaming the caller."""

from __future__ import annotations

import asyncio
from typing import Any

import httpx
import pytest

from app.main import create_app
from tests.hostile_upstream import HostileUpstream, Seen, json_answer, provider_settings, raw_answer
from tests.support import serve

GUARD = 60
ASK = {"model": "anthropic/claude-x", "messages": [{"role": "user", "content": "hi"}]}


async def _count(answer: Any, body: dict[str, Any] | None = None, **extra: Any) -> httpx.Response:
    async with HostileUpstream(answer) as upstream:
        settings = provider_settings("anthropic", upstream.url, **extra)
        async with serve(create_app(settings)) as gw, httpx.AsyncClient(base_url=gw, timeout=GUARD) as client:
            return await client.post("/v1/messages/count_tokens", json=body or ASK)


async def test_an_honest_count_is_passed_on() -> None:
    response = await _count(json_answer(200, {"input_tokens": 42}))
    assert response.status_code == 200 and response.json() == {"input_tokens": 42}


async def test_a_body_past_the_limit_is_413_and_never_forwarded() -> None:
    """Text past FOUNDRY_MAX_BODY_BYTES (the body limit allows media's base64 on top: text does not get it)."""
    body = {**ASK, "messages": [{"role": "user", "content": "x" * (2 << 20)}]}
    async with HostileUpstream(json_answer(200, {"input_tokens": 1})) as upstream:
        settings = provider_settings("anthropic", upstream.url, max_body_bytes=1 << 20)
        async with serve(create_app(settings)) as gw, httpx.AsyncClient(base_url=gw, timeout=GUARD) as client:
            response = await client.post("/v1/messages/count_tokens", json=body)
    assert response.status_code == 413, response.text[:300]
    assert upstream.seen == []


def _stream(seen: Seen, writer: asyncio.StreamWriter) -> Any:
    return raw_answer(200, b'event: message_start\ndata: {"type":"message_start"}\n\n',
                      [("content-type", "text/event-stream")])(seen, writer)


async def _cut_short(seen: Seen, writer: asyncio.StreamWriter) -> None:
    """A body that promises 100 bytes and sends 18 before the connection closes."""
    writer.write(b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: 100\r\n\r\n"
                 b'{"input_tokens": 4')
    await writer.drain()
    writer.close()


@pytest.mark.parametrize("answer", [
    _stream,
    _cut_short,
    raw_answer(200, b'{"input_tokens": 4', [("content-type", "application/json")]),  # cut short
    json_answer(200, {"input_tokens": -10_000_000}),
    json_answer(200, {"input_tokens": "12"}),
    json_answer(200, {"input_tokens": 1e300}),
    json_answer(200, {}),
    json_answer(200, [1, 2]),
    raw_answer(200, b"<html>hi</html>", [("content-type", "text/html")]),
], ids=["event-stream", "connection-closed", "truncated", "negative", "string", "huge", "missing", "list", "html"])
async def test_a_hostile_count_answer_is_a_502(answer: Any) -> None:
    response = await _count(answer)
    assert response.status_code == 502, response.text[:300]
    body = response.json()
    assert body["type"] == "error" and body["error"]["type"] == "api_error", body
