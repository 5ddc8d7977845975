"""Model names as clients send them, the default allow-lists taking the fields the docs call
carried, and a refusal explained in the request's log line."""

from __future__ import annotations

import json
from typing import Any

import httpx
import pytest

from app.main import create_app
from app.providers.registry import ProviderRegistry
from tests.compat_support import RecordedUpstream, facade_gateway, settings_for
from tests.support import serve


@pytest.mark.parametrize(("model", "responses", "expected"), [
    ("claude-opus-4-8", False, "anthropic/claude-opus-4-8"),
    ("gpt-5", False, "openai/gpt-5"),
    ("gpt-5", True, "openai-responses/gpt-5"),
    ("o3", False, "openai/o3"),
    ("o4-mini", True, "openai-responses/o4-mini"),
    ("codex-mini-latest", True, "openai-responses/codex-mini-latest"),
    ("chatgpt-4o-latest", False, "openai/chatgpt-4o-latest"),
    ("gemini-2.5-pro", False, "gemini/gemini-2.5-pro"),
    ("openai/gpt-5", True, "openai/gpt-5"),  # qualified names stay as written
    ("omni", False, "omni"),  # `o<digit>` only
    ("fast", False, "fast"),  # an alias wins
])
def test_bare_names_route_by_pattern(model: str, responses: bool, expected: str) -> None:
    adapters: Any = {p: object() for p in ("anthropic", "openai", "openai-responses", "gemini")}
    registry = ProviderRegistry(adapters, {"fast": "anthropic/claude-haiku-4-5"})
    assert registry.qualify(model, responses=responses) == expected


def test_the_operator_changes_the_patterns() -> None:
    registry = ProviderRegistry({"anthropic": object(), "vllm": object()},  # type: ignore[dict-item]
                                patterns={"llama-*": "vllm", "claude-*": "anthropic"})
    assert registry.qualify("llama-3.3-70b") == "vllm/llama-3.3-70b"
    assert registry.qualify("gpt-5") == "gpt-5"  # not a pattern here: refused as before


@pytest.mark.parametrize(("path", "body", "sent_model"), [
    ("/v1/messages", {"model": "claude-opus-4-8", "max_tokens": 9, "messages": [{"role": "user", "content": "hi"}]},
     "claude-opus-4-8"),
    ("/v1/responses", {"model": "gpt-5", "input": "hi"}, "gpt-5"),
    ("/v1/chat/completions", {"model": "gpt-5", "messages": [{"role": "user", "content": "hi"}]}, "gpt-5"),
])
async def test_a_bare_name_reaches_its_provider(path: str, body: dict[str, Any], sent_model: str) -> None:
    upstream = RecordedUpstream()
    async with facade_gateway(upstream) as url, httpx.AsyncClient(base_url=url, timeout=30) as client:
        answer = await client.post(path, json=body)
    # the recorded upstream has no recording named so: it answers, having received the request
    assert upstream.requests and upstream.requests[-1]["model"] == sent_model, answer.text


async def test_models_lists_the_bare_names() -> None:
    async with facade_gateway() as url, httpx.AsyncClient(base_url=url) as client:
        ids = [m["id"] for m in (await client.get("/v1/models")).json()["data"]]
        one = await client.get("/v1/models/claude-opus-4-8")
    assert {"claude-*", "gpt-*", "o[0-9]*", "gemini-*"} <= set(ids)
    assert one.status_code == 200 and one.json()["id"] == "claude-opus-4-8"


@pytest.mark.parametrize(("path", "body", "fields"), [
    ("/v1/chat/completions", {"model": "openai-responses/text", "messages": [{"role": "user", "content": "hi"}]},
     {"store": False, "metadata": {"team": "a"}, "prompt_cache_key": "k", "service_tier": "flex",
      "safety_identifier": "u1"}),
    ("/v1/chat/completions", {"model": "openai/text-include-usage", "messages": [{"role": "user", "content": "hi"}],
                              "provider_options": {}}, {"verbosity": "low"}),
    ("/v1/responses", {"model": "openai/text-include-usage", "input": "hi"},
     {"prompt_cache_key": "k", "service_tier": "flex", "safety_identifier": "u1"}),
    ("/v1/messages", {"model": "openai/text-include-usage", "max_tokens": 9,
                      "messages": [{"role": "user", "content": "hi"}]}, {"service_tier": "auto"}),
])
async def test_the_default_allow_lists_take_the_carried_fields(path: str, body: dict[str, Any],
                                                               fields: dict[str, Any]) -> None:
    upstream = RecordedUpstream()
    async with facade_gateway(upstream) as url, httpx.AsyncClient(base_url=url, timeout=30) as client:
        answer = await client.post(path, json={**body, **fields})
    assert answer.status_code == 200, answer.text
    assert {k: upstream.requests[-1].get(k) for k in fields} == fields


async def test_a_refusal_is_explained_in_the_log_line(capsys: pytest.CaptureFixture[str]) -> None:
    upstream = RecordedUpstream()
    async with serve(upstream.app()) as up, serve(create_app(settings_for(up))) as url, \
            httpx.AsyncClient(base_url=url) as client:
        answer = await client.post("/v1/messages", json={
            "model": "openai/text-include-usage", "max_tokens": 9, "context_management": {},
            "messages": [{"role": "user", "content": "sk-ant-test-upstream"}]})
    assert answer.status_code == 400
    lines = [json.loads(line) for line in capsys.readouterr().out.splitlines() if line.startswith("{")]
    line = next(x for x in lines if x.get("event") == "request" and x.get("path") == "/v1/messages")
    assert line["status"] == 400 and line["error_field"] == "context_management"
    assert line["error_code"] == "invalid_request" and "unrecognized request argument" in line["error_message"]
