"""An upstream that says it finished (`[DONE]`, `message_stop`, `response.completed`) and then holds
its body open: the run ends `ok` at once with everything the provider sent, and the gateway lets
go of the upstream. Waiting for the body's end instead ran each such run into the read timeout
and ended a complete answer as a `timeout` error. Gemini has no end marker of its own (its body's
end is the end), so it is not among them."""

from __future__ import annotations

import asyncio

import pytest

from tests.hostile_upstream import MODELS, provider_settings
from tests.support import parse_sse, recordings
from tests.upstream_fakes import Scripted, gateway, sse

CASES = [("openai", "openai-chat", "text-include-usage"), ("anthropic", "anthropic", "text"),
         ("openai-responses", "openai-responses", "text")]


@pytest.mark.parametrize(("provider", "family", "name"), CASES)
async def test_a_finished_answer_held_open_ends_ok_at_once(provider: str, family: str, name: str) -> None:
    recording = next(r for r in recordings(family) if r.name == name)
    closed = asyncio.Event()
    fake = Scripted(lambda _: sse(recording.body, hold=True, closed=closed))
    async with gateway(fake, lambda url: provider_settings(provider, url, read_timeout=30.0)) as client:
        ask = {"model": MODELS[provider], "messages": [{"role": "user", "content": "hi"}]}
        response = await asyncio.wait_for(client.post("/v1/stream", json=ask), 20)  # under the read timeout
        await asyncio.wait_for(closed.wait(), 10)  # the upstream was let go
    events = parse_sse(response.content)
    final = events[-1][2]
    assert [e for _, e, _ in events].count("final") == 1 and events[-1][1] == "final"
    assert final["status"] == "ok" and final["stop_reason"] == "stop", final
    assert final["usage"]["output_tokens"] > 0  # usage sent before the end marker is kept
    assert "".join(d["content"] for _, e, d in events if e == "token") == final["message"]["content"]
    assert final["message"]["content"] == recording.expected["text"]
