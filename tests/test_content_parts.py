"""Content parts end to end: what each entry point accepts (native /v1/stream, /v1/chat/completions,
/v1/messages) reaches each provider (OpenAI chat, Responses, Anthropic, Gemini) in that provider's
documented shape, as the loopback upstream records the request body; several text parts stay several
and Anthropic's cache breakpoints arrive."""

from __future__ import annotations

from typing import Any

import httpx
import pytest

from tests.compat_support import RecordedUpstream, facade_gateway

MODELS = {"openai": "openai/text-include-usage", "responses": "openai-responses/text", "anthropic": "anthropic/text",
          "gemini": "gemini/text"}
CACHE = {"type": "ephemeral"}


async def _send(entry: str, model: str, system: list[dict[str, Any]], user: list[dict[str, Any]],
                **settings: Any) -> tuple[httpx.Response, list[dict[str, Any]]]:
    """One request through an entry point; the response and the bodies the upstream received."""
    upstream = RecordedUpstream()
    async with facade_gateway(upstream, **settings) as url, httpx.AsyncClient(base_url=url, timeout=30) as client:
        if entry == "native":
            body = {"model": model, "messages": [{"role": "system", "content": system},
                                                 {"role": "user", "content": user}]}
            response = await client.post("/v1/generate", json=body)
        elif entry == "chat":
            body = {"model": model, "messages": [{"role": "system", "content": system},
                                                 {"role": "user", "content": user}]}
            response = await client.post("/v1/chat/completions", json=body)
        else:
            body = {"model": model, "max_tokens": 64, "system": system, "messages": [{"role": "user", "content": user}]}
            response = await client.post("/v1/messages", json=body)
    return response, upstream.requests


def _text(text: str, cache: bool = False) -> dict[str, Any]:
    return {"type": "text", "text": text, **({"cache_control": CACHE} if cache else {})}


# What each provider receives for system [S1, S2 (cached)] and user [U1, U2 (cached)].
TEXT_SHAPES: dict[str, Any] = {
    "openai": lambda b: (b["messages"][0]["content"], b["messages"][1]["content"]),
    "responses": lambda b: (b.get("instructions"), b["input"][0]["content"]),
    "anthropic": lambda b: (b["system"], b["messages"][0]["content"]),
    "gemini": lambda b: (b["systemInstruction"]["parts"], b["contents"][0]["parts"]),
}
TEXT_EXPECTED = {
    "openai": ([_text("Rule one."), _text("Rule two.")], [_text("Part A."), _text("Part B.")]),
    "responses": ("Rule one.\n\nRule two.", [{"type": "input_text", "text": "Part A."},
                                             {"type": "input_text", "text": "Part B."}]),
    "anthropic": ([_text("Rule one."), _text("Rule two.", cache=True)], [_text("Part A."), _text("Part B.", cache=True)]),
    "gemini": ([{"text": "Rule one."}, {"text": "Rule two."}], [{"text": "Part A."}, {"text": "Part B."}]),
}


@pytest.mark.parametrize("entry", ["native", "chat", "messages"])
@pytest.mark.parametrize("provider", list(MODELS))
async def test_several_text_parts_stay_several_and_cache_breakpoints_reach_anthropic(entry: str, provider: str) -> None:
    cached = entry != "chat"  # OpenAI's request shape has no cache_control
    system = [_text("Rule one."), _text("Rule two.", cache=cached)]
    user = [_text("Part A."), _text("Part B.", cache=cached)]
    response, received = await _send(entry, MODELS[provider], system, user)
    assert response.status_code == 200, response.text
    expected = TEXT_EXPECTED[provider]
    if provider == "anthropic" and not cached:
        expected = ([_text("Rule one."), _text("Rule two.")], [_text("Part A."), _text("Part B.")])
    assert TEXT_SHAPES[provider](received[0]) == expected
