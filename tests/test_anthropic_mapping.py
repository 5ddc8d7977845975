"""Foundry -> Anthropic Messages request mapping, the thinking round trip, and the same
conversation sent to the OpenAI and the Anthropic mapping, each checked against its documented shape."""

from __future__ import annotations

import json
from typing import Any

import pytest

from app.core.messages import AdapterError, Message, ReasoningBlock, ToolCall, ToolSpec
from app.providers.anthropic import (
    DEFAULT_MAX_TOKENS,
    build_anthropic_request,
    messages_to_anthropic,
    tool_choice_to_anthropic,
    tool_specs_to_anthropic,
)
from app.providers.anthropic_stream import AnthropicNormalizer
from app.providers.base import ProviderRequest
from app.providers.openai_chat import messages_to_openai, tool_specs_to_openai
from app.providers.sse import SSEDecoder
from tests.support import recordings, run_bytes

RECORDING = {r.name: r for r in recordings("anthropic")}
ADD = ToolSpec(
    name="add", description="Add two integers",
    parameters={"type": "object", "properties": {"a": {"type": "integer"}, "b": {"type": "integer"}},
                "required": ["a", "b"]},
)
MUL = ToolSpec(name="mul", parameters={"type": "object", "properties": {"x": {"type": "number"}}})


def user(text: str) -> Message:
    return Message(role="user", content=text)


def call(call_id: str, name: str = "add", **arguments: Any) -> ToolCall:
    return ToolCall(id=call_id, name=name, arguments=arguments)


def tool(call_id: str, content: str) -> Message:
    return Message(role="tool", tool_call_id=call_id, content=content)


# The conversation of DESIGN.md: system, user, assistant with a tool call, tool result, follow-up.
CONVERSATION = (
    Message(role="system", content="You are a calculator."),
    user("What is 2+2?"),
    Message(role="assistant", content="Let me add.", tool_calls=(call("call_1", a=2, b=2),)),
    tool("call_1", "4"),
    Message(role="assistant", content="2+2 is 4."),
    user("And 3+3?"),
)


def test_system_is_lifted_and_turns_alternate() -> None:
    system, turns = messages_to_anthropic(CONVERSATION)
    assert system == "You are a calculator."
    assert turns == [
        {"role": "user", "content": "What is 2+2?"},
        {"role": "assistant", "content": [
            {"type": "text", "text": "Let me add."},
            {"type": "tool_use", "id": "call_1", "name": "add", "input": {"a": 2, "b": 2}},
        ]},
        {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "call_1", "content": "4"}]},
        {"role": "assistant", "content": "2+2 is 4."},
        {"role": "user", "content": "And 3+3?"},
    ]


def test_several_system_messages_become_text_blocks_in_order() -> None:
    system, turns = messages_to_anthropic(
        [Message(role="system", content="A"), user("hi"), Message(role="system", content="B")]
    )
    assert system == [{"type": "text", "text": "A"}, {"type": "text", "text": "B"}]
    assert turns == [{"role": "user", "content": "hi"}]


def test_parallel_tool_results_are_one_user_turn_and_a_following_user_text_joins_it() -> None:
    _, turns = messages_to_anthropic([
        user("add and multiply"),
        Message(role="assistant", tool_calls=(call("t1", a=1, b=2), call("t2", "mul", x=3))),
        tool("t1", "3"),
        tool("t2", "9"),
        user("thanks, now explain"),
    ])
    assert turns[1] == {"role": "assistant", "content": [
        {"type": "tool_use", "id": "t1", "name": "add", "input": {"a": 1, "b": 2}},
        {"type": "tool_use", "id": "t2", "name": "mul", "input": {"x": 3}},
    ]}
    assert turns[2] == {"role": "user", "content": [
        {"type": "tool_result", "tool_use_id": "t1", "content": "3"},
        {"type": "tool_result", "tool_use_id": "t2", "content": "9"},
        {"type": "text", "text": "thanks, now explain"},
    ]}
    assert len(turns) == 3


