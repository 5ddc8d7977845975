"""The OpenAI facade driven by the official `openai` SDK, the gateway under uvicorn on loopback:
every recording of every provider through /v1/chat/completions (stream helper and plain), the
gateway's own tools kept server-side, a caller's tool round trip, a validator block, each error
class, a mid-stream failure the SDK raises on, and a disconnect that closes the upstream."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import httpx
import openai
import pytest

from app.main import create_app
from app.settings import Settings
from tests.compat_support import ALL_RECORDINGS, LockedAdapter, PickyAdapter, RecordedUpstream, expect, facade_gateway, model_of
from tests.support import serve

HI = [{"role": "user", "content": "hi"}]
FINISH = {"stop": "stop", "length": "length", "tool_calls": "tool_calls", "content_filter": "content_filter"}
CUT = {"length": openai.LengthFinishReasonError, "content_filter": openai.ContentFilterFinishReasonError}
REFUSALS = {model_of(r) for r in ALL_RECORDINGS if r.expected.get("refusal")}
"""A model's refusal comes back as OpenAI sends it: in `refusal`, with finish_reason `stop`."""
CALCULATOR = {"type": "function", "function": {
    "name": "calculator", "description": "Evaluate arithmetic",
    "parameters": {"type": "object", "properties": {"expression": {"type": "string"}}, "required": ["expression"]}}}


def sdk(url: str) -> openai.AsyncOpenAI:
    return openai.AsyncOpenAI(base_url=f"{url}/v1", api_key="sk-gateway-client", max_retries=0)


def usage_of(u: Any) -> dict[str, int]:
    return {"input_tokens": u.prompt_tokens, "output_tokens": u.completion_tokens,
            "cache_read_tokens": u.prompt_tokens_details.cached_tokens,
            "reasoning_tokens": u.completion_tokens_details.reasoning_tokens}


def calls_of(message: Any, *, with_ids: bool) -> list[tuple[str | None, str, dict[str, Any]]]:
    return [(c.id if with_ids else None, c.function.name, json.loads(c.function.arguments))
            for c in message.tool_calls or ()]


async def test_every_recording_through_the_openai_sdk() -> None:
    assert any(expect(r).usage["cache_read_tokens"] for r in ALL_RECORDINGS)  # cached tokens are exercised
    # Translated, same-wire routes too (the operator's switch): tests/test_dropin_relay.py relays them
    async with facade_gateway(dropin_passthrough=False) as url, sdk(url) as client:
        for exp in map(expect, ALL_RECORDINGS):
            model, name, with_ids = exp.model, exp.name, exp.ids
            expected_usage = exp.usage_of("input_tokens", "output_tokens", "cache_read_tokens", "reasoning_tokens")
            if exp.error:
                with pytest.raises(openai.InternalServerError):
                    await client.chat.completions.create(model=model, messages=HI)
                with pytest.raises(openai.APIError):
                    async with client.chat.completions.stream(model=model, messages=HI) as stream:
                        async for _ in stream:
                            pass
                continue
            # Plain JSON answer.
            answer = await client.chat.completions.create(model=model, messages=HI)
            message = answer.choices[0].message
            refused = model in REFUSALS
            finish = "stop" if refused else FINISH[exp.stop]
            assert (message.refusal if refused else message.content or "") == exp.text, name
            assert (getattr(message, "reasoning_content", None) or "") == exp.reasoning, name
            assert calls_of(message, with_ids=with_ids) == exp.calls, name
            assert answer.choices[0].finish_reason == finish, name
            assert usage_of(answer.usage) == expected_usage, name
            # The SDK's stream helper, with its own accumulation of the chunks.
            reasoning = []
            async with client.chat.completions.stream(model=model, messages=HI,
                                                      stream_options={"include_usage": True}) as stream:
                async for event in stream:
                    if event.type == "chunk" and event.chunk.choices:
                        reasoning.append(getattr(event.chunk.choices[0].delta, "reasoning_content", None) or "")
                cut = CUT.get(finish)  # the helper raises on a cut or filtered answer
                if cut is not None:
                    with pytest.raises(cut):
                        await stream.get_final_completion()
                    final = stream.current_completion_snapshot
                else:
                    final = await stream.get_final_completion()
            streamed = final.choices[0].message
            assert (streamed.refusal if refused else streamed.content or "") == exp.text, name
            assert "".join(reasoning) == exp.reasoning, name
            assert calls_of(streamed, with_ids=with_ids) == exp.calls, name
            assert final.choices[0].finish_reason == finish, name
            assert usage_of(final.usage) == expected_usage, name


