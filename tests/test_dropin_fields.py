"""What the facades accept, they carry: the request bodies a loopback upstream RECEIVED prove it.
A tool result's `is_error`, a tool's `strict` / `cache_control` / `eager_input_streaming`, the
parallel-call control (both spellings), `stop` <-> `stop_sequences` and the top-level
`cache_control`, sent with the official SDKs through either facade, to each provider's wire."""

from __future__ import annotations

from typing import Any

import anthropic
import httpx
import openai
import pytest
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import Route

from app.main import create_app
from tests.compat_support import RecordedUpstream, facade_gateway, settings_for
from tests.support import serve

SCHEMA = {"type": "object", "properties": {"expression": {"type": "string"}}, "required": ["expression"]}
CALL = {"type": "tool_use", "id": "toolu_1", "name": "calculator", "input": {"expression": "2+2"}}
FAILED = {"type": "tool_result", "tool_use_id": "toolu_1", "content": "division by zero", "is_error": True}
ANTHROPIC_TOOL = {"name": "calculator", "description": "Evaluate arithmetic", "input_schema": SCHEMA,
                  "cache_control": {"type": "ephemeral"}, "eager_input_streaming": True, "strict": True}
OPENAI_TOOL = {"type": "function", "function": {"name": "calculator", "description": "Evaluate arithmetic",
                                                "parameters": SCHEMA, "strict": True}}
OPENAI_CALL = {"id": "call_1", "type": "function", "function": {"name": "calculator", "arguments": '{"expression": "1/0"}'}}


def anthropic_sdk(url: str) -> anthropic.AsyncAnthropic:
    return anthropic.AsyncAnthropic(base_url=url, api_key="sk-ant-gateway-client", max_retries=0)


def openai_sdk(url: str) -> openai.AsyncOpenAI:
    return openai.AsyncOpenAI(base_url=f"{url}/v1", api_key="sk-gateway-client", max_retries=0)


ANTHROPIC_ASK: dict[str, Any] = {
    "max_tokens": 64,
    "messages": [{"role": "user", "content": "What is 1/0?"}, {"role": "assistant", "content": [CALL]},
                 {"role": "user", "content": [FAILED]}],
    "tools": [ANTHROPIC_TOOL],
    "tool_choice": {"type": "auto", "disable_parallel_tool_use": True},
    "stop_sequences": ["STOP"],
    "extra_body": {"cache_control": {"type": "ephemeral"}},
}


async def test_the_messages_facade_carries_every_field_to_anthropic() -> None:
    upstream = RecordedUpstream()
    async with facade_gateway(upstream) as url, anthropic_sdk(url) as client:
        await client.messages.create(model="anthropic/text", **ANTHROPIC_ASK)
    sent = upstream.requests[-1]
    assert sent["tools"] == [{"name": "calculator", "description": "Evaluate arithmetic", "input_schema": SCHEMA,
                              "strict": True, "cache_control": {"type": "ephemeral"}, "eager_input_streaming": True}]
    assert sent["tool_choice"] == {"type": "auto", "disable_parallel_tool_use": True}
    assert sent["stop_sequences"] == ["STOP"]
    assert sent["cache_control"] == {"type": "ephemeral"}
    assert sent["messages"][-1]["content"] == [{"type": "tool_result", "tool_use_id": "toolu_1",
                                                "content": "division by zero", "is_error": True}]


@pytest.mark.parametrize("model", ["openai/text-include-usage", "gemini/text", "openai-responses/function-call"])
async def test_the_messages_facade_translates_for_other_providers(model: str) -> None:
    """To OpenAI: `stop`, `parallel_tool_calls: false`, `function.strict`, the error kept in the
    text; cache_control and eager_input_streaming have no place there. To Gemini: stopSequences
    and `{"error": ...}`; parallel control refused (no such switch). To Responses: stop refused."""
    upstream = RecordedUpstream()
    async with facade_gateway(upstream) as url, anthropic_sdk(url) as client:
        if model.startswith("openai/"):
            await client.messages.create(model=model, **ANTHROPIC_ASK)
            sent = upstream.requests[-1]
            assert sent["stop"] == ["STOP"] and sent["parallel_tool_calls"] is False
            assert sent["tools"][0]["function"]["strict"] is True
            assert "cache_control" not in sent["tools"][0] and "cache_control" not in sent
            assert sent["messages"][-1] == {"role": "tool", "tool_call_id": "toolu_1",
                                            "content": "Error: division by zero"}
        elif model.startswith("gemini/"):
            with pytest.raises(anthropic.BadRequestError) as raised:
                await client.messages.create(model=model, **ANTHROPIC_ASK)
            assert "parallel_tool_calls" in raised.value.body["error"]["message"]
            ask = {**ANTHROPIC_ASK, "tool_choice": {"type": "auto"}}
            await client.messages.create(model=model, **ask)
            sent = upstream.requests[-1]
            assert sent["generationConfig"]["stopSequences"] == ["STOP"]
            assert sent["contents"][-1]["parts"] == [{"functionResponse": {
                "name": "calculator", "response": {"error": "division by zero"}}}]
        else:
            with pytest.raises(anthropic.BadRequestError) as raised:
                await client.messages.create(model=model, **ANTHROPIC_ASK)
            assert "stop" in raised.value.body["error"]["message"]
            ask = {k: v for k, v in ANTHROPIC_ASK.items() if k != "stop_sequences"}
            await client.messages.create(model=model, **ask)
            sent = upstream.requests[-1]
            assert sent["parallel_tool_calls"] is False and sent["tools"][0]["strict"] is True
            assert sent["input"][-1] == {"type": "function_call_output", "call_id": "toolu_1",
                                         "output": "Error: division by zero"}