@pytest.mark.parametrize(
    ("messages", "complaint"),
    [
        ([user("hi"), tool("nope", "x")], "does not answer"),
        ([user("hi"), Message(role="assistant", tool_calls=(call("t1"),)), user("and?")], "no tool result"),
        ([user("hi"), Message(role="assistant", tool_calls=(call("t1"), call("t2"))), tool("t1", "1")], "no tool result"),
        ([Message(role="system", content="only a system prompt")], "at least one"),
        ([{"role": "user", "content": "a dict"}], "not a Foundry Message"),
    ],
    ids=["stray-result", "unanswered", "half-answered", "system-only", "not-a-message"],
)
def test_conversations_the_api_would_refuse_raise_adapter_error(messages: list[Any], complaint: str) -> None:
    with pytest.raises(AdapterError, match=complaint):
        messages_to_anthropic(messages)


def test_reasoning_goes_first_signed_or_redacted_only_and_only_our_own() -> None:
    assistant = Message(
        role="assistant", content="Calling.", tool_calls=(call("t1", a=1, b=1),),
        reasoning=(
            ReasoningBlock(text="think", signature="sig-1", provider="anthropic"),
            ReasoningBlock(redacted="opaque-1", provider="anthropic"),
            ReasoningBlock(text="unsigned", provider="anthropic"),
            ReasoningBlock(text="theirs", signature="gemini-sig", provider="gemini"),
            ReasoningBlock(text="no provider", signature="sig-2"),
        ),
    )
    _, turns = messages_to_anthropic([user("go"), assistant, tool("t1", "2")])
    assert turns[1]["content"] == [
        {"type": "thinking", "thinking": "think", "signature": "sig-1"},
        {"type": "redacted_thinking", "data": "opaque-1"},
        {"type": "thinking", "thinking": "no provider", "signature": "sig-2"},
        {"type": "text", "text": "Calling."},
        {"type": "tool_use", "id": "t1", "name": "add", "input": {"a": 1, "b": 1}},
    ]


def _recorded_blocks(body: bytes) -> list[dict[str, Any]]:
    """The assistant content exactly as the recording streamed it (thinking, signature, tool input)."""
    blocks: dict[int, dict[str, Any]] = {}
    decoder = SSEDecoder()
    for event in decoder.feed(body) + decoder.flush():
        data = json.loads(event.data)
        if data["type"] == "content_block_start":
            blocks[data["index"]] = dict(data["content_block"], _json="")
        elif data["type"] == "content_block_delta":
            block, delta = blocks[data["index"]], data["delta"]
            if delta["type"] == "thinking_delta":
                block["thinking"] += delta["thinking"]
            elif delta["type"] == "signature_delta":
                block["signature"] += delta["signature"]
            elif delta["type"] == "text_delta":
                block["text"] += delta["text"]
            elif delta["type"] == "input_json_delta":
                block["_json"] += delta["partial_json"]
    out = []
    for block in blocks.values():
        raw = block.pop("_json")
        block.pop("caller", None)
        block.pop("citations", None)
        if block["type"] == "tool_use" and raw:
            block["input"] = json.loads(raw)
        out.append(block)
    return out


@pytest.mark.parametrize("name", ["thinking-then-tool-use", "redacted-thinking", "thinking-signature"])
def test_streamed_assistant_turn_is_sent_back_unchanged(name: str) -> None:
    """Thinking round trip: the final message of a stream, sent back, is the recorded content."""
    events, _ = run_bytes([RECORDING[name].body], AnthropicNormalizer(), provider="anthropic")
    released = events[-1].message
    assistant = Message(role="assistant", content=released.content, tool_calls=released.tool_calls,
                        reasoning=released.reasoning)
    follow = [tool(c.id, "1.0.0") for c in released.tool_calls] or [user("thanks")]
    _, turns = messages_to_anthropic([user("go"), assistant, *follow])
    sent = turns[1]["content"]
    sent = [{"type": "text", "text": sent}] if isinstance(sent, str) else sent
    assert sent == _recorded_blocks(RECORDING[name].body)


