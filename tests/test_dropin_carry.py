"""Across formats, what has a meaning on the target is carried, never silently dropped where it
matters: Responses' `store` to the providers that store (OpenAI chat and Responses), a no-op where
nothing is stored; the bodies a loopback upstream RECEIVED prove it."""

from __future__ import annotations

import json
from typing import Any

import anthropic
import openai
import pytest

from app.api.compat.fields import FACADES, fate
from tests.compat_support import ALL_RECORDINGS, RecordedUpstream, expect, facade_gateway


def openai_sdk(url: str) -> openai.AsyncOpenAI:
    return openai.AsyncOpenAI(base_url=f"{url}/v1", api_key="sk-gateway-client", max_retries=0)


@pytest.mark.parametrize("store", [False, True, None])
async def test_responses_store_is_carried_to_chat_as_sent(store: bool | None) -> None:
    upstream = RecordedUpstream()
    extra: dict[str, Any] = {} if store is None else {"store": store}
    async with facade_gateway(upstream) as url, openai_sdk(url) as client:
        answer = await client.responses.create(model="openai/text-include-usage", input="hi", **extra)
    assert answer.status == "completed"
    sent = upstream.requests[-1]
    assert "messages" in sent  # the chat wire: translated
    assert sent.get("store", "absent") == ("absent" if store is None else store)  # nothing invented


async def test_responses_store_is_a_no_op_where_nothing_is_stored() -> None:
    upstream = RecordedUpstream()
    async with facade_gateway(upstream) as url, openai_sdk(url) as client:
        for model in ("anthropic/text", "gemini/text"):
            answer = await client.responses.create(model=model, input="hi", store=False)
            assert answer.status == "completed"
            assert "store" not in upstream.requests[-1]


async def test_an_operator_allow_list_without_store_refuses_it_by_name() -> None:
    upstream = RecordedUpstream()
    allow = {"openai": ["top_p"]}
    async with facade_gateway(upstream, provider_options_allow=allow) as url, openai_sdk(url) as client:
        with pytest.raises(openai.BadRequestError) as raised:
            await client.responses.create(model="openai/text-include-usage", input="hi", store=False)
    assert raised.value.body["param"] == "store" and not upstream.requests


def test_the_tables_say_so() -> None:
    responses = FACADES[2]
    assert [fate(responses, "store", t) for t in ("openai", "anthropic", "openai-responses", "gemini")] == [
        "carried", "no-op", "passthrough", "no-op"]


CACHE = {"type": "ephemeral"}
HOUR = {"type": "ephemeral", "ttl": "1h"}


async def test_cache_control_is_kept_on_every_block_translated_to_anthropic() -> None:
    """Claude Code's rolling breakpoint sits on the last tool_result (or tool_use); translated (the
    proxy off), every block keeps its breakpoint as the client placed it."""
    upstream = RecordedUpstream()
    ask: list[Any] = [
        {"role": "user", "content": [{"type": "text", "text": "Run it.", "cache_control": CACHE}]},
        {"role": "assistant", "content": [{"type": "text", "text": "Running."},
                                          {"type": "tool_use", "id": "toolu_1", "name": "Bash",
                                           "input": {"command": "ls"}, "cache_control": HOUR}]},
        {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "toolu_1", "content": "a.txt",
                                      "cache_control": CACHE}]}]
    tool = {"name": "Bash", "input_schema": {"type": "object"}, "cache_control": CACHE}
    async with facade_gateway(upstream, dropin_passthrough=False) as url:
        async with anthropic.AsyncAnthropic(base_url=url, api_key="sk-ant-client", max_retries=0) as client:
            await client.messages.create(model="anthropic/text", max_tokens=64, messages=ask, tools=[tool])
    sent = upstream.requests[-1]["messages"]
    assert sent[0]["content"] == [{"type": "text", "text": "Run it.", "cache_control": CACHE}]
    assert sent[1]["content"][1] == {"type": "tool_use", "id": "toolu_1", "name": "Bash",
                                     "input": {"command": "ls"}, "cache_control": HOUR}
    assert sent[2]["content"] == [{"type": "tool_result", "tool_use_id": "toolu_1", "content": "a.txt",
                                   "cache_control": CACHE}]


@pytest.mark.parametrize("stream", [False, True])
async def test_anthropic_thinking_signature_round_trips_as_encrypted_reasoning(stream: bool) -> None:
    """Responses -> Anthropic: with `include: ["reasoning.encrypted_content"]` a reasoning item
    carries the thinking's signature (opaque); sent back, it is Anthropic's signed thinking block
    again, so a tool turn with thinking continues. Reasoning the gateway did not issue is not sent."""
    upstream = RecordedUpstream()
    async with facade_gateway(upstream) as url, openai_sdk(url) as client:
        ask: list[Any] = [{"role": "user", "content": "Weather in Paris?"}]
        if stream:
            async with client.responses.stream(model="anthropic/thinking-then-tool-use", input=ask,
                                               include=["reasoning.encrypted_content"]) as events:
                first = await events.get_final_response()
        else:
            first = await client.responses.create(model="anthropic/thinking-then-tool-use", input=ask,
                                                  include=["reasoning.encrypted_content"])
        output = [item.model_dump(exclude_none=True) for item in first.output]
        reasoning = [item for item in output if item["type"] == "reasoning"]
        assert reasoning and reasoning[0]["encrypted_content"].startswith("fgw-reasoning.")
        call = next(item for item in output if item["type"] == "function_call")
        foreign = {"type": "reasoning", "id": "rs_x", "summary": [], "encrypted_content": "gAAAAB-openai-opaque"}
        await client.responses.create(
            model="anthropic/text", include=["reasoning.encrypted_content"],
            input=[*ask, foreign, *output, {"type": "function_call_output", "call_id": call["call_id"], "output": "21"}])
        plain = await client.responses.create(model="anthropic/thinking-then-tool-use", input=ask)
    sent = upstream.requests[1]["messages"][1]["content"]
    assert sent[0] == {"type": "thinking", "thinking": reasoning[0]["summary"][0]["text"],
                       "signature": _recorded_signature("anthropic/thinking-then-tool-use")}
    assert [b["type"] for b in sent] == ["thinking", "tool_use"]  # the foreign item is not sent on
    assert all("encrypted_content" not in item.model_dump(exclude_none=True) for item in plain.output)


def _recorded_signature(model: str) -> str:
    """The thinking signature the recording streams (its signature_delta events)."""
    body = next(r.body for r in ALL_RECORDINGS if expect(r).model == model)
    return "".join(json.loads(line.removeprefix(b"data: "))["delta"]["signature"]
                   for line in body.splitlines() if b'"signature_delta"' in line)
