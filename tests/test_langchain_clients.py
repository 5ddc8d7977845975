"""LangChain's ChatOpenAI and ChatAnthropic, clients nobody here wrote, against the facades on
loopback (the recorded upstream behind the gateway): plain and streamed answers, usage, and tool
calls aggregated from streamed chunks the way LangChain users read them."""

from __future__ import annotations

from typing import Any

import pytest
from langchain_anthropic import ChatAnthropic
from langchain_core.messages import AIMessageChunk, BaseMessageChunk
from langchain_openai import ChatOpenAI

from tests.compat_support import ALL_RECORDINGS, expect, facade_gateway

STOP = ["NEVER IN THESE RECORDINGS"]
BY_MODEL = {expect(r).model: expect(r) for r in ALL_RECORDINGS}
TOOLS: list[dict[str, Any]] = [
    {"type": "function", "function": {"name": name, "description": name, "parameters": {
        "type": "object", "properties": {}, "additionalProperties": True}}}
    for name in ("GetWeatherArgs", "get_stock_price", "pelican_name_generator", "fixed_version")]


def _sum(chunks: list[BaseMessageChunk]) -> AIMessageChunk:
    total = chunks[0]
    for chunk in chunks[1:]:
        total = total + chunk  # type: ignore[assignment]
    assert isinstance(total, AIMessageChunk)
    return total


def _calls(message: Any) -> list[tuple[str, dict[str, Any]]]:
    return [(c["name"], c["args"]) for c in message.tool_calls]


def _text(content: Any) -> str:
    if isinstance(content, str):
        return content
    return "".join(b.get("text", "") for b in content if isinstance(b, dict) and b.get("type") == "text")


@pytest.mark.parametrize("model", ["openai/text-include-usage", "anthropic/text", "openai/parallel-tool-calls",
                                   "gemini/vertex-parallel-calls-partial-args"])
async def test_chat_openai(model: str) -> None:
    exp = BY_MODEL[model]
    async with facade_gateway() as url:
        llm = ChatOpenAI(base_url=f"{url}/v1", api_key="sk-client", model=model, max_retries=0,  # type: ignore[arg-type]
                         stream_usage=True).bind_tools(TOOLS)
        answer = await llm.ainvoke("go", stop=STOP)  # stop is translated for every provider
        streamed = _sum([chunk async for chunk in llm.astream("go", stop=STOP)])
    for message in (answer, streamed):
        assert _text(message.content) == exp.text
        assert _calls(message) == [(name, args) for _, name, args in exp.calls]
        assert message.usage_metadata is not None  # type: ignore[attr-defined]
        assert message.usage_metadata["input_tokens"] == exp.usage["input_tokens"]  # type: ignore[attr-defined]


@pytest.mark.parametrize("model", ["anthropic/text", "openai/text-include-usage", "anthropic/parallel-tool-use-empty-input",
                                   "openai/parallel-tool-calls"])
async def test_chat_anthropic(model: str) -> None:
    exp = BY_MODEL[model]
    async with facade_gateway() as url:
        llm = ChatAnthropic(base_url=url, api_key="sk-ant-client", model_name=model, max_retries=0,  # type: ignore[arg-type]
                            max_tokens=256, timeout=30, stop=None).bind_tools(TOOLS)
        answer = await llm.ainvoke("go", stop=STOP)  # stop is translated for every provider
        streamed = _sum([chunk async for chunk in llm.astream("go", stop=STOP)])
    for message in (answer, streamed):
        assert _text(message.content) == exp.text
        assert _calls(message) == [(name, args) for _, name, args in exp.calls]
        assert message.usage_metadata is not None  # type: ignore[attr-defined]
        assert message.usage_metadata["output_tokens"] == exp.usage["output_tokens"]  # type: ignore[attr-defined]
