"""A provider's numbers are input too: usage counts from a hostile upstream (negative, fractions,
huge, strings, objects, booleans) end the run with `upstream_protocol_error`, keep the answer's
text, never make a negative or absurd cost, and never move a key's budget or tpm.

Each case is a real recording (../shared/fixtures) with one usage count replaced, served by a
loopback server (tests/hostile_upstream.py) to the gateway under uvicorn.
"""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import httpx
import pytest

from app.core.patches import MAX_TOKEN_COUNT
from app.main import create_app
from tests.auth_support import bearer, gateway, make_key
from tests.hostile_upstream import KEY, HostileUpstream, Seen, ask, provider_settings, raw_answer
from tests.support import parse_sse, recordings, serve

GUARD = 60
PRICES = {"openai/*": {"input": 1, "output": 1}, "openai-responses/*": {"input": 1, "output": 1},
          "anthropic/*": {"input": 1, "output": 1}, "gemini/*": {"input": 1, "output": 1}}

# provider -> (recording, the text its answer carries, the usage field's bytes as recorded, the
# same field with `{}` where the hostile value goes)
CASES: dict[str, tuple[str, str, str]] = {
    "openai": ("openai-chat/text-include-usage", '"prompt_tokens":14', '"prompt_tokens":{}'),
    "openai-responses": ("openai-responses/text", '"input_tokens":278', '"input_tokens":{}'),
    "anthropic": ("anthropic/text", '"output_tokens":4}', '"output_tokens":{}}'),  # message_delta's
    "gemini": ("gemini/text", '"promptTokenCount": 13,"candidatesTokenCount": 8',
               '"promptTokenCount": {},"candidatesTokenCount": 8'),
}
HOSTILE = ["-10000000", "12.5", "1e26", "1e300", str(MAX_TOKEN_COUNT + 1), '"12"', '{"n": 1}', "true", "[1]"]


def _body(provider: str, value: str) -> tuple[bytes, str]:
    """The recording with its usage field set to `value` (a JSON literal), and its answer's text."""
    name, recorded, template = CASES[provider]
    folder, stem = name.split("/")
    (rec,) = [r for r in recordings(folder) if r.name == stem]
    assert recorded.encode() in rec.body, (provider, recorded)
    return rec.body.replace(recorded.encode(), template.replace("{}", value).encode()), rec.expected["text"]


async def _run(provider: str, body: bytes, path: str = "/v1/generate", **extra: Any) -> httpx.Response:
    answer = raw_answer(200, body, [("content-type", "text/event-stream")])
    async with HostileUpstream(answer) as upstream:
        settings = provider_settings(provider, upstream.url, prices=PRICES, **extra)
        async with serve(create_app(settings)) as gw, httpx.AsyncClient(base_url=gw, timeout=GUARD) as client:
            return await client.post(path, json=ask(provider))


@pytest.mark.parametrize("provider", sorted(CASES))
async def test_the_recordings_as_served_are_ok_and_priced(provider: str) -> None:
    """The control: the unaltered recording is an ok run with a positive cost."""
    name, recorded, _ = CASES[provider]
    body, text = _body(provider, recorded.split(":", 1)[1].split(",")[0].rstrip("}").strip())
    response = await _run(provider, body)
    assert response.status_code == 200, response.text
    final = response.json()
    assert final["status"] == "ok" and final["message"]["content"] == text
    assert final["usage"]["cost_usd"] > 0


@pytest.mark.parametrize("value", HOSTILE)
@pytest.mark.parametrize("provider", sorted(CASES))
async def test_a_hostile_usage_count_is_a_protocol_error_with_the_text_kept(provider: str, value: str) -> None:
    body, text = _body(provider, value)
    response = await _run(provider, body)
    assert response.status_code != 500, response.text
    final = response.json()
    assert final["status"] == "error", final
    assert final["error"]["code"] == "upstream_protocol_error", final["error"]
    assert final["message"]["content"] == text
    usage = final["usage"]
    assert usage.get("cost_usd", 0) >= 0
    assert all(part >= 0 for name, part in usage.pop("cost", {}).items() if name != "source")  # its split too
    for count in usage.values():
        assert count is None or (isinstance(count, int | float) and 0 <= count <= 4 * MAX_TOKEN_COUNT), usage


@pytest.mark.parametrize("provider", sorted(CASES))
async def test_a_streamed_hostile_count_ends_with_one_error_final_after_the_text(provider: str) -> None:
    body, text = _body(provider, '"12"')
    response = await _run(provider, body, "/v1/stream")
    assert response.status_code == 200
    events = parse_sse(response.content)
    finals = [data for _, kind, data in events if kind == "final"]
    assert len(finals) == 1 and events[-1][1] == "final"
    assert finals[0]["error"]["code"] == "upstream_protocol_error"
    assert "".join(data["content"] for _, kind, data in events if kind == "token") == text
    assert finals[0]["message"]["content"] == text


async def test_anthropic_message_start_counts_are_checked_too() -> None:
    body, _ = _body("anthropic", "4")
    body = body.replace(b'"input_tokens":10,"cache_creation_input_tokens":0,"cache_read_input_tokens":0,'
                        b'"cache_creation"', b'"input_tokens":-10000000,"cache_creation_input_tokens":0,'
                                             b'"cache_read_input_tokens":0,"cache_creation"')
    response = await _run("anthropic", body)
    assert response.status_code == 502, response.text  # before the first event: an HTTP error
    assert response.json()["error"]["code"] == "upstream_protocol_error"


async def test_a_negative_count_refunds_no_budget(tmp_path: Path) -> None:
    """A key with a $0.20 budget: a run reporting -10M output tokens in its `message_delta` is no
    refund: it is charged what its `message_start` counted (12 tokens, $0.12), an honest run ($0.14)
    then spends the budget and the next is refused."""
    hostile, _ = _body("anthropic", "-10000000")
    honest, _ = _body("anthropic", "4")
    prices = {"anthropic/*": {"input": 10_000, "output": 10_000}}  # 14 tokens: $0.14
    answers = iter([hostile, honest, honest])

    async def answer(seen: Seen, writer: asyncio.StreamWriter) -> None:
        await raw_answer(200, next(answers), [("content-type", "text/event-stream")])(seen, writer)

    async with HostileUpstream(answer) as upstream:
        async with gateway(anthropic_api_key=KEY, anthropic_base_url=upstream.url, upstream_max_retries=0,
                           prices=prices, data_dir=str(tmp_path)) as (app, client):
            key = (await make_key(client, budget_usd=0.20, tpm=1_000))["key"]
            statuses = []
            for _ in range(3):
                response = await client.post("/v1/generate", json=ask("anthropic"), headers=bearer(key))
                statuses.append(response.status_code)
                await app.state.records.flush()
                await app.state.auth.settled()
            usage = (await client.get("/v1/usage", headers=bearer(key))).json()["total"]
    assert statuses == [502, 200, 429]
    assert usage["cost_usd"] == pytest.approx(0.26)
    assert all(v >= 0 for v in usage["tokens"].values()), usage
