"""A relayed same-wire stream is still gated (DESIGN.md section 10): a validator blocks text
before the client sees it and the stream ends in the provider's own shape, read by the official
SDKs; every same-wire recording reaches the SDK as its provider sent it; tool-argument fragments
and `message_start` go out as they arrive (a loopback provider that sends each fragment only
once the client has the one before it)."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator
from typing import Any

import anthropic
import httpx
import openai
import orjson
import pytest
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import StreamingResponse
from starlette.routing import Route

from app.main import create_app
from app.providers.sse import SSEDecoder
from tests.compat_support import ALL_RECORDINGS, RecordedUpstream, facade_gateway, model_of, settings_for
from tests.support import serve, serving

HI = [{"role": "user", "content": "hi"}]


def deny(pattern: str) -> dict[str, Any]:
    return {"validators": [{"name": "regex_deny", "config": {"patterns": [pattern]}}]}


def events(body: bytes) -> list[tuple[str, str]]:
    decoder = SSEDecoder()
    return [(e.event, e.data) for e in [*decoder.feed(body), *decoder.flush()]]


async def test_a_block_on_messages_ends_with_refusal_before_the_text() -> None:
    async with facade_gateway() as url, anthropic.AsyncAnthropic(base_url=url, api_key="k", max_retries=0) as client:
        async with client.messages.stream(model="anthropic/text", max_tokens=64, messages=HI,
                                          extra_body=deny("(?i)hello")) as stream:
            kinds = [event.type async for event in stream]
            final = await stream.get_final_message()
    assert final.stop_reason == "refusal" and not [b for b in final.content if b.type == "text" and b.text]
    assert kinds[0] == "message_start" and "text" not in kinds  # no text delta ever went out


async def test_a_block_on_chat_ends_with_content_filter_before_the_text() -> None:
    upstream = RecordedUpstream()
    async with facade_gateway(upstream) as url, httpx.AsyncClient(base_url=url, timeout=30) as http:
        answer = await http.post("/v1/chat/completions", json={
            "model": "openai/text-include-usage", "messages": HI, "stream": True, **deny("(?i)capital")})
    assert b"capital" not in answer.content and b"Paris" not in answer.content
    chunks = [orjson.loads(d) for _, d in events(answer.content) if d != "[DONE]"]
    assert chunks[-1]["choices"][0]["finish_reason"] == "content_filter"
    assert answer.content.endswith(b"data: [DONE]\n\n")
    assert "validators" not in upstream.requests[-1]  # the gateway's own field stays with it


async def test_a_block_on_responses_ends_incomplete_with_content_filter() -> None:
    async with facade_gateway() as url, openai.AsyncOpenAI(base_url=f"{url}/v1", api_key="k", max_retries=0) as client:
        stream = await client.responses.create(model="openai-responses/text", input="hi", stream=True,
                                               extra_body=deny("(?i)capital"))
        seen = [event async for event in stream]
    assert seen[0].type == "response.created"
    assert seen[-1].type == "response.incomplete"
    assert seen[-1].response.incomplete_details.reason == "content_filter"
    assert not [e for e in seen if e.type == "response.output_text.delta"]
    assert seen[-1].sequence_number == len(seen) - 1  # numbered after the upstream's events


SAME_WIRE = {"openai-chat": "/v1/chat/completions", "anthropic": "/v1/messages", "openai-responses": "/v1/responses"}


@pytest.mark.parametrize("rec", [r for r in ALL_RECORDINGS if r.provider in SAME_WIRE and not r.expected.get("errors")],
                         ids=repr)
async def test_every_same_wire_recording_is_relayed_as_sent(rec: Any) -> None:
    body: dict[str, Any] = {"model": model_of(rec), "stream": True}
    body |= ({"input": "hi"} if rec.provider == "openai-responses" else {"messages": HI})
    if rec.provider == "anthropic":
        body["max_tokens"] = 64
    if rec.provider == "openai-chat":
        body["stream_options"] = {"include_usage": True}
    async with facade_gateway() as url, httpx.AsyncClient(base_url=url, timeout=30) as http:
        answer = await http.post(SAME_WIRE[rec.provider], json=body)
    assert answer.status_code == 200
    assert events(answer.content) == events(rec.body)


# -- fragments as they arrive ---------------------------------------------------------------------

FRAGMENTS = ['{"command": "', "python3 -c ", "'print(1)'", '"}']


def _frame(kind: str, data: dict[str, Any]) -> bytes:
    return b"event: " + kind.encode() + b"\ndata: " + orjson.dumps({"type": kind, **data}) + b"\n\n"


class LockstepUpstream:
    """An Anthropic Messages upstream that sends `message_start`, then waits until the client has
    it before any content; then each tool-argument fragment 0.5 s after the client got the one
    before it. `sent` / `seen` time each fragment leaving and arriving."""

    def __init__(self) -> None:
        self.seen: list[asyncio.Event] = [asyncio.Event() for _ in range(len(FRAGMENTS) + 1)]
        self.sent: list[float] = []

    async def _body(self) -> AsyncIterator[bytes]:
        yield _frame("message_start", {"message": {"id": "msg_1", "type": "message", "role": "assistant",
                                                   "model": "m", "content": [], "stop_reason": None,
                                                   "usage": {"input_tokens": 5, "output_tokens": 0}}})
        await asyncio.wait_for(self.seen[0].wait(), 10)  # the client has message_start before any content
        yield _frame("content_block_start", {"index": 0, "content_block": {"type": "tool_use", "id": "toolu_1",
                                                                           "name": "Bash", "input": {}}})
        for k, fragment in enumerate(FRAGMENTS):
            await asyncio.sleep(0.5)  # the scenario: a model writing a long argument slowly
            self.sent.append(time.monotonic())
            yield _frame("content_block_delta", {"index": 0, "delta": {"type": "input_json_delta",
                                                                       "partial_json": fragment}})
            await asyncio.wait_for(self.seen[k + 1].wait(), 10)  # not the next one before this one arrived
        yield _frame("content_block_stop", {"index": 0})
        yield _frame("message_delta", {"delta": {"stop_reason": "tool_use"}, "usage": {"output_tokens": 9}})
        yield _frame("message_stop", {})

    async def messages(self, request: Request) -> StreamingResponse:
        return StreamingResponse(self._body(), media_type="text/event-stream")

    def app(self) -> Starlette:
        return Starlette(routes=[Route("/v1/messages", self.messages, methods=["POST"])])


@pytest.mark.parametrize("model", ["anthropic/m", "lockstep-alias"])
async def test_message_start_and_each_fragment_reach_a_messages_client_as_they_come(model: str) -> None:
    """Relayed (`anthropic/m`) and through an alias (the same wire): each fragment arrives before
    the upstream sends the next, which it only does once the client has it; the lag is measured
    with a generous guard, not a benchmark."""
    upstream = LockstepUpstream()
    arrived: list[float] = []
    settings = settings_for("http://unused", aliases={"lockstep-alias": "anthropic/m"})
    async with serve(upstream.app()) as up:
        settings.anthropic_base_url = up
        async with serve(create_app(settings)) as url, \
                anthropic.AsyncAnthropic(base_url=url, api_key="k", max_retries=0) as client:
            async with client.messages.stream(model=model, max_tokens=64, messages=HI) as stream:
                async for event in stream:
                    if event.type == "message_start":
                        upstream.seen[0].set()
                    elif event.type == "input_json":
                        arrived.append(time.monotonic())
                        upstream.seen[len(arrived)].set()
                final = await stream.get_final_message()
    assert final.content[0].type == "tool_use" and final.content[0].input == {"command": "python3 -c 'print(1)'"}
    assert len(arrived) == len(FRAGMENTS)
    lags = [a - s for a, s in zip(arrived, upstream.sent, strict=True)]
    assert max(lags) < 2.0, lags  # a guard far above the 0.3 s the design asks for (shared CPU)


async def test_a_rewriting_validator_turns_the_relay_off() -> None:
    """`pii` with `action: redact` may release text other than the provider's, which its own
    events carry: the run's answer is translated instead (the gateway's ids), still passed through
    upstream; a judging validator keeps the relay (the provider's ids)."""
    upstream = RecordedUpstream()
    ask = {"model": "openai/text-include-usage", "messages": HI, "stream": True}
    redact = {"validators": [{"name": "pii", "config": {"action": "redact"}}]}
    async with facade_gateway(upstream) as url, httpx.AsyncClient(base_url=url, timeout=30) as http:
        translated = await http.post("/v1/chat/completions", json={**ask, **redact})
        relayed = await http.post("/v1/chat/completions", json={**ask, **deny("nothing-matches-this")})
    first = [orjson.loads(d) for _, d in events(translated.content) if d != "[DONE]"][0]
    assert first["id"] == "chatcmpl-" + translated.headers["x-stream-id"]
    assert orjson.loads(events(relayed.content)[0][1])["id"] == "chatcmpl-C2P1wP1damHwC6sXvGAIh5PMvH6wM"
    assert "validators" not in upstream.requests[0] and upstream.requests[0]["messages"] == HI


# -- a provider's broken frames -------------------------------------------------------------------

BROKEN = {
    "/v1/chat/completions": (b'data: {"id":"c1","object":"chat.completion.chunk","choices":[{"index":0,"delta":{"con\n\n'
                             b"data: [DONE]\n\n"),
    "/v1/responses": b"event: response.created\ndata: {\"type\":\"response.created\",\"resp\n\n",
}


@pytest.mark.parametrize(("path", "model"), [("/v1/chat/completions", "openai/gpt-x"),
                                             ("/v1/responses", "openai-responses/gpt-x")])
async def test_a_broken_first_frame_ends_the_relay_in_the_providers_shape_not_a_cut_connection(
        path: str, model: str) -> None:
    """The relay reads the first frame for the stream's head (its id, its `response`): a provider
    that sends cut JSON there used to fail the response itself, and the client's connection was cut
    with no end. The run ends `upstream_protocol_error`; the relay ends the stream with the error in
    the provider's own shape, as for any other failure."""

    async def broken(request: Request) -> StreamingResponse:
        async def body() -> AsyncIterator[bytes]:
            yield BROKEN[path]

        return StreamingResponse(body(), media_type="text/event-stream")

    ask: dict[str, Any] = {"model": model, "stream": True}
    ask |= {"input": "hi"} if path == "/v1/responses" else {"messages": HI}
    async with serving() as servers:
        up = await servers.add(Starlette(routes=[Route(path, broken, methods=["POST"])]))
        gateway = await servers.add(create_app(settings_for(up, records=False)))
        async with httpx.AsyncClient(base_url=gateway, timeout=30) as http:
            answer = await http.post(path, json=ask)
    assert answer.status_code == 200
    seen = events(answer.content)
    if path == "/v1/responses":
        assert seen[-1][0] == "response.failed", seen
        assert orjson.loads(seen[-1][1])["response"]["error"]["code"] == "server_error"
    else:
        assert seen[-1] == ("message", "[DONE]"), seen
        last = orjson.loads(seen[-2][1])
        assert last["choices"][0]["finish_reason"] == "error" and last["error"]["code"] == "upstream_protocol_error"
