"""Fragments in upstream order: the validation gate may hold a tool call until its arguments
passed, but never reorders. Every recording with two calls or more, through the HTTP API with a
validator in the way: a call's fragments come out contiguously, calls in the order the upstream
sent them, and concatenating the fragments of each index in arrival order gives that call's
exact JSON (what instructor's `create_iterable` and other clients do)."""

from __future__ import annotations

import json
from typing import Any

import httpx
import openai
import pytest

from tests.compat_support import ALL_RECORDINGS, facade_gateway, model_of
from tests.support import Recording, parse_sse

GATED = [{"name": "regex_deny", "config": {"patterns": ["(?i)never-in-these-recordings"]}}]


def _expected(rec: Recording) -> dict[str, Any]:
    return rec.expected


def _parallel(rec: Recording) -> bool:
    exp = _expected(rec)
    return len(exp.get("tool_calls") or []) >= 2


PARALLEL = [rec for rec in ALL_RECORDINGS if _parallel(rec)]


def _arguments(call: dict[str, Any]) -> Any:
    """A recorded call's arguments as the recording's notes give them."""
    if "args_assembled_from_partial_args" in call:
        return call["args_assembled_from_partial_args"]
    return json.loads(call.get("arguments") or "{}")


def test_there_are_parallel_recordings() -> None:
    assert {rec.provider for rec in PARALLEL} >= {"openai-chat", "anthropic", "gemini"}


@pytest.mark.parametrize("validators", [GATED, []], ids=["gated", "open"])
@pytest.mark.parametrize("rec", PARALLEL)
async def test_canonical_fragments_keep_upstream_order(rec: Recording, validators: list[Any]) -> None:
    expected = _expected(rec)["tool_calls"]
    async with facade_gateway() as url, httpx.AsyncClient(base_url=url, timeout=30) as client:
        answer = await client.post("/v1/stream", json={"model": model_of(rec), "validators": validators,
                                                       "messages": [{"role": "user", "content": "go"}]})
    events = [(kind, data) for _, kind, data in parse_sse(answer.text)]
    order = [data["index"] for kind, data in events if kind == "tool_call"]
    runs = [i for n, i in enumerate(order) if n == 0 or order[n - 1] != i]
    assert runs == sorted(set(order)), f"fragments interleaved: {order}"
    fragments: dict[int, str] = {}
    for kind, data in events:
        if kind == "tool_call":
            fragments[data["index"]] = fragments.get(data["index"], "") + data["args_fragment"]
    assert [json.loads(fragments[i] or "{}") for i in sorted(fragments)] == [_arguments(c) for c in expected]
    if rec.provider == "openai-chat":  # the exact text, byte for byte
        assert [fragments[i] for i in sorted(fragments)] == [c["arguments"] for c in expected]


@pytest.mark.parametrize("rec", [r for r in PARALLEL if r.provider == "openai-chat"])
async def test_chat_facade_fragments_concatenate_per_index(rec: Recording) -> None:
    expected = _expected(rec)["tool_calls"]
    async with facade_gateway() as url:
        client = openai.AsyncOpenAI(base_url=f"{url}/v1", api_key="sk-client", max_retries=0)
        stream = await client.chat.completions.create(
            model=model_of(rec), messages=[{"role": "user", "content": "go"}], stream=True,
            extra_body={"validators": GATED})
        order: list[int] = []
        arguments: dict[int, str] = {}
        async for chunk in stream:
            for delta in (chunk.choices[0].delta.tool_calls or []) if chunk.choices else []:
                order.append(delta.index)
                arguments[delta.index] = arguments.get(delta.index, "") + (delta.function.arguments or "")
        await client.close()
    runs = [i for n, i in enumerate(order) if n == 0 or order[n - 1] != i]
    assert runs == sorted(set(order)), f"fragments interleaved: {order}"
    assert [arguments[i] for i in sorted(arguments)] == [c["arguments"] for c in expected]
