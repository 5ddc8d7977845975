"""No invented parameters: a facade request without `temperature` reaches the provider without
one (the provider's own default applies); one that sets it carries it."""

from __future__ import annotations

from typing import Any

import httpx
import pytest

from tests.compat_support import RecordedUpstream, facade_gateway

ASKS: dict[str, tuple[str, dict[str, Any]]] = {
    "chat->openai": ("/v1/chat/completions", {"model": "openai/text-include-usage",
                                              "messages": [{"role": "user", "content": "hi"}]}),
    "chat->gemini": ("/v1/chat/completions", {"model": "gemini/text", "messages": [{"role": "user", "content": "hi"}]}),
    "messages->openai": ("/v1/messages", {"model": "openai/text-include-usage", "max_tokens": 64,
                                          "messages": [{"role": "user", "content": "hi"}]}),
    "messages->anthropic": ("/v1/messages", {"model": "anthropic/text", "max_tokens": 64,
                                             "messages": [{"role": "user", "content": "hi"}]}),
    "responses->openai-responses": ("/v1/responses", {"model": "openai-responses/function-call", "input": "hi"}),
    "responses->openai": ("/v1/responses", {"model": "openai/text-include-usage", "input": "hi"}),
}


def _temperature(sent: dict[str, Any]) -> Any:
    return sent.get("temperature", (sent.get("generationConfig") or {}).get("temperature"))


@pytest.mark.parametrize("route", sorted(ASKS))
async def test_no_temperature_is_sent_when_the_client_sent_none(route: str) -> None:
    path, body = ASKS[route]
    upstream = RecordedUpstream()
    async with facade_gateway(upstream) as url, httpx.AsyncClient(base_url=url, timeout=30) as client:
        answer = await client.post(path, json=body)
    assert answer.status_code == 200, answer.text
    assert _temperature(upstream.requests[-1]) is None, upstream.requests[-1]


@pytest.mark.parametrize("route", ["chat->openai", "chat->gemini", "responses->openai-responses"])
async def test_a_temperature_the_client_sent_is_carried(route: str) -> None:
    path, body = ASKS[route]
    upstream = RecordedUpstream()
    async with facade_gateway(upstream) as url, httpx.AsyncClient(base_url=url, timeout=30) as client:
        answer = await client.post(path, json={**body, "temperature": 0.7})
    assert answer.status_code == 200, answer.text
    assert _temperature(upstream.requests[-1]) == 0.7
