"""The pure converters: messages both ways, tools, tool calls, tool_choice, request mapping."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import pytest

from app.core.messages import AdapterError, FrozenDict, Message, ReasoningBlock, ToolCall, ToolSpec
from app.providers.base import ProviderRequest
from app.providers.openai_chat import (
    messages_to_openai,
    normalize_tool_calls,
    openai_to_messages,
    stream_params,
    tool_choice_to_openai,
    tool_specs_to_openai,
)

WEATHER = ToolSpec(
    name="get_weather", description="Weather for a city",
    parameters={"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
)

CONVERSATION = (
    Message(role="system", content="Be brief."),
    Message(role="user", content="Weather in Paris and Rome?", name="ana"),
    Message(role="assistant", content="", tool_calls=(
        ToolCall(id="call_1", name="get_weather", arguments={"city": "Paris"}),
        ToolCall(id="call_2", name="get_weather", arguments={"city": "Rome", "opts": {"units": ["c"]}}),
    )),
    Message(role="tool", content="18C", tool_call_id="call_1"),
    Message(role="tool", content="24C", tool_call_id="call_2"),
    Message(role="assistant", content="Paris 18C, Rome 24C.", tool_calls=(ToolCall(id="call_3", name="noop"),)),
    Message(role="assistant", content="Done."),
)


def test_messages_to_openai_wire_shape() -> None:
    wire = messages_to_openai(CONVERSATION)
    assert wire[0] == {"role": "system", "content": "Be brief."}
    assert wire[1] == {"role": "user", "content": "Weather in Paris and Rome?", "name": "ana"}
    assert wire[2] == {"role": "assistant", "content": None, "tool_calls": [
        {"id": "call_1", "type": "function", "function": {"name": "get_weather", "arguments": '{"city":"Paris"}'}},
        {"id": "call_2", "type": "function",
         "function": {"name": "get_weather", "arguments": '{"city":"Rome","opts":{"units":["c"]}}'}},
    ]}
    assert wire[3] == {"role": "tool", "tool_call_id": "call_1", "content": "18C"}
    assert wire[5]["content"] == "Paris 18C, Rome 24C." and wire[5]["tool_calls"][0]["function"]["arguments"] == "{}"


def test_round_trip_with_tool_calls_and_tool_messages() -> None:
    back = openai_to_messages(messages_to_openai(CONVERSATION))
    assert back == CONVERSATION
    assert isinstance(back[2].tool_calls[1].arguments, FrozenDict)
    assert messages_to_openai(back) == messages_to_openai(CONVERSATION)


def test_fields_without_a_place_on_the_wire_are_dropped() -> None:
    tool = Message(role="tool", content="x", tool_call_id="c", name="get_weather")
    thinking = Message(role="assistant", content="a", reasoning=(ReasoningBlock(text="hmm"),))
    assert messages_to_openai([tool, thinking]) == [
        {"role": "tool", "tool_call_id": "c", "content": "x"}, {"role": "assistant", "content": "a"}]


def test_messages_to_openai_refuses_non_messages() -> None:
    with pytest.raises(AdapterError, match=r"messages\[0\]"):
        messages_to_openai([{"role": "user", "content": "hi"}])  # type: ignore[list-item]


@pytest.mark.parametrize(("payload", "match"), [
    ("hello", "must be a list"),
    ([7], r"messages\[0\] is not an object"),
    ([{"role": "developer", "content": "x"}], "role 'developer'"),
    ([{"content": "x"}], "role None"),
    ([{"role": "user", "content": "x", "refusal": None}], "outside the schema: refusal"),
    ([{"role": "tool", "content": "x", "tool_call_id": "c", "name": "n"}], "outside the schema: name"),
    ([{"role": "user", "content": [{"type": "text", "text": "x"}]}], "content must be a string"),
    ([{"role": "user", "content": ""}], "content"),
    ([{"role": "user"}], "content"),
    ([{"role": "assistant", "content": None}], "content"),
    ([{"role": "tool", "content": "x"}], "tool_call_id"),
    ([{"role": "user", "content": "x", "tool_calls": []}], "outside the schema: tool_calls"),
    ([{"role": "assistant", "tool_calls": {"id": "c"}}], "must be a list"),
    ([{"role": "assistant", "tool_calls": [{"id": "c", "function": {"name": "f"}, "index": 0}]}], "only id, type"),
    ([{"role": "assistant", "tool_calls": [{"id": "c", "function": {"name": "f", "strict": True}}]}], "only name"),
    ([{"role": "assistant", "tool_calls": [{"id": "c", "type": "function", "function": "f"}]}], "only name"),
    ([{"role": "assistant", "tool_calls": [{"id": "c", "type": "custom", "function": {"name": "f"}}]}], "custom"),
    ([{"role": "assistant", "tool_calls": [{"id": "c", "function": {"name": "f", "arguments": "{"}}]}], "not valid JSON"),
    ([{"role": "assistant", "tool_calls": [{"id": "c", "function": {"name": "f", "arguments": "[1]"}}]}], "JSON object"),
    ([{"role": "assistant", "tool_calls": [{"id": "", "function": {"name": "f"}}]}], "id"),
    ([{"role": "assistant", "tool_calls": [{"id": "c", "function": {"name": ""}}]}], "name"),
    ([{"role": "assistant", "tool_calls": [{"id": "c", "function": {"name": "f"}},
                                          {"id": "c", "function": {"name": "g"}}]}], "used twice"),
])
def test_openai_to_messages_refuses_anything_outside_the_schema(payload: Any, match: str) -> None:
    with pytest.raises(AdapterError, match=match):
        openai_to_messages(payload)


def test_normalize_tool_calls_from_dicts_and_sdk_objects() -> None:
    class SDKCall:
        def model_dump(self) -> dict[str, Any]:
            return {"id": "c2", "type": "function", "function": {"name": "g", "arguments": '{"n": [1, 2]}'},
                    "extra_from_server": 1}

    calls = normalize_tool_calls([
        {"id": "c1", "type": "function", "function": {"name": "f", "arguments": ""}},
        SDKCall(),
        {"id": "c3", "function": {"name": "h", "arguments": {"already": "parsed"}}},
    ])
    assert calls == (ToolCall(id="c1", name="f"), ToolCall(id="c2", name="g", arguments={"n": [1, 2]}),
                     ToolCall(id="c3", name="h", arguments={"already": "parsed"}))
    assert normalize_tool_calls(None) == ()
    with pytest.raises(TypeError):
        calls[1].arguments["n"] = 3  # type: ignore[index]


@pytest.mark.parametrize(("raw", "match"), [
    ("c", "must be a list"),
    ([None], "not an object"),
    ([{"id": "c"}], "function is missing"),
    ([{"id": "c", "function": {"name": "f", "arguments": "not json"}}], "not valid JSON"),
    ([{"id": "c", "function": {"name": "f", "arguments": 3}}], "JSON object"),
    ([{"function": {"name": "f"}}], "id"),
])
def test_normalize_tool_calls_errors(raw: Any, match: str) -> None:
    with pytest.raises(AdapterError, match=match):
        normalize_tool_calls(raw)


def test_tool_specs_to_openai() -> None:
    bare = ToolSpec(name="noop")
    assert tool_specs_to_openai([WEATHER, bare, {"name": "dict_tool", "parameters": {"type": "object"}}]) == [
        {"type": "function", "function": {
            "name": "get_weather", "description": "Weather for a city",
            "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}},
        {"type": "function", "function": {"name": "noop", "parameters": {"type": "object", "properties": {}}}},
        {"type": "function", "function": {"name": "dict_tool", "parameters": {"type": "object"}}},
    ]


@pytest.mark.parametrize(("tools", "match"), [
    ([WEATHER, WEATHER], "duplicate tool name: get_weather"),
    ([{"name": "bad name!"}], "name"),
    ([{"name": "t", "parameters": {"type": "array"}}], "type 'object'"),
    ([{"name": "t", "parameters": {"type": "object", "required": ["x"]}}], "missing from properties"),
    ([{"name": "t", "parameters": {"type": "object", "properties": []}}], "properties must be an object"),
    ([{"name": "t", "extra": 1}], "extra"),
    (["get_weather"], "not a ToolSpec"),
])
def test_tool_specs_to_openai_errors(tools: Any, match: str) -> None:
    with pytest.raises(AdapterError, match=match):
        tool_specs_to_openai(tools)


@pytest.mark.parametrize(("choice", "tools", "wire"), [
    (None, [WEATHER], None),
    ("auto", [WEATHER], "auto"),
    ("none", [WEATHER], "none"),
    ("required", [WEATHER], "required"),
    ("get_weather", [WEATHER], {"type": "function", "function": {"name": "get_weather"}}),
    ("auto", [], None),
    ("none", [], None),
])
def test_tool_choice_mapping(choice: str | None, tools: list[ToolSpec], wire: Any) -> None:
    assert tool_choice_to_openai(choice, tools) == wire


@pytest.mark.parametrize(("choice", "tools"), [("required", []), ("get_weather", []), ("other", [WEATHER])])
def test_tool_choice_errors(choice: str, tools: list[ToolSpec]) -> None:
    with pytest.raises(AdapterError, match="tool_choice"):
        tool_choice_to_openai(choice, tools)


def _request(**kw: Any) -> ProviderRequest:
    return ProviderRequest(model="gpt-x", messages=(Message(role="user", content="hi"),), **kw)


def test_stream_params() -> None:
    params = stream_params(_request(tools=(WEATHER,), tool_choice="get_weather", max_tokens=9,
                                    options={"seed": 7, "temperature": None, "response_format": {"type": "json_object"}}))
    assert params == {
        "model": "gpt-x", "messages": [{"role": "user", "content": "hi"}], "stream": True,
        "stream_options": {"include_usage": True}, "tools": tool_specs_to_openai([WEATHER]),
        "tool_choice": {"type": "function", "function": {"name": "get_weather"}}, "max_completion_tokens": 9,
        "seed": 7, "response_format": {"type": "json_object"},
    }
    compat = stream_params(_request(max_tokens=5, temperature=0.0), include_usage=False, max_tokens_field="max_tokens")
    assert compat == {"model": "gpt-x", "messages": [{"role": "user", "content": "hi"}], "stream": True,
                      "temperature": 0.0, "max_tokens": 5}


@pytest.mark.parametrize("key", ["messages", "model", "stream", "stream_options", "tools"])
def test_provider_options_cannot_override_what_the_gateway_owns(key: str) -> None:
    with pytest.raises(AdapterError, match=key):
        stream_params(_request(options={key: SimpleNamespace()}))
