"""The Anthropic facade driven by the official `anthropic` SDK, the gateway under uvicorn on
loopback: every recording of every provider through /v1/messages (the stream helper with its
final-message accumulation, and plain), thinking with its signature, the gateway's own tools
kept server-side, a caller's tool round trip, a validator block, each error class, a mid-stream
failure the SDK raises on, and a disconnect that closes the upstream."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import anthropic
import httpx
import pytest

from app.main import create_app
from app.settings import Settings
from tests.compat_support import ALL_RECORDINGS, LockedAdapter, PickyAdapter, RecordedUpstream, expect, facade_gateway
from tests.support import serve

HI = [{"role": "user", "content": "hi"}]
STOP = {"stop": "end_turn", "length": "max_tokens", "tool_calls": "tool_use", "content_filter": "refusal"}
CALCULATOR = {"name": "calculator", "description": "Evaluate arithmetic",
              "input_schema": {"type": "object", "properties": {"expression": {"type": "string"}},
                               "required": ["expression"]}}


def sdk(url: str) -> anthropic.AsyncAnthropic:
    return anthropic.AsyncAnthropic(base_url=url, api_key="sk-ant-gateway-client", max_retries=0)


def usage_of(u: Any) -> dict[str, int]:
    """Back to canonical terms: Anthropic's input_tokens exclude cache reads and writes."""
    read, write = u.cache_read_input_tokens or 0, u.cache_creation_input_tokens or 0
    return {"input_tokens": u.input_tokens + read + write, "output_tokens": u.output_tokens,
            "cache_read_tokens": read, "cache_write_tokens": write}


def summary(message: Any, with_ids: bool) -> tuple[str, str, list[Any]]:
    text = "".join(b.text for b in message.content if b.type == "text")
    thinking = "".join(b.thinking for b in message.content if b.type == "thinking")
    calls = [(b.id if with_ids else None, b.name, b.input) for b in message.content if b.type == "tool_use"]
    return text, thinking, calls


async def test_every_recording_through_the_anthropic_sdk() -> None:
    async with facade_gateway(dropin_passthrough=False) as url, sdk(url) as client:
        for rec in ALL_RECORDINGS:
            exp = expect(rec)
            model, name, with_ids = exp.model, exp.name, exp.ids
            expected_usage = exp.usage_of("input_tokens", "output_tokens", "cache_read_tokens", "cache_write_tokens")
            if exp.error:
                with pytest.raises(anthropic.InternalServerError):
                    await client.messages.create(model=model, max_tokens=64, messages=HI)
                with pytest.raises(anthropic.APIStatusError) as raised:
                    async with client.messages.stream(model=model, max_tokens=64, messages=HI) as stream:
                        async for _ in stream:
                            pass
                assert raised.value.body["type"] == "error", name  # the in-stream `error` event
                continue
            answer = await client.messages.create(model=model, max_tokens=64, messages=HI)
            assert summary(answer, with_ids) == (exp.text, exp.reasoning, exp.calls), name
            assert answer.stop_reason == STOP[exp.stop], name
            assert usage_of(answer.usage) == expected_usage, name
            async with client.messages.stream(model=model, max_tokens=64, messages=HI) as stream:
                kinds = [event.type async for event in stream]
                final = await stream.get_final_message()
            assert kinds[0] == "message_start" and kinds[-1] == "message_stop", name
            assert summary(final, with_ids) == (exp.text, exp.reasoning, exp.calls), name
            assert final.stop_reason == STOP[exp.stop], name
            assert usage_of(final.usage) == expected_usage, name
            # Signed thinking keeps its signature, streamed or not (it must go back unchanged).
            signed = [bool(b.signature) for b in final.content if b.type == "thinking"]
            assert signed == [bool(b.signature) for b in answer.content if b.type == "thinking"], name
            if rec.provider == "anthropic":
                assert signed == rec.expected["thinking_signatures"], name
                for message in (answer, final):
                    redacted = [b for b in message.content if b.type == "redacted_thinking"]
                    assert len(redacted) == rec.expected["redacted_thinking_blocks"], name