def test_tool_specs() -> None:
    assert tool_specs_to_anthropic([ADD, MUL]) == [
        {"name": "add", "description": "Add two integers", "input_schema": {
            "type": "object", "properties": {"a": {"type": "integer"}, "b": {"type": "integer"}},
            "required": ["a", "b"]}},
        {"name": "mul", "input_schema": {"type": "object", "properties": {"x": {"type": "number"}}}},
    ]
    with pytest.raises(AdapterError, match="duplicate"):
        tool_specs_to_anthropic([ADD, ADD])


@pytest.mark.parametrize(
    ("choice", "wire"),
    [(None, None), ("auto", {"type": "auto"}), ("none", {"type": "none"}), ("required", {"type": "any"}),
     ("mul", {"type": "tool", "name": "mul"})],
)
def test_tool_choice(choice: str | None, wire: dict[str, Any] | None) -> None:
    assert tool_choice_to_anthropic(choice, [ADD, MUL]) == wire


def test_tool_choice_without_tools() -> None:
    assert tool_choice_to_anthropic("auto", []) is None
    assert tool_choice_to_anthropic("none", []) is None
    for choice in ("required", "add"):
        with pytest.raises(AdapterError):
            tool_choice_to_anthropic(choice, [])
    with pytest.raises(AdapterError, match="names no tool"):
        tool_choice_to_anthropic("div", [ADD])


def request(**kw: Any) -> ProviderRequest:
    return ProviderRequest(model="claude-sonnet-4-6", messages=(user("hi"),), **kw)


def test_body_defaults_max_tokens_and_never_sends_temperature() -> None:
    body = build_anthropic_request(request(temperature=0.7))
    assert body == {"model": "claude-sonnet-4-6", "max_tokens": DEFAULT_MAX_TOKENS,
                    "messages": [{"role": "user", "content": "hi"}]}
    assert build_anthropic_request(request(max_tokens=10))["max_tokens"] == 10
    thinking = {"type": "enabled", "budget_tokens": 2000}
    assert build_anthropic_request(request(options={"thinking": thinking}))["max_tokens"] == 2000 + DEFAULT_MAX_TOKENS
    with pytest.raises(AdapterError):
        build_anthropic_request(request(max_tokens=0))


def test_provider_options_are_added_but_never_replace_the_gateways_fields() -> None:
    body = build_anthropic_request(request(
        tools=(ADD,), tool_choice="add",
        options={"top_k": 5, "metadata": {"user_id": "u"}, "stop_sequences": ["```"], "service_tier": None},
    ))
    assert body["top_k"] == 5 and body["metadata"] == {"user_id": "u"} and body["stop_sequences"] == ["```"]
    assert "service_tier" not in body  # None means "do not send"
    assert body["tool_choice"] == {"type": "tool", "name": "add"}
    for key in ("model", "messages", "stream", "system", "tool_choice", "max_tokens"):
        with pytest.raises(AdapterError, match=key):
            build_anthropic_request(request(options={key: "x"}))


def test_provider_options_tools_add_server_tools_after_the_requests_own() -> None:
    search = {"type": "web_search_20250305", "name": "web_search", "max_uses": 3}
    body = build_anthropic_request(request(tools=(ADD,), options={"tools": [search]}))
    assert [t["name"] for t in body["tools"]] == ["add", "web_search"] and body["tools"][1] == search
    assert build_anthropic_request(request(options={"tools": [search]}))["tools"] == [search]
    for bad in ("web_search", [{"name": "add2", "input_schema": {}}], [{"type": "custom", "name": "x"}],
                [{"type": "web_search_20250305"}]):
        with pytest.raises(AdapterError, match="server tool"):
            build_anthropic_request(request(options={"tools": bad}))
    with pytest.raises(AdapterError, match="duplicate"):
        build_anthropic_request(request(tools=(ADD,), options={"tools": [{"type": "bash_20250124", "name": "add"}]}))


# -- the same conversation through both providers' mappings ----------------------------------
# Shapes from the providers' API references: OpenAI Chat Completions `messages` / `tools`
# (platform.openai.com/docs/api-reference/chat/create) and Anthropic Messages `system` /
# `messages` / `tools` (docs.claude.com/en/api/messages), plus the tool-use guides' rules on
# where results go.


