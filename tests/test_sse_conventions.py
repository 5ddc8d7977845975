"""SSE conventions clients rely on: the Anthropic facade's `message_start` carries the input
tokens the upstream reported there; native SSE sends a `retry:` hint once; a subscription whose
cursor is at the final answers 204 (an EventSource stops reconnecting); an OpenAI refusal fills
`refusal` (streamed and not), with the official SDKs against the gateway on loopback."""

from __future__ import annotations

import anthropic
import httpx
import openai
import pytest

from tests.compat_support import facade_gateway
from tests.support import parse_sse, recordings

HI = [{"role": "user", "content": "hi"}]
REFUSAL = next(r for r in recordings("openai-chat") if r.name == "refusal").expected["refusal"]


@pytest.mark.parametrize("name", ["text", "prompt-cache-usage"])
async def test_message_start_carries_the_upstream_input_tokens(name: str) -> None:
    expected = next(r for r in recordings("anthropic") if r.name == name).expected
    start, end = expected["usage_message_start"], expected["usage_message_delta"]
    async with facade_gateway() as url:
        client = anthropic.AsyncAnthropic(base_url=url, api_key="sk-ant-client", max_retries=0)
        stream = await client.messages.create(model=f"anthropic/{name}", max_tokens=64, messages=HI, stream=True)
        first = None
        async for event in stream:
            first = first or event
        async with client.messages.stream(model=f"anthropic/{name}", max_tokens=64, messages=HI) as helper:
            final = await helper.get_final_message()
        await client.close()
    assert first is not None and first.type == "message_start"
    assert first.message.usage.input_tokens == start["input_tokens"]
    assert first.message.usage.cache_read_input_tokens == start["cache_read_input_tokens"]
    assert final.usage.input_tokens == end.get("input_tokens", start["input_tokens"])


async def test_message_start_says_zero_when_the_upstream_reports_usage_only_at_the_end() -> None:
    async with facade_gateway() as url:
        client = anthropic.AsyncAnthropic(base_url=url, api_key="sk-ant-client", max_retries=0)
        stream = await client.messages.create(model="openai/text-include-usage", max_tokens=64, messages=HI,
                                              stream=True)
        events = [event async for event in stream]
        await client.close()
    assert events[0].type == "message_start" and events[0].message.usage.input_tokens == 0
    assert next(e for e in events if e.type == "message_delta").usage.input_tokens > 0


async def test_native_sse_sends_one_retry_hint_and_204_after_the_final() -> None:
    async with facade_gateway() as url, httpx.AsyncClient(base_url=url, timeout=30) as client:
        answer = await client.post("/v1/stream", json={"model": "mock/simple", "messages": HI,
                                                       "on_disconnect": "continue"})
        blocks = answer.text.split("\n\n")  # the hint follows the first read of frames
        assert blocks[0].startswith("id: 1\n") and "retry: 1000" in blocks and answer.text.count("retry:") == 1
        events = parse_sse(answer.text)
        last_id, kind, _ = events[-1]
        assert kind == "final"
        stream_id = answer.headers["x-stream-id"]
        done = await client.get(f"/v1/stream/{stream_id}", headers={"Last-Event-ID": str(last_id)})
        assert done.status_code == 204 and done.content == b""
        also = await client.get(f"/v1/stream/{stream_id}", params={"after": last_id})
        assert also.status_code == 204
        before = await client.get(f"/v1/stream/{stream_id}", headers={"Last-Event-ID": str(last_id - 1)})
        assert before.status_code == 200 and before.text.count("retry:") == 1
        assert [kind for _, kind, _ in parse_sse(before.text)] == ["final"]


@pytest.mark.parametrize("stream", [False, True])
async def test_an_openai_refusal_fills_refusal(stream: bool) -> None:
    async with facade_gateway() as url:
        client = openai.AsyncOpenAI(base_url=f"{url}/v1", api_key="sk-client", max_retries=0)
        if stream:
            chunks = [c async for c in await client.chat.completions.create(
                model="openai/refusal", messages=HI, stream=True)]  # type: ignore[arg-type]
            deltas = [c.choices[0].delta for c in chunks if c.choices]
            refusal = "".join(d.refusal or "" for d in deltas)
            content = "".join(d.content or "" for d in deltas)
            finish = [c.choices[0].finish_reason for c in chunks if c.choices and c.choices[0].finish_reason]
        else:
            answer = await client.chat.completions.create(model="openai/refusal", messages=HI)  # type: ignore[arg-type]
            message = answer.choices[0].message
            refusal, content, finish = message.refusal or "", message.content or "", [answer.choices[0].finish_reason]
        await client.close()
    assert refusal == REFUSAL and content == "" and finish == ["stop"]