async def test_gateway_tools_run_server_side_and_are_not_the_callers() -> None:
    async with serve(create_app(Settings())) as url, sdk(url) as client:
        raw = await client.chat.completions.with_raw_response.create(model="mock/tool_call", messages=HI)
        answer = raw.parse()
        assert answer.choices[0].message.tool_calls is None and answer.choices[0].finish_reason == "stop"
        assert answer.choices[0].message.content == "Calling calculatorSum is 4"
        # The gateway's tool activity is in the stream's transcript, by the id in x-stream-id.
        async with httpx.AsyncClient(base_url=url) as http:
            transcript = (await http.get(f"/v1/stream/{raw.headers['x-stream-id']}/transcript")).json()
        assert [(c["name"], c["gateway"], c["output"]) for c in transcript["tool_calls"]] == [("calculator", True, "4")]
        chunks = [c async for c in await client.chat.completions.create(model="mock/tool_call", messages=HI,
                                                                         stream=True)]
        assert not any(c.choices and c.choices[0].delta.tool_calls for c in chunks)
        assert "".join(c.choices[0].delta.content or "" for c in chunks if c.choices) == "Calling calculatorSum is 4"


async def test_a_callers_tool_round_trip() -> None:
    async with serve(create_app(Settings())) as url, sdk(url) as client:
        async with client.chat.completions.stream(model="mock/tool_call", messages=HI, tools=[CALCULATOR]) as stream:
            first = await stream.get_final_completion()
        choice = first.choices[0]
        assert choice.finish_reason == "tool_calls" and choice.message.role == "assistant"
        call = choice.message.tool_calls[0]
        assert (call.id, call.type, call.function.name, call.function.arguments) == (
            "call_mock_1", "function", "calculator", '{"expression": "2 + 2"}')
        follow = [*HI, {"role": "assistant", "content": choice.message.content,
                        "tool_calls": [{"id": call.id, "type": "function",
                                        "function": {"name": "calculator", "arguments": call.function.arguments}}]},
                  {"role": "tool", "tool_call_id": call.id, "content": [{"type": "text", "text": "4"}]}]
        second = await client.chat.completions.create(model="mock/tool_call", messages=follow, tools=[CALCULATOR])
        assert second.choices[0].message.content == "Sum is 4" and second.choices[0].finish_reason == "stop"


async def test_validators_through_extra_body_gate_release() -> None:
    ask = [{"role": "user", "content": "Mail jo@example.com now. The password is hunter2."}]
    extra = {"validators": [{"name": "pii", "config": {"action": "redact"}},
                            {"name": "regex_deny", "config": {"patterns": ["(?i)password"]}}]}
    async with serve(create_app(Settings())) as url, sdk(url) as client:
        answer = await client.chat.completions.create(model="mock/echo", messages=ask, extra_body=extra)
        assert answer.choices[0].finish_reason == "content_filter"
        assert "password" not in (answer.choices[0].message.content or "")
        chunks = [c async for c in await client.chat.completions.create(
            model="mock/echo", messages=ask, stream=True, extra_body=extra)]
        text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
        assert "hunter2" not in text and "jo@example.com" not in text
        assert [c.choices[0].finish_reason for c in chunks if c.choices and c.choices[0].finish_reason] == [
            "content_filter"]


