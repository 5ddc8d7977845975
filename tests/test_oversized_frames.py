"""Every run ends with one final within its deadline, whatever the size of a frame: a tool call
whose arguments pass the per-stream byte cap (`FOUNDRY_MAX_STREAM_BYTES`), streamed by a hostile
upstream in 64 KiB fragments, ends the run with an error final, and its slot is freed."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import httpx
import pytest

from app.main import create_app
from tests.hostile_upstream import HostileUpstream, Seen, ask, provider_settings
from tests.support import parse_sse, serve

GUARD = 60
FRAGMENT = 64 << 10
TOOL = {"name": "save", "description": "Save a blob", "parameters": {"type": "object", "properties": {
    "blob": {"type": "string"}}, "required": ["blob"]}}


def _chunk(delta: dict[str, Any], finish: str | None = None) -> bytes:
    body = {"id": "c1", "object": "chat.completion.chunk", "model": "gpt-x",
            "choices": [{"index": 0, "delta": delta, "finish_reason": finish}]}
    return b"data: " + json.dumps(body).encode() + b"\n\n"


def _big_call(fragments: int) -> Any:
    """A chat answer of one tool call whose arguments come in `fragments` pieces of 64 KiB."""
    async def answer(seen: Seen, writer: asyncio.StreamWriter) -> None:
        writer.write(b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\nconnection: close\r\n\r\n")
        writer.write(_chunk({"role": "assistant", "tool_calls": [{"index": 0, "id": "call_1", "type": "function",
                                                                  "function": {"name": "save", "arguments": ""}}]}))
        pieces = ['{"blob": "'] + ["a" * FRAGMENT] * fragments + ['"}']
        for piece in pieces:
            writer.write(_chunk({"tool_calls": [{"index": 0, "function": {"arguments": piece}}]}))
            await writer.drain()
        writer.write(_chunk({}, "tool_calls") + b"data: [DONE]\n\n")
        await writer.drain()
        writer.close()
    return answer


@pytest.mark.parametrize("path", ["/v1/stream", "/v1/generate"])
async def test_tool_arguments_past_the_stream_cap_end_with_one_error_final(path: str) -> None:
    async with HostileUpstream(_big_call(12)) as upstream:  # 768 KiB of arguments under a 256 KiB cap
        settings = provider_settings("openai", upstream.url, max_stream_bytes=256 << 10, total_timeout=GUARD * 2)
        app = create_app(settings)
        async with serve(app) as gw, httpx.AsyncClient(base_url=gw, timeout=GUARD) as client:
            async with asyncio.timeout(GUARD):
                response = await client.post(path, json=ask("openai", tools=[TOOL]))
                for _ in range(100):  # the run's task is done once its final is out; let the loop turn
                    if not app.state.gateway.admission.active:
                        break
                    await asyncio.sleep(0)
            active = len(app.state.gateway.admission.active)
    if path == "/v1/stream":
        events = parse_sse(response.content)
        finals = [data for _, kind, data in events if kind == "final"]
        assert len(finals) == 1 and events[-1][1] == "final", [kind for _, kind, _ in events][-5:]
        final = finals[0]
    else:
        final = response.json()
    assert final["status"] == "error" and final["error"]["code"] == "stream_too_large", final.get("error")
    assert active == 0


async def test_arguments_within_the_cap_still_pass() -> None:
    async with HostileUpstream(_big_call(2)) as upstream:
        settings = provider_settings("openai", upstream.url, max_stream_bytes=1 << 20)
        async with serve(create_app(settings)) as gw, httpx.AsyncClient(base_url=gw, timeout=GUARD) as client:
            final = (await client.post("/v1/generate", json=ask("openai", tools=[TOOL]))).json()
    assert final["status"] == "ok" and len(final["message"]["tool_calls"][0]["arguments"]["blob"]) == 2 * FRAGMENT
