"""Same-wire routes are a transparent proxy (DESIGN.md section 10): a loopback provider records
what it RECEIVES (body, headers, query) and the client must get the provider's events as sent.
The request bodies are what Claude Code, the Codex CLI and today's SDKs send (the findings that
were refused or silently changed: context_management, a system message inside messages,
client_metadata, include of encrypted reasoning, namespace and web_search tools,
prompt_cache_key, store: false, anthropic-beta, cache_control on tool_use / tool_result)."""

from __future__ import annotations

from typing import Any

import httpx
import orjson
import pytest

from app.providers.sse import SSEDecoder
from tests.compat_support import RecordedUpstream, facade_gateway
from tests.support import recordings

RECORDINGS = {(r.provider, r.name): r for p in ("anthropic", "openai-chat", "openai-responses") for r in recordings(p)}

TOOL = {"name": "Bash", "description": "Run a shell command",
        "input_schema": {"type": "object", "properties": {"command": {"type": "string"}}}}
CLAUDE_CODE: dict[str, Any] = {
    "max_tokens": 32000,
    "system": [{"type": "text", "text": "You are Claude Code.", "cache_control": {"type": "ephemeral"}}],
    "messages": [
        {"role": "user", "content": "list the files"},
        {"role": "system", "content": "The user's shell is bash."},
        {"role": "assistant", "content": [{"type": "tool_use", "id": "toolu_1", "name": "Bash",
                                           "input": {"command": "ls"}, "cache_control": {"type": "ephemeral"}}]},
        {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "toolu_1", "content": "a.txt",
                                      "cache_control": {"type": "ephemeral"}}]},
    ],
    "tools": [TOOL],
    "metadata": {"user_id": "user_abc"},
    "context_management": {"edits": [{"type": "clear_thinking_20251015", "keep": "all"}]},
    "thinking": {"type": "enabled", "budget_tokens": 1024},
}
CODEX: dict[str, Any] = {
    "instructions": "You are Codex.",
    "input": [{"type": "message", "role": "user", "content": [{"type": "input_text", "text": "list the files"}]}],
    "tools": [{"type": "function", "name": "shell", "description": "Run a command", "strict": False,
               "parameters": {"type": "object", "properties": {"command": {"type": "array", "items": {"type": "string"}}}}},
              {"type": "web_search"},
              {"type": "namespace", "name": "mcp", "tools": []}],
    "tool_choice": "auto", "parallel_tool_calls": False,
    "reasoning": {"effort": "medium", "summary": "auto"},
    "store": False, "include": ["reasoning.encrypted_content"],
    "prompt_cache_key": "0199-session", "client_metadata": {"originator": "codex_exec"},
}
CHAT: dict[str, Any] = {
    "messages": [{"role": "user", "content": "hi"}],
    "store": False, "metadata": {"team": "a"}, "prompt_cache_key": "k1", "service_tier": "flex",
    "safety_identifier": "u1", "verbosity": "low", "some_future_field": {"x": 1},
}


def events(body: bytes) -> list[tuple[str, str]]:
    decoder = SSEDecoder()
    return [(e.event, e.data) for e in [*decoder.feed(body), *decoder.flush()]]


async def _post(upstream: RecordedUpstream, path: str, body: dict[str, Any], headers: dict[str, str] | None = None,
                **settings: Any) -> httpx.Response:
    async with facade_gateway(upstream, **settings) as url, httpx.AsyncClient(base_url=url, timeout=30) as client:
        return await client.post(path, json=body, headers=headers)


async def test_claude_code_request_reaches_anthropic_as_written() -> None:
    upstream = RecordedUpstream()
    body = {**CLAUDE_CODE, "model": "anthropic/text", "stream": True, "validators": []}
    answer = await _post(upstream, "/v1/messages?beta=true", body,
                         {"anthropic-beta": "context-1m-2025-08-07,interleaved-thinking-2025-05-14",
                          "anthropic-version": "2023-06-01"})
    assert answer.status_code == 200, answer.text
    sent, headers = upstream.requests[-1], upstream.headers[-1]
    assert sent == {**CLAUDE_CODE, "model": "text", "stream": True}  # the gateway's `validators` stripped
    assert headers["anthropic-beta"] == "context-1m-2025-08-07,interleaved-thinking-2025-05-14"
    assert headers["anthropic-version"] == "2023-06-01"  # the client's wins
    assert "sk-ant-test-upstream" in str(headers)  # the gateway's credential
    assert upstream.queries[-1] == "beta=true"
    assert events(answer.content) == events(RECORDINGS[("anthropic", "text")].body)


@pytest.mark.parametrize("name", ["thinking-then-tool-use", "web-search-server-tool", "code-execution-server-tool",
                                  "compaction-cache-read-usage", "redacted-thinking"])
async def test_every_anthropic_event_is_relayed_in_order(name: str) -> None:
    upstream = RecordedUpstream()
    answer = await _post(upstream, "/v1/messages", {**CLAUDE_CODE, "model": f"anthropic/{name}", "stream": True})
    assert answer.status_code == 200, answer.text
    assert events(answer.content) == events(RECORDINGS[("anthropic", name)].body)