async def test_gateway_tools_run_server_side_and_are_not_the_callers() -> None:
    async with serve(create_app(Settings())) as url, sdk(url) as client:
        answer = await client.messages.create(model="mock/tool_call", max_tokens=64, messages=HI)
        assert [b.type for b in answer.content] == ["text"] and answer.stop_reason == "end_turn"
        assert answer.content[0].text == "Calling calculatorSum is 4"
        async with client.messages.stream(model="mock/tool_call", max_tokens=64, messages=HI) as stream:
            final = await stream.get_final_message()
        assert [b.type for b in final.content] == ["text"] and final.content[0].text == "Calling calculatorSum is 4"


async def test_a_callers_tool_round_trip() -> None:
    async with serve(create_app(Settings())) as url, sdk(url) as client:
        ask: list[dict[str, Any]] = [{"role": "user", "content": [{"type": "text", "text": "2+2?"}]}]
        async with client.messages.stream(model="mock/tool_call", max_tokens=64, messages=ask,
                                          tools=[CALCULATOR]) as stream:
            first = await stream.get_final_message()
        assert first.stop_reason == "tool_use"
        use = first.content[-1]
        assert (use.type, use.id, use.name, use.input) == ("tool_use", "call_mock_1", "calculator",
                                                          {"expression": "2 + 2"})
        follow = [*ask, {"role": "assistant", "content": [b.model_dump(exclude_none=True) for b in first.content]},
                  {"role": "user", "content": [{"type": "tool_result", "tool_use_id": use.id, "content": "4"}]}]
        second = await client.messages.create(model="mock/tool_call", max_tokens=64, messages=follow,
                                              tools=[CALCULATOR], system="Be brief.")
        assert second.content[0].text == "Sum is 4" and second.stop_reason == "end_turn"


async def test_validators_through_extra_body_end_in_refusal() -> None:
    ask = [{"role": "user", "content": "Mail jo@example.com now. The password is hunter2."}]
    extra = {"validators": [{"name": "pii", "config": {"action": "redact"}},
                            {"name": "regex_deny", "config": {"patterns": ["(?i)password"]}}]}
    async with serve(create_app(Settings())) as url, sdk(url) as client:
        answer = await client.messages.create(model="mock/echo", max_tokens=64, messages=ask, extra_body=extra)
        assert answer.stop_reason == "refusal"
        assert "password" not in "".join(b.text for b in answer.content if b.type == "text")
        async with client.messages.stream(model="mock/echo", max_tokens=64, messages=ask, extra_body=extra) as stream:
            text = "".join([t async for t in stream.text_stream])
            final = await stream.get_final_message()
        assert final.stop_reason == "refusal" and "hunter2" not in text and "jo@example.com" not in text


