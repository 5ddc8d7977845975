"""The Vercel AI SDK from Node (pinned in tests/node/package-lock.json, installed by `.ci/run` with
`npm ci`) against the gateway on loopback, the recorded upstream behind it: `@ai-sdk/openai`
`.chat()`, its default provider (the Responses API: skipped, saying why, only while the gateway has
no POST /v1/responses), and `@ai-sdk/anthropic` with a streamed tool call (the SDK sets
`eager_input_streaming` on every tool). Locally without node or node_modules the tests skip; with
CI=true they fail instead."""

from __future__ import annotations

import json
from typing import Any

import pytest

from tests.compat_support import ALL_RECORDINGS, expect, facade_gateway
from tests.support import require_node, run_node

BY_MODEL = {expect(r).model: expect(r) for r in ALL_RECORDINGS}
BODY = {expect(r).model: r.body for r in ALL_RECORDINGS}


def _input_deltas(model: str) -> int:
    """The argument fragments a client gets: one per call when translated; from an Anthropic model
    (relayed as sent) the recording's own non-empty `input_json_delta`s."""
    if not model.startswith("anthropic/"):
        return len(BY_MODEL[model].calls)
    return sum(1 for line in BODY[model].splitlines() if b'"input_json_delta"' in line
               and json.loads(line.removeprefix(b"data: "))["delta"]["partial_json"])


@pytest.fixture(autouse=True)
def _node() -> None:
    require_node()


async def _client(scenario: str, url: str, model: str) -> dict[str, Any]:
    return await run_node("clients.mjs", scenario, url, model)


def _check(seen: dict[str, Any], model: str) -> None:
    exp = BY_MODEL[model]
    for how in ("plain", "streamed"):
        assert seen[how]["text"] == exp.text, how
        assert seen[how]["calls"] == [[name, args] for _, name, args in exp.calls], how
        assert seen[how]["usage"]["outputTokens"] == exp.usage["output_tokens"], how


@pytest.mark.parametrize("model", ["openai/text-include-usage", "openai/parallel-tool-calls", "anthropic/text"])
async def test_ai_sdk_openai_chat(model: str) -> None:
    async with facade_gateway() as url:
        seen = await _client("chat", url, model)
    _check(seen, model)


@pytest.mark.parametrize("model", ["anthropic/parallel-tool-use-empty-input", "anthropic/text",
                                   "openai/parallel-tool-calls"])
async def test_ai_sdk_anthropic_streams_tool_calls(model: str) -> None:
    async with facade_gateway() as url:
        seen = await _client("anthropic", url, model)
    _check(seen, model)
    assert seen["streamed"]["error"] is None
    if BY_MODEL[model].calls:
        assert seen["streamed"]["finish"] == "tool-calls"
        assert len(seen["streamed"]["inputDeltas"]) == _input_deltas(model)


@pytest.mark.parametrize("model", ["openai/text-include-usage", "openai/parallel-tool-calls"])
async def test_ai_sdk_openai_default_provider_speaks_responses(model: str) -> None:
    async with facade_gateway() as url:
        seen = await _client("responses", url, model)
    _check(seen, model)
