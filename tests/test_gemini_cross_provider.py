"""One Foundry conversation with a tool round trip, sent through all four adapters.

Each adapter (as the gateway builds it from its keys) talks to a loopback provider; the test reads
the request each one actually sent and checks that all four say the same thing in their own
wire's terms (system prompt, the two calls with their arguments, each result matched to its
call, the follow-up question), then that a recorded tool-call answer from each provider comes
back as the same canonical shape.
"""

from __future__ import annotations

from typing import Any

import orjson
import pytest

from app.core.accumulator import Accumulator
from app.core.messages import Message, ToolCall, ToolSpec
from app.core.released import Released
from app.providers.base import ProviderRequest
from tests.support import recordings, serve
from tests.upstream_fakes import Scripted, http_adapter, sse

WEATHER = ToolSpec(name="get_weather", description="Current weather for a city",
                   parameters={"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]})
PARIS = ToolCall(id="call_paris", name="get_weather", arguments={"city": "Paris"})
ROME = ToolCall(id="call_rome", name="get_weather", arguments={"city": "Rome"})
CONVERSATION = (
    Message(role="system", content="You are terse."),
    Message(role="user", content="Weather in Paris and Rome?"),
    Message(role="assistant", content="Checking both.", tool_calls=(PARIS, ROME)),
    Message(role="tool", tool_call_id="call_paris", content='{"temp_c": 21}'),
    Message(role="tool", tool_call_id="call_rome", content="sunny, 25C"),
    Message(role="user", content="Which is warmer?"),
)
REQUEST = ProviderRequest(model="some-model", messages=CONVERSATION, tools=(WEATHER,), tool_choice="auto",
                          max_tokens=200)
# A recorded answer with one tool call, per provider.
ANSWERS = {
    "openai": ("openai-chat", "tool-call-single-include-usage"),
    "anthropic": ("anthropic", "thinking-then-tool-use"),
    "openai-responses": ("openai-responses", "function-call"),
    "gemini": ("gemini", "function-call"),
}


def answer(provider: str) -> bytes:
    folder, name = ANSWERS[provider]
    return next(r.body for r in recordings(folder) if r.name == name)


async def send(provider: str) -> tuple[dict[str, Any], Any]:
    """The JSON body the adapter sent, and the final event of its (recorded) answer."""
    fake = Scripted(lambda _: sse(answer(provider)))
    async with serve(fake.app()) as url:
        adapter = http_adapter(provider, url)
        stream = await adapter.open_stream(REQUEST)
        acc, events = Accumulator(model=REQUEST.model, provider=provider, block_ends=True), []
        async for batch in stream:
            events += acc.push_all(batch)
        await adapter.aclose()
    (request,) = fake.requests
    return request.body, Released.of(events, provider=provider).final(acc, "ok" if acc.completed else "error")


def said_by_openai(body: dict[str, Any]) -> dict[str, Any]:
    messages = body["messages"]
    assistant = next(m for m in messages if m["role"] == "assistant")
    return {
        "system": [m["content"] for m in messages if m["role"] == "system"],
        "user": [m["content"] for m in messages if m["role"] == "user"],
        "assistant": assistant["content"],
        "calls": [(c["id"], c["function"]["name"], orjson.loads(c["function"]["arguments"]))
                  for c in assistant["tool_calls"]],
        "results": [(m["tool_call_id"], m["content"]) for m in messages if m["role"] == "tool"],
        "tools": [(t["function"]["name"], t["function"]["parameters"]) for t in body["tools"]],
    }


def said_by_anthropic(body: dict[str, Any]) -> dict[str, Any]:
    blocks = [(m["role"], b) for m in body["messages"]
              for b in ([{"type": "text", "text": m["content"]}] if isinstance(m["content"], str) else m["content"])]
    return {
        "system": [body["system"]],
        "user": [b["text"] for role, b in blocks if role == "user" and b["type"] == "text"],
        "assistant": next(b["text"] for role, b in blocks if role == "assistant" and b["type"] == "text"),
        "calls": [(b["id"], b["name"], b["input"]) for _, b in blocks if b["type"] == "tool_use"],
        "results": [(b["tool_use_id"], b["content"]) for _, b in blocks if b["type"] == "tool_result"],
        "tools": [(t["name"], t["input_schema"]) for t in body["tools"]],
    }


def said_by_responses(body: dict[str, Any]) -> dict[str, Any]:
    items = body["input"]
    return {
        "system": [body["instructions"]],
        "user": [i["content"] for i in items if i.get("role") == "user"],
        "assistant": next(i["content"] for i in items if i.get("role") == "assistant"),
        "calls": [(i["call_id"], i["name"], orjson.loads(i["arguments"])) for i in items if i["type"] == "function_call"],
        "results": [(i["call_id"], i["output"]) for i in items if i["type"] == "function_call_output"],
        "tools": [(t["name"], t["parameters"]) for t in body["tools"]],
    }


def said_by_gemini(body: dict[str, Any]) -> dict[str, Any]:
    parts = [(c["role"], p) for c in body["contents"] for p in c["parts"]]
    calls = [p["functionCall"] for role, p in parts if "functionCall" in p]
    responses = [p["functionResponse"] for role, p in parts if "functionResponse" in p]
    # No ids on Gemini's wire: a response answers the call of the same name, in order.
    ids = [c.id for c in (PARIS, ROME)]
    assert [r["name"] for r in responses] == [c["name"] for c in calls]
    results = [r["response"] for r in responses]
    return {
        "system": [p["text"] for p in body["systemInstruction"]["parts"]],
        "user": [p["text"] for role, p in parts if role == "user" and "text" in p],
        "assistant": next(p["text"] for role, p in parts if role == "model" and "text" in p),
        "calls": [(i, c["name"], c["args"]) for i, c in zip(ids, calls, strict=True)],
        "results": [(i, r.get("output", orjson.dumps(r).decode())) for i, r in zip(ids, results, strict=True)],
        "tools": [(d["name"], d["parametersJsonSchema"]) for d in body["tools"][0]["functionDeclarations"]],
    }


READERS = {"openai": said_by_openai, "anthropic": said_by_anthropic, "openai-responses": said_by_responses,
           "gemini": said_by_gemini}
EXPECTED = {
    "system": ["You are terse."],
    "user": ["Weather in Paris and Rome?", "Which is warmer?"],
    "assistant": "Checking both.",
    "calls": [("call_paris", "get_weather", {"city": "Paris"}), ("call_rome", "get_weather", {"city": "Rome"})],
    "results": [("call_paris", '{"temp_c":21}'), ("call_rome", "sunny, 25C")],
    "tools": [("get_weather", {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]})],
}


def compact_json(text: str) -> str:
    """Tool outputs compared as JSON when they are JSON (Gemini sends an object as an object)."""
    try:
        return orjson.dumps(orjson.loads(text)).decode()
    except orjson.JSONDecodeError:
        return text


@pytest.mark.parametrize("provider", list(READERS))
async def test_same_conversation_says_the_same_to_every_provider(provider: str) -> None:
    body, final = await send(provider)
    said = READERS[provider](body)
    said["results"] = [(i, compact_json(content)) for i, content in said["results"]]
    assert said == EXPECTED
    # And the provider's recorded tool-call answer comes back in the one canonical shape.
    assert final.status == "ok" and final.stop_reason == "tool_calls"
    (call,) = final.message.tool_calls
    assert call.id and call.name and isinstance(dict(call.arguments), dict)


async def test_the_four_requests_carry_the_call_ids_where_the_wire_has_them() -> None:
    bodies = {provider: (await send(provider))[0] for provider in READERS}
    raw = {p: orjson.dumps(b).decode() for p, b in bodies.items()}
    for provider in ("openai", "anthropic", "openai-responses"):
        assert "call_paris" in raw[provider] and "call_rome" in raw[provider]
    assert "call_paris" not in raw["gemini"]  # Gemini matches results by name and order instead