@pytest.mark.parametrize(("ask", "error", "names"), [
    ({"messages": [{"role": "tool", "content": "hi"}]}, anthropic.BadRequestError, "messages.0.role"),
    ({"messages": [{"role": "user", "content": [{"type": "image", "source": {
        "type": "url", "url": "http://x/y.png"}}]}]}, anthropic.UnprocessableEntityError, "messages.0.content.0"),
    ({"messages": [{"role": "user", "content": [{"type": "search_result", "source": "x", "title": "t",
                                                   "content": []}]}]},
     anthropic.BadRequestError, "messages.0.content.0.type"),
    ({"messages": [{"role": "user", "content": [{"type": "tool_use", "id": "t", "name": "f", "input": {}}]}]},
     anthropic.BadRequestError, "messages.0.content.0.type"),
    ({"messages": [{"role": "user", "content": [{"type": "text"}]}]}, anthropic.BadRequestError,
     "messages.0.content.0.text"),
    ({"messages": HI, "extra_body": {"validators": [{"name": "nope"}]}}, anthropic.BadRequestError, "validators"),
    ({"messages": HI, "extra_body": {"n": 2}}, anthropic.BadRequestError, "n"),
    ({"messages": HI, "model": "picky/any", "service_tier": "auto"}, anthropic.BadRequestError,
     "service_tier is not allowed"),
    ({"messages": [{"role": "user", "content": "hi"}], "model": "nowhere/claude"}, anthropic.NotFoundError, "model"),
    ({"messages": HI, "model": "locked/any"}, anthropic.AuthenticationError, "invalid API key"),
    ({"messages": HI, "model": "anthropic/status-429"}, anthropic.RateLimitError, "429"),
    ({"messages": HI, "model": "anthropic/status-500"}, anthropic.InternalServerError, "500"),
])
async def test_errors_are_the_sdks_exception_classes(ask: dict[str, Any], error: type, names: str) -> None:
    async with facade_gateway(adapters={"locked": LockedAdapter(), "picky": PickyAdapter()}) as url, sdk(url) as client:
        for stream in (False, True):
            with pytest.raises(error) as raised:
                await client.messages.create(**{"model": "mock/simple", "max_tokens": 64, **ask}, stream=stream)
            body = raised.value.body
            assert body["type"] == "error" and names in body["error"]["message"]
            if error is anthropic.RateLimitError:
                assert raised.value.response.headers["retry-after"] == "7"


async def test_a_failure_after_the_stream_began_makes_the_sdk_raise() -> None:
    broken = {"provider_options": {"fail_after": 2}}
    async with serve(create_app(Settings())) as url, sdk(url) as client:
        seen = []
        with pytest.raises(anthropic.APIStatusError) as raised:
            async with client.messages.stream(model="mock/lorem-20", max_tokens=64, messages=HI,
                                              extra_body=broken) as stream:
                async for text in stream.text_stream:
                    seen.append(text)
        error = raised.value.body["error"]
        assert error["type"] == "api_error" and "fail_after" in error["message"]
        assert "lorem" in "".join(seen)
        with pytest.raises(anthropic.InternalServerError):
            await client.messages.create(model="mock/lorem-20", max_tokens=64, messages=HI, extra_body=broken)


async def test_client_disconnect_closes_the_upstream() -> None:
    upstream = RecordedUpstream(hold=True)
    async with facade_gateway(upstream) as url, sdk(url) as client:
        async with client.messages.stream(model="anthropic/text", max_tokens=64, messages=HI) as stream:
            async for event in stream:
                if event.type == "text":
                    break
            assert not upstream.closed.is_set()
        await asyncio.wait_for(upstream.closed.wait(), timeout=5.0)


async def test_models_in_anthropics_shape() -> None:
    async with facade_gateway() as url, sdk(url) as client:
        ids = [m.id async for m in client.models.list()]
        assert ids[0] == "mock/simple" and "anthropic/*" in ids
        assert (await client.models.retrieve("anthropic/claude-haiku-4-5")).type == "model"


async def test_the_wire_format() -> None:
    """The bytes any Anthropic client reads: `event:` lines in the documented order."""
    async with serve(create_app(Settings())) as url, httpx.AsyncClient(base_url=url) as http:
        ask = {"model": "mock/tool_call", "max_tokens": 64, "messages": HI, "stream": True, "tools": [CALCULATOR]}
        response = await http.post("/v1/messages", json=ask)
        assert response.headers["content-type"].startswith("text/event-stream")
        frames = [f.split("\n") for f in response.text.split("\n\n") if f and not f.startswith(":")]
        events = [(f[0].removeprefix("event: "), json.loads(f[1].removeprefix("data: "))) for f in frames]
        assert all(name == data["type"] for name, data in events)
        # the tool's argument fragments stream as they come (one delta each), not held until the call is whole
        tool_deltas = [data["delta"] for name, data in events[6:-3]]
        assert [name for name, _ in events] == [
            "message_start", "ping", "content_block_start", "content_block_delta", "content_block_stop",
            "content_block_start", *["content_block_delta"] * len(tool_deltas), "content_block_stop",
            "message_delta", "message_stop"]
        assert events[5][1]["content_block"] == {"type": "tool_use", "id": "call_mock_1", "name": "calculator",
                                                 "input": {}}
        assert len(tool_deltas) > 1 and {d["type"] for d in tool_deltas} == {"input_json_delta"}
        assert json.loads("".join(d["partial_json"] for d in tool_deltas)) == {"expression": "2 + 2"}
        assert events[-2][1]["delta"]["stop_reason"] == "tool_use"
        paused = (await http.post("/v1/messages", json={"model": "mock/tool_call", "max_tokens": 64, "messages": HI,
                                                        "max_steps": 1})).json()
        assert paused["stop_reason"] == "pause_turn" and paused["content"] == [{"type": "text",
                                                                                "text": "Calling calculator"}]