def check_openai_shape(messages: list[dict[str, Any]], tools: list[dict[str, Any]]) -> None:
    for spec in tools:
        assert spec["type"] == "function" and set(spec) == {"type", "function"}
        assert set(spec["function"]) <= {"name", "description", "parameters", "strict"}
        assert spec["function"]["parameters"]["type"] == "object"
    open_calls: set[str] = set()
    for m in messages:
        assert m["role"] in {"system", "user", "assistant", "tool"}
        if m["role"] == "tool":
            assert set(m) == {"role", "tool_call_id", "content"} and isinstance(m["content"], str)
            open_calls.remove(m["tool_call_id"])  # answers a call of the assistant just before
            continue
        assert not open_calls, "tool messages must directly follow the assistant's tool_calls"
        assert isinstance(m["content"], str) or (m["role"] == "assistant" and m["content"] is None)
        for c in m.get("tool_calls", ()):
            assert m["role"] == "assistant" and c["type"] == "function"
            assert isinstance(json.loads(c["function"]["arguments"]), dict)  # arguments: a JSON string
            open_calls.add(c["id"])
    assert not open_calls


def check_anthropic_shape(system: Any, messages: list[dict[str, Any]], tools: list[dict[str, Any]]) -> None:
    assert isinstance(system, str) or all(b["type"] == "text" for b in system)
    for spec in tools:
        assert set(spec) <= {"name", "description", "input_schema"} and spec["input_schema"]["type"] == "object"
    open_calls: set[str] = set()
    previous = None
    for m in messages:
        assert set(m) == {"role", "content"} and m["role"] in {"user", "assistant"}  # no system, no tool role
        assert m["role"] != previous, "roles alternate"
        previous = m["role"]
        blocks = [{"type": "text", "text": m["content"]}] if isinstance(m["content"], str) else m["content"]
        assert blocks
        results = [b for b in blocks if b["type"] == "tool_result"]
        assert blocks[: len(results)] == results, "tool_result blocks come first in their user turn"
        assert {b["tool_use_id"] for b in results} == open_calls, "every tool_use answered in the next turn"
        open_calls = set()
        for b in blocks:
            assert b["type"] in {"text", "tool_use", "tool_result", "thinking", "redacted_thinking"}
            if b["type"] == "tool_use":
                assert m["role"] == "assistant" and isinstance(b["input"], dict)  # input: an object
                open_calls.add(b["id"])
            if b["type"] == "tool_result":
                assert m["role"] == "user" and isinstance(b["content"], str)
            if b["type"] == "text":
                assert b["text"]
    assert not open_calls


def test_same_conversation_maps_to_both_documented_shapes() -> None:
    oa_messages, oa_tools = messages_to_openai(CONVERSATION), tool_specs_to_openai([ADD])
    check_openai_shape(oa_messages, oa_tools)
    system, an_messages = messages_to_anthropic(CONVERSATION)
    an_tools = tool_specs_to_anthropic([ADD])
    check_anthropic_shape(system, an_messages, an_tools)

    # And they say the same thing: the system prompt, the call, its arguments, its result, the texts.
    assert oa_messages[0] == {"role": "system", "content": system}
    oa_call = oa_messages[2]["tool_calls"][0]
    an_call = an_messages[1]["content"][1]
    assert (oa_call["id"], oa_call["function"]["name"]) == (an_call["id"], an_call["name"])
    assert json.loads(oa_call["function"]["arguments"]) == an_call["input"]
    assert oa_messages[3]["content"] == an_messages[2]["content"][0]["content"] == "4"
    assert oa_tools[0]["function"]["parameters"] == an_tools[0]["input_schema"]
    assert oa_tools[0]["function"]["description"] == an_tools[0]["description"]
    oa_texts = [m["content"] for m in oa_messages if m["role"] in ("user", "assistant")]
    an_texts = [b["text"] for m in an_messages
                for b in ([{"type": "text", "text": m["content"]}] if isinstance(m["content"], str) else m["content"])
                if b["type"] == "text"]
    assert oa_texts == an_texts