async def test_codex_request_reaches_openai_responses_as_written() -> None:
    upstream = RecordedUpstream()
    body = {**CODEX, "model": "openai-responses/reasoning-text-function-call", "stream": True}
    answer = await _post(upstream, "/v1/responses", body, {"openai-beta": "responses=experimental"})
    assert answer.status_code == 200, answer.text
    assert upstream.requests[-1] == {**body, "model": "reasoning-text-function-call"}
    assert upstream.headers[-1]["openai-beta"] == "responses=experimental"
    assert "temperature" not in upstream.requests[-1]
    assert events(answer.content) == events(RECORDINGS[("openai-responses", "reasoning-text-function-call")].body)


@pytest.mark.parametrize("name", ["web-search-call", "code-interpreter-reasoning-summary"])
async def test_every_responses_event_is_relayed_in_order(name: str) -> None:
    upstream = RecordedUpstream()
    answer = await _post(upstream, "/v1/responses", {**CODEX, "model": f"openai-responses/{name}", "stream": True})
    assert answer.status_code == 200, answer.text
    assert events(answer.content) == events(RECORDINGS[("openai-responses", name)].body)


async def test_chat_request_reaches_openai_as_written() -> None:
    upstream = RecordedUpstream()
    body = {**CHAT, "model": "openai/text-include-usage", "stream": True,
            "stream_options": {"include_usage": True}}
    answer = await _post(upstream, "/v1/chat/completions?api-version=1", body)
    assert answer.status_code == 200, answer.text
    assert upstream.requests[-1] == {**body, "model": "text-include-usage"}
    assert upstream.queries[-1] == "api-version=1"
    assert events(answer.content) == events(RECORDINGS[("openai-chat", "text-include-usage")].body)


async def test_the_usage_chunk_the_gateway_asked_for_is_not_relayed_unasked() -> None:
    upstream = RecordedUpstream()
    answer = await _post(upstream, "/v1/chat/completions", {**CHAT, "model": "openai/text-include-usage",
                                                            "stream": True})
    assert upstream.requests[-1]["stream_options"] == {"include_usage": True}  # the gateway counts usage
    relayed = [orjson.loads(d) for _, d in events(answer.content) if d != "[DONE]"]
    assert relayed and all(chunk["choices"] for chunk in relayed)


async def test_a_non_streamed_same_wire_request_still_passes_through() -> None:
    upstream = RecordedUpstream()
    answer = await _post(upstream, "/v1/messages", {**CLAUDE_CODE, "model": "anthropic/text"})
    assert answer.status_code == 200, answer.text
    assert answer.json()["content"][0]["text"] == "Hello"
    assert upstream.requests[-1] == {**CLAUDE_CODE, "model": "text", "stream": True}


@pytest.mark.parametrize(("path", "body", "field"), [
    ("/v1/messages", {"model": "openai/text-include-usage", "max_tokens": 9, "context_management": {},
                      "messages": [{"role": "user", "content": "hi"}]}, "context_management"),
    ("/v1/responses", {"model": "anthropic/text", "input": "hi", "client_metadata": {}}, "client_metadata"),
    ("/v1/chat/completions", {"model": "anthropic/text", "messages": [{"role": "user", "content": "hi"}],
                              "some_future_field": 1}, "some_future_field"),
])
async def test_across_formats_an_unknown_field_is_refused_by_name(path: str, body: dict[str, Any], field: str) -> None:
    upstream = RecordedUpstream()
    answer = await _post(upstream, path, body)
    assert answer.status_code == 400
    assert field in answer.text and not upstream.requests


SCHEMA = {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"],
          "additionalProperties": False}


@pytest.mark.parametrize("model", ["anthropic/text", "openai/text-include-usage", "gemini/text"])
async def test_responses_structured_output_is_translated_across_formats(model: str) -> None:
    """`text.format` json_schema (responses.parse, the Agents SDK's output_type, pydantic-ai's
    NativeOutput) becomes the target's structured output."""
    upstream = RecordedUpstream()
    answer = await _post(upstream, "/v1/responses", {
        "model": model, "input": "Capital of France?", "include": ["reasoning.encrypted_content"],
        "text": {"format": {"type": "json_schema", "name": "city", "schema": SCHEMA, "strict": True}}})
    assert answer.status_code == 200, answer.text
    sent = upstream.requests[-1]
    if model.startswith("anthropic/"):
        assert sent["output_config"]["format"] == {"type": "json_schema", "schema": SCHEMA}
    elif model.startswith("openai/"):
        assert sent["response_format"]["json_schema"]["schema"] == SCHEMA
    else:
        assert sent["generationConfig"]["responseJsonSchema"] == SCHEMA
    assert answer.json()["text"]["format"]["type"] == "json_schema"


async def test_a_system_message_inside_messages_is_translated() -> None:
    upstream = RecordedUpstream()
    translated = {k: v for k, v in CLAUDE_CODE.items() if k not in ("context_management", "thinking")}
    answer = await _post(upstream, "/v1/messages", {**translated, "model": "openai/text-include-usage"})
    assert answer.status_code == 200, answer.text
    roles = [m["role"] for m in upstream.requests[-1]["messages"]]
    assert roles[:3] == ["system", "user", "system"]