@pytest.mark.parametrize(("ask", "error", "param"), [
    ({"model": "mock/simple", "messages": HI, "n": 2}, openai.BadRequestError, "n"),
    ({"model": "mock/simple", "messages": [{"role": "wizard", "content": "hi"}]}, openai.BadRequestError,
     "messages[0].role"),
    ({"model": "mock/simple", "messages": [{"role": "user", "content": [
        {"type": "text", "text": "hear"}, {"type": "input_audio", "input_audio": {"data": "AA==", "format": "wav"}}]}]},
     openai.BadRequestError, "messages[0].content[1].type"),
    ({"model": "mock/simple", "messages": [{"role": "user", "content": [
        {"type": "text", "text": "see"}, {"type": "image_url", "image_url": {"url": "http://x/y.png"}}]}]},
     openai.UnprocessableEntityError, "messages[0].content[1].image_url.url"),
    ({"model": "mock/simple", "messages": [{"role": "user", "content": [{"type": "txt", "text": "a"}]}]},
     openai.BadRequestError, "messages[0].content[0].type"),
    ({"model": "mock/simple", "messages": HI, "modalities": ["text", "audio"]}, openai.BadRequestError,
     "modalities"),
    ({"model": "mock/simple", "messages": HI, "audio": {"voice": "alloy", "format": "mp3"}},
     openai.BadRequestError, "audio"),
    ({"model": "mock/simple", "messages": HI, "logprobs": True}, openai.BadRequestError, "logprobs"),
    ({"model": "mock/simple", "messages": [{"role": "assistant", "tool_calls": [
        {"id": "c1", "type": "function", "function": {"name": "f", "arguments": "{nope"}}]}]},
     openai.BadRequestError, "messages[0].tool_calls[0].function.arguments"),
    ({"model": "mock/simple", "messages": HI, "extra_body": {"validators": [{"name": "nope"}]}},
     openai.BadRequestError, "validators[0].name"),
    ({"model": "mock/simple", "messages": HI, "extra_body": {"surprise": 1}}, openai.BadRequestError, "surprise"),
    ({"model": "mock/simple", "messages": []}, openai.BadRequestError, "messages"),
    ({"model": "picky/any", "messages": HI, "seed": 7}, openai.BadRequestError, "seed"),
    ({"model": "mock/simple", "messages": HI, "stop": ["a", "b", "c", "d", "e"]}, openai.BadRequestError, "stop"),
    ({"model": "picky/any", "messages": HI, "extra_body": {"provider_options": {"stop": ["x"]}}},
     openai.BadRequestError, "provider_options.stop"),
    ({"model": "nowhere/gpt", "messages": HI}, openai.NotFoundError, "model"),
    ({"model": "locked/any", "messages": HI}, openai.AuthenticationError, None),
    ({"model": "openai/status-429", "messages": HI}, openai.RateLimitError, None),
    ({"model": "openai/status-500", "messages": HI}, openai.InternalServerError, None),
])
async def test_errors_are_the_sdks_exception_classes(ask: dict[str, Any], error: type, param: str | None) -> None:
    async with facade_gateway(adapters={"locked": LockedAdapter(), "picky": PickyAdapter()}) as url, sdk(url) as client:
        for stream in (False, True):
            with pytest.raises(error) as raised:
                await client.chat.completions.create(**ask, stream=stream)
            body = raised.value.body
            assert isinstance(body, dict) and set(body) >= {"message", "type", "param", "code"}
            assert body["param"] == param
            if error is openai.RateLimitError:
                assert raised.value.response.headers["retry-after"] == "7"


async def test_a_failure_after_the_stream_began_makes_the_sdk_raise() -> None:
    broken = {"provider_options": {"fail_after": 2}}
    async with serve(create_app(Settings())) as url, sdk(url) as client:
        seen = []
        with pytest.raises(openai.APIError) as raised:
            async for chunk in await client.chat.completions.create(model="mock/lorem-20", messages=HI, stream=True,
                                                                    extra_body=broken):
                seen.append(chunk.choices[0].delta.content)
        assert "fail_after" in raised.value.message and raised.value.body["code"] == "upstream_disconnected"
        assert "lorem" in "".join(s or "" for s in seen)  # the text so far did arrive
        with pytest.raises(openai.InternalServerError):
            await client.chat.completions.create(model="mock/lorem-20", messages=HI, extra_body=broken)


async def test_client_disconnect_closes_the_upstream() -> None:
    upstream = RecordedUpstream(hold=True)
    async with facade_gateway(upstream) as url, sdk(url) as client:
        async with client.chat.completions.stream(model="openai/text-include-usage", messages=HI) as stream:
            async for event in stream:
                if event.type == "content.delta":
                    break
            assert not upstream.closed.is_set()
        await asyncio.wait_for(upstream.closed.wait(), timeout=5.0)


async def test_models_lists_what_is_served() -> None:
    async with facade_gateway(aliases={"fast": "openai/gpt-x"}) as url, sdk(url) as client:
        ids = [m.id async for m in client.models.list()]
        assert ids[:4] == ["mock/simple", "mock/tool_call", "mock/echo", "mock/lorem-100"]
        assert "fast" in ids and "openai/*" in ids and "anthropic/*" in ids
        assert (await client.models.retrieve("openai/gpt-4o-mini")).owned_by == "openai"
        with pytest.raises(openai.NotFoundError):
            await client.models.retrieve("nowhere/model")