async def test_the_request_maps_to_the_canonical_one() -> None:
    """Anthropic's fields reach the provider through the canonical request (here an Anthropic
    upstream): the system prompt, thinking sent back with its signature, tool use and results."""
    upstream = RecordedUpstream()
    ask = [{"role": "user", "content": "Weather in Paris?"},
           {"role": "assistant", "content": [
               {"type": "thinking", "thinking": "Use the tool.", "signature": "sig-1"},
               {"type": "text", "text": "Checking."},
               {"type": "tool_use", "id": "toolu_1", "name": "weather", "input": {"city": "Paris"}}]},
           {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "toolu_1",
                                         "content": [{"type": "text", "text": "sunny"}]},
                                        {"type": "text", "text": "And tomorrow?"}]}]
    tool = {"name": "weather", "input_schema": {"type": "object", "properties": {"city": {"type": "string"}}}}
    async with facade_gateway(upstream, dropin_passthrough=False) as url, sdk(url) as client:
        await client.messages.create(model="anthropic/text", max_tokens=77, system=[{"type": "text", "text": "Brief."}],
                                     messages=ask, tools=[tool], tool_choice={"type": "any"},
                                     stop_sequences=["END"], metadata={"user_id": "u1"})
    sent = upstream.requests[-1]
    assert sent["system"] == "Brief."  # one text block without cache_control goes upstream as a string
    assert sent["messages"][1]["content"][0] == {"type": "thinking", "thinking": "Use the tool.", "signature": "sig-1"}
    assert sent["messages"][1]["content"][2] == {"type": "tool_use", "id": "toolu_1", "name": "weather",
                                                 "input": {"city": "Paris"}}
    results = sent["messages"][2]["content"]
    assert results[0]["type"] == "tool_result" and results[0]["tool_use_id"] == "toolu_1"
    assert results[-1] == {"type": "text", "text": "And tomorrow?"}
    assert sent["tool_choice"] == {"type": "any"} and sent["tools"][0]["name"] == "weather"
    assert (sent["max_tokens"], sent["stop_sequences"]) == (77, ["END"]) and "metadata" not in sent


@pytest.mark.parametrize(("body", "field"), [
    (b'{"model": "mock/simple", "max_tokens": 9, "messages": [{"role": "user", "content": "bad \\udfff"}]}',
     "messages.0.content"),
    (b'{"model": "mock/simple", "max_tokens": "10", "messages": [{"role": "user", "content": "hi"}]}', "max_tokens"),
    (b'{"model": "mock/simple", "max_tokens": 9, "messages": [{"role": "user", "content": "hi"}]', "body"),
])
async def test_hostile_bodies_are_400s_naming_the_field(body: bytes, field: str) -> None:
    """What no SDK would send (invalid Unicode, loose types, broken JSON), sent raw."""
    async with serve(create_app(Settings())) as url, httpx.AsyncClient(base_url=url) as http:
        response = await http.post("/v1/messages", content=body, headers={"content-type": "application/json"})
    error = response.json()["error"]
    assert response.status_code == 400 and error["type"] == "invalid_request_error" and field in error["message"]