@pytest.mark.parametrize("stream", [False, True])
async def test_the_chat_facade_carries_strict_parallel_and_stop(stream: bool) -> None:
    upstream = RecordedUpstream()
    messages: list[Any] = [{"role": "user", "content": "What is 1/0?"},
                           {"role": "assistant", "content": None, "tool_calls": [OPENAI_CALL]},
                           {"role": "tool", "tool_call_id": "call_1", "content": "division by zero"}]
    async with facade_gateway(upstream) as url, openai_sdk(url) as client:
        for model in ("openai/text-include-usage", "anthropic/text"):
            answer = await client.chat.completions.create(
                model=model, messages=messages, tools=[OPENAI_TOOL], parallel_tool_calls=False, stop="STOP",
                stream=stream)
            if stream:
                async for _ in answer:  # type: ignore[union-attr]
                    pass
            sent = upstream.requests[-1]
            if model.startswith("openai/"):
                assert sent["tools"][0]["function"]["strict"] is True
                # a same-wire request goes as the client wrote it (DESIGN.md section 10)
                assert sent["parallel_tool_calls"] is False and sent["stop"] == "STOP"
            else:
                assert sent["tools"][0]["strict"] is True
                assert sent["tool_choice"] == {"type": "auto", "disable_parallel_tool_use": True}
                assert sent["stop_sequences"] == ["STOP"]


async def test_delivery_only_tool_flags_are_accepted() -> None:
    """Vercel's @ai-sdk/anthropic sets `eager_input_streaming` on every tool: a 400 before."""
    async with facade_gateway() as url, anthropic_sdk(url) as client:
        tool = {"name": "calculator", "input_schema": SCHEMA, "eager_input_streaming": True}
        answer = await client.messages.create(model="mock/simple", max_tokens=64, tools=[tool],  # type: ignore[list-item]
                                              messages=[{"role": "user", "content": "hi"}])
    assert answer.content


async def test_is_error_only_on_tool_messages_and_booleans() -> None:
    async with facade_gateway() as url, anthropic_sdk(url) as client:
        bad = {**FAILED, "is_error": "yes"}
        with pytest.raises(anthropic.BadRequestError) as raised:
            await client.messages.create(model="mock/simple", max_tokens=64, messages=[
                {"role": "user", "content": "q"}, {"role": "assistant", "content": [CALL]},
                {"role": "user", "content": [bad]}])  # type: ignore[list-item]
    assert "messages.2.content.0.is_error" in raised.value.body["error"]["message"]


async def test_the_native_api_carries_them_too() -> None:
    """/v1/generate: `stop`, `parallel_tool_calls`, `cache_control`, a tool message's `is_error`
    and a tool's `strict`, to Anthropic's wire."""
    upstream = RecordedUpstream()
    body = {"model": "anthropic/text", "max_tokens": 64, "stop": ["STOP"], "parallel_tool_calls": False,
            "cache_control": {"type": "ephemeral"},
            "tools": [{"name": "calculator", "parameters": SCHEMA, "strict": True,
                       "cache_control": {"type": "ephemeral"}}],
            "messages": [{"role": "user", "content": "What is 1/0?"},
                         {"role": "assistant", "tool_calls": [{"id": "toolu_1", "name": "calculator",
                                                               "arguments": {"expression": "1/0"}}]},
                         {"role": "tool", "tool_call_id": "toolu_1", "content": "division by zero", "is_error": True}]}
    async with facade_gateway(upstream) as url, httpx.AsyncClient(base_url=url) as client:
        answer = await client.post("/v1/generate", json=body)
        assert answer.status_code == 200, answer.text
        wrong = await client.post("/v1/generate", json={**body, "messages": [
            {"role": "user", "content": "hi", "is_error": True}]})
        assert wrong.status_code == 422 and "is_error" in wrong.text
    sent = upstream.requests[-1]
    assert sent["stop_sequences"] == ["STOP"] and sent["cache_control"] == {"type": "ephemeral"}
    assert sent["tool_choice"] == {"type": "auto", "disable_parallel_tool_use": True}
    assert sent["tools"][0]["strict"] is True and sent["tools"][0]["cache_control"] == {"type": "ephemeral"}
    assert sent["messages"][-1]["content"][0]["is_error"] is True


