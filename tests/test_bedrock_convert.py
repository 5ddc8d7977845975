"""Foundry requests -> Converse bodies (app/providers/bedrock_convert.py)."""

from __future__ import annotations

import base64

import pytest

from app.core.messages import AdapterError, Message, ReasoningBlock, ToolCall, ToolSpec
from app.providers.base import ProviderRequest
from app.providers.bedrock_convert import converse_request

PNG = base64.b64encode(b"\x89PNG\r\n\x1a\n" + b"\0" * 16).decode()
PDF = base64.b64encode(b"%PDF-1.7\n" + b"\0" * 16).decode()
TOOL = ToolSpec(name="get_weather", description="Weather by city",
                parameters={"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
                cache_control={"type": "ephemeral"})


def body(*messages: Message, **fields: object) -> dict[str, object]:
    return converse_request(ProviderRequest(model="m", messages=messages, **fields))  # type: ignore[arg-type]


def test_system_images_documents_and_cache_points() -> None:
    out = body(
        Message(role="system", content="You read contracts."),
        Message(role="user", content=[{"type": "image", "data": PNG, "media_type": "image/png"},
                                      {"type": "document", "data": PDF, "media_type": "application/pdf",
                                       "title": "Lease v2.pdf", "cache_control": {"type": "ephemeral"}},
                                      {"type": "text", "text": "How long is the term?"}]),
        cache_control={"type": "ephemeral"},
    )
    assert out["system"] == [{"text": "You read contracts."}, {"cachePoint": {"type": "default"}}]
    assert out["messages"] == [{"role": "user", "content": [
        {"image": {"format": "png", "source": {"bytes": PNG}}},
        {"document": {"format": "pdf", "name": "Lease v2 pdf", "source": {"bytes": PDF}}},
        {"cachePoint": {"type": "default"}},
        {"text": "How long is the term?"},
    ]}]


def test_a_media_url_is_refused_naming_the_field() -> None:
    with pytest.raises(AdapterError) as caught:
        body(Message(role="user", content=[{"type": "image", "url": "https://example.com/cat.png"}]))
    assert caught.value.field == "messages.0.content.0.url"


def test_tool_loop_with_signed_reasoning_round_trips() -> None:
    call = ToolCall(id="tooluse_1", name="get_weather", arguments={"city": "Paris"})
    out = body(
        Message(role="user", content="Weather in Paris?"),
        Message(role="assistant", content="Checking.", tool_calls=(call,),
                reasoning=(ReasoningBlock(text="Need the tool.", signature="sig-1", provider="bedrock"),
                           ReasoningBlock(text="not mine", signature="other", provider="anthropic"),
                           ReasoningBlock(redacted="UkVEQUNURUQ=", provider="bedrock"))),
        Message(role="tool", tool_call_id="tooluse_1", content="18C", is_error=False),
        tools=(TOOL,), tool_choice="required",
    )
    assert out["messages"][1] == {"role": "assistant", "content": [
        {"reasoningContent": {"reasoningText": {"text": "Need the tool.", "signature": "sig-1"}}},
        {"reasoningContent": {"redactedContent": "UkVEQUNURUQ="}},
        {"text": "Checking."},
        {"toolUse": {"toolUseId": "tooluse_1", "name": "get_weather", "input": {"city": "Paris"}}},
    ]}
    assert out["messages"][2] == {"role": "user", "content": [
        {"toolResult": {"toolUseId": "tooluse_1", "content": [{"text": "18C"}], "status": "success"}}]}
    assert out["toolConfig"] == {"tools": [
        {"toolSpec": {"name": "get_weather", "description": "Weather by city", "inputSchema": {"json": {
            "type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}}},
        {"cachePoint": {"type": "default"}}], "toolChoice": {"any": {}}}


@pytest.mark.parametrize(("choice", "wire"), [("auto", {"auto": {}}), ("get_weather", {"tool": {"name": "get_weather"}})])
def test_tool_choice(choice: str, wire: dict[str, object]) -> None:
    out = body(Message(role="user", content="hi"), tools=(TOOL,), tool_choice=choice)
    assert out["toolConfig"]["toolChoice"] == wire  # type: ignore[index]


@pytest.mark.parametrize(("fields", "field"), [
    ({"tools": (TOOL,), "tool_choice": "none"}, "tool_choice"),
    ({"tools": (TOOL,), "parallel_tool_calls": False}, "parallel_tool_calls"),
    ({"options": {"stream": True}}, "provider_options"),
    ({"tool_choice": "get_weather"}, "tool_choice"),
])
def test_what_converse_cannot_carry_is_refused_by_name(fields: dict[str, object], field: str) -> None:
    with pytest.raises(AdapterError) as caught:
        body(Message(role="user", content="hi"), **fields)
    assert caught.value.field == field


def test_inference_config_and_extra_fields_from_provider_options() -> None:
    out = body(Message(role="user", content="hi"), max_tokens=64, stop=("###",), options={
        "inferenceConfig": {"topP": 0.9},
        "additionalModelRequestFields": {"thinking": {"type": "enabled", "budget_tokens": 1024}}})
    assert out["inferenceConfig"] == {"maxTokens": 64, "stopSequences": ["###"], "topP": 0.9}  # no temperature invented
    assert out["additionalModelRequestFields"] == {"thinking": {"type": "enabled", "budget_tokens": 1024}}