async def test_the_wire_format() -> None:
    """The bytes any OpenAI-compatible client reads: role first, deltas, finish, usage, [DONE]."""
    async with serve(create_app(Settings())) as url, httpx.AsyncClient(base_url=url) as http:
        ask = {"model": "mock/simple", "messages": HI, "stream": True, "stream_options": {"include_usage": True}}
        response = await http.post("/v1/chat/completions", json=ask)
        assert response.headers["content-type"].startswith("text/event-stream")
        frames = [f for f in response.text.split("\n\n") if f and not f.startswith(":")]
        assert frames[-1] == "data: [DONE]"
        chunks = [json.loads(f.removeprefix("data: ")) for f in frames[:-1]]
        assert {c["object"] for c in chunks} == {"chat.completion.chunk"} and len({c["id"] for c in chunks}) == 1
        assert [c["choices"][0]["delta"] for c in chunks[:3]] == [
            {"role": "assistant", "content": "", "refusal": None}, {"content": "Hello"}, {"content": ", world"}]
        assert chunks[3]["choices"][0] == {"index": 0, "delta": {}, "logprobs": None, "finish_reason": "stop"}
        assert chunks[4]["choices"] == [] and chunks[4]["usage"]["total_tokens"] == 4
        # max_steps reached while the gateway runs tools: a limit cut, as `length`.
        paused = (await http.post("/v1/chat/completions", json={"model": "mock/tool_call", "messages": HI,
                                                                "max_steps": 1})).json()
        assert paused["choices"][0]["finish_reason"] == "length"
        assert paused["choices"][0]["message"]["content"] == "Calling calculator"


async def test_the_request_maps_to_the_canonical_one() -> None:
    """OpenAI's fields reach the provider through the canonical request (here an OpenAI upstream)."""
    upstream = RecordedUpstream()
    ask = [{"role": "developer", "content": "Be brief."},
           {"role": "user", "content": [{"type": "text", "text": "Weather "}, {"type": "text", "text": "in Paris?"}]},
           {"role": "assistant", "content": None, "tool_calls": [{"id": "call_1", "type": "function", "function": {
               "name": "weather", "arguments": '{"city": "Paris"}'}}]},
           {"role": "tool", "tool_call_id": "call_1", "content": "sunny"}]
    tool = {"type": "function", "function": {"name": "weather", "parameters": {
        "type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}}
    async with facade_gateway(upstream, dropin_passthrough=False) as url, sdk(url) as client:
        await client.chat.completions.create(
            model="openai/text-include-usage", messages=ask, tools=[tool], temperature=0.3,
            tool_choice={"type": "function", "function": {"name": "weather"}}, max_completion_tokens=50,
            stop=["\n\n"], seed=7, user="end-user-1")
    sent = upstream.requests[-1]
    assert sent["messages"] == [
        {"role": "system", "content": "Be brief."},
        {"role": "user", "content": [{"type": "text", "text": "Weather "}, {"type": "text", "text": "in Paris?"}]},
        {"role": "assistant", "content": None, "tool_calls": [
            {"id": "call_1", "type": "function", "function": {"name": "weather", "arguments": '{"city":"Paris"}'}}]},
        {"role": "tool", "tool_call_id": "call_1", "content": "sunny"}]
    assert sent["tools"][0]["function"]["name"] == "weather"
    assert sent["tool_choice"] == {"type": "function", "function": {"name": "weather"}}
    assert (sent["temperature"], sent["stop"], sent["seed"]) == (0.3, ["\n\n"], 7)
    assert 50 in (sent.get("max_tokens"), sent.get("max_completion_tokens")) and "user" not in sent


@pytest.mark.parametrize(("body", "param"), [
    (b'{"model": "mock/simple", "messages": [{"role": "user", "content": "bad \\udfff"}]}', "messages[0].content"),
    (b'{"model": "mock/simple", "messages": [{"role": "user", "content": "hi"}], "max_tokens": "10"}', "max_tokens"),
    (b'{"model": "mock/simple", "messages": [{"role": "user", "content": "hi"}], "stream": 1}', "stream"),
    (b'{"model": "mock/simple", "messages": [{"role": "user", "content": "hi"}', "body"),
])
async def test_hostile_bodies_are_400s_naming_the_field(body: bytes, param: str) -> None:
    """What no SDK would send (invalid Unicode, loose types, broken JSON), sent raw."""
    async with serve(create_app(Settings())) as url, httpx.AsyncClient(base_url=url) as http:
        response = await http.post("/v1/chat/completions", content=body, headers={"content-type": "application/json"})
    assert response.status_code == 400 and response.json()["error"]["param"] == param