OUTPUT = {"type": "object", "properties": {"answer": {"type": "integer"}}, "required": ["answer"],
          "additionalProperties": False}


@pytest.mark.parametrize("model", ["anthropic/text", "openai/text-include-usage", "gemini/text",
                                   "openai-responses/function-call"])
async def test_output_config_is_structured_output_everywhere(model: str) -> None:
    """What `messages.parse` sends: `output_config.format` (translated for each provider);
    `effort` goes to Anthropic and is refused, naming it, elsewhere."""
    upstream = RecordedUpstream()
    ask: dict[str, Any] = {"max_tokens": 64, "messages": [{"role": "user", "content": "6*7?"}]}
    async with facade_gateway(upstream) as url, anthropic_sdk(url) as client:
        await client.messages.create(model=model, **ask,
                                     output_config={"format": {"type": "json_schema", "schema": OUTPUT}})
        sent = upstream.requests[-1]
        if model.startswith("anthropic/"):
            await client.messages.create(model=model, **ask, output_config={
                "effort": "low", "format": {"type": "json_schema", "schema": OUTPUT}})
            assert upstream.requests[-1]["output_config"] == {"effort": "low",
                                                              "format": {"type": "json_schema", "schema": OUTPUT}}
        else:
            with pytest.raises(anthropic.BadRequestError) as raised:
                await client.messages.create(model=model, **ask, output_config={"effort": "low"})
            assert "output_config" in raised.value.body["error"]["message"]
    if model.startswith("anthropic/"):
        assert sent["output_config"] == {"format": {"type": "json_schema", "schema": OUTPUT}}
    elif model.startswith("openai/"):
        assert sent["response_format"] == {"type": "json_schema", "json_schema": {
            "name": "output", "schema": OUTPUT, "strict": True}}
    elif model.startswith("gemini/"):
        config = sent["generationConfig"]
        assert config["responseMimeType"] == "application/json" and config["responseJsonSchema"] == OUTPUT
    else:
        assert sent["text"] == {"format": {"type": "json_schema", "name": "output", "schema": OUTPUT, "strict": True}}


async def test_count_tokens_is_served_by_an_anthropic_upstream() -> None:
    received: list[dict[str, Any]] = []

    async def count(request: Request) -> JSONResponse:
        received.append(await request.json())
        return JSONResponse({"input_tokens": 42})

    upstream = Starlette(routes=[Route("/v1/messages/count_tokens", count, methods=["POST"])])
    async with serve(upstream) as up, serve(create_app(settings_for(up))) as url, anthropic_sdk(url) as client:
        counted = await client.messages.count_tokens(
            model="anthropic/claude-x", messages=[{"role": "user", "content": "hi"}], system="Be brief.",
            tools=[ANTHROPIC_TOOL])  # type: ignore[list-item]
        assert counted.input_tokens == 42
        with pytest.raises(anthropic.BadRequestError) as raised:  # Anthropic's error shape, naming the model
            await client.messages.count_tokens(model="openai/gpt-x", messages=[{"role": "user", "content": "hi"}])
        assert raised.value.body["type"] == "error" and "count_tokens" in raised.value.body["error"]["message"]
        with pytest.raises(anthropic.NotFoundError) as missing:
            await client.messages.count_tokens(model="nowhere/x", messages=[{"role": "user", "content": "hi"}])
        assert missing.value.body["type"] == "error"
    assert received == [{"model": "claude-x", "messages": [{"role": "user", "content": "hi"}], "system": "Be brief.",
                         "tools": [{"name": "calculator", "description": "Evaluate arithmetic", "input_schema": SCHEMA,
                                    "strict": True, "cache_control": {"type": "ephemeral"},
                                    "eager_input_streaming": True}]}]
