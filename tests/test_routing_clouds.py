"""Routes across clouds, end to end: the gateway on loopback in front of fakes of Anthropic, Azure
OpenAI and Bedrock that each check their own credentials (`x-api-key`, `api-key`, the SigV4
signature recomputed with botocore). A hedge from `anthropic/...` to `bedrock/...` (and from Azure
to Bedrock) releases one answer and lets go of the loser; a throttled Bedrock answer is retried on
Bedrock; an Azure target whose circuit opened is skipped for Bedrock."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from typing import Any

import httpx

from app.main import create_app
from app.providers.cloud_auth import AwsSigner
from app.settings import Settings
from tests.cloud_fakes import AWS_KEYS, STALL, FakeAnthropic, FakeAzure, FakeBedrock
from tests.cloud_support import cloud_recordings
from tests.support import parse_sse, serve

TEXT = next(r for r in cloud_recordings("bedrock") if r.name == "text")
CLAUDE = "us.anthropic.claude-sonnet-4-5-20250929-v1:0"
HELLO = [{"role": "user", "content": "Hello"}]
GUARD = 15.0  # the test's own deadline, generous on a loaded machine
THROTTLED = (429, {"message": "Too many requests, please wait before trying again."},
             {"x-amzn-ErrorType": "ThrottlingException:http://internal.amazon.com/coral/com.amazon.bedrock/",
              "retry-after": "0"})


@contextlib.asynccontextmanager
async def clouds(anthropic: FakeAnthropic, azure: FakeAzure, bedrock: FakeBedrock,
                 routes: dict[str, Any], **settings: Any) -> AsyncIterator[httpx.AsyncClient]:
    async with serve(anthropic.app()) as anthropic_url, serve(azure.app()) as azure_url, \
            serve(bedrock.app()) as bedrock_url:
        config = Settings(anthropic_api_key=anthropic.key, anthropic_base_url=anthropic_url,
                          azure_openai_endpoint=azure_url, azure_openai_api_key=azure.key,
                          aws_region="us-east-1", bedrock_endpoint_url=bedrock_url, routes=routes,
                          **{"upstream_max_retries": 0, "retry_backoff_seconds": 0.01,
                             "retry_backoff_max_seconds": 0.02, **settings})
        signer = AwsSigner(region="us-east-1", credentials=AWS_KEYS)
        async with serve(create_app(config, clients={"bedrock-signer": signer})) as url, \
                httpx.AsyncClient(base_url=url, timeout=GUARD) as client:
            yield client


async def run(client: httpx.AsyncClient, model: str = "claude") -> dict[str, Any]:
    answer = await asyncio.wait_for(client.post("/v1/stream", json={"model": model, "messages": HELLO,
                                                                    "max_tokens": 100}), GUARD)
    assert answer.status_code == 200, answer.text
    events = parse_sse(answer.content)
    assert [e for _, e, _ in events].count("final") == 1 and events[-1][1] == "final"
    final: dict[str, Any] = events[-1][2]
    return final


def outcomes(final: dict[str, Any]) -> list[tuple[str, str]]:
    return [(a["target"], a["outcome"]) for a in final["attempts"]]


async def test_a_hedge_from_anthropic_to_bedrock_releases_one_answer_and_closes_the_loser() -> None:
    anthropic, azure, bedrock = FakeAnthropic([STALL]), FakeAzure([]), FakeBedrock([TEXT.body])
    routes = {"claude": {"targets": ["anthropic/claude-sonnet-4-5", f"bedrock/{CLAUDE}"], "hedge_after_ms": 50}}
    async with clouds(anthropic, azure, bedrock, routes) as client:
        final = await run(client)
        await asyncio.wait_for(anthropic.closed.wait(), GUARD)  # the loser's request let go
    assert final["status"] == "ok" and final["provider"] == "bedrock", final
    assert final["message"]["content"] == TEXT.expected["text"] and final["target"] == f"bedrock/{CLAUDE}"
    assert sorted(outcomes(final)) == [("anthropic/claude-sonnet-4-5", "cancelled"), (f"bedrock/{CLAUDE}", "ok")]
    assert len(anthropic.seen) == len(bedrock.seen) == 1  # both started, each with its own credentials
    assert anthropic.refused == bedrock.refused == 0


async def test_a_hedge_from_azure_to_bedrock() -> None:
    anthropic, azure, bedrock = FakeAnthropic([]), FakeAzure([STALL]), FakeBedrock([TEXT.body])
    routes = {"claude": {"targets": ["azure/gpt4o-prod", f"bedrock/{CLAUDE}"], "hedge_after_ms": 50}}
    async with clouds(anthropic, azure, bedrock, routes) as client:
        final = await run(client)
        await asyncio.wait_for(azure.closed.wait(), GUARD)
    assert final["status"] == "ok" and final["provider"] == "bedrock", final
    assert sorted(outcomes(final)) == [("azure/gpt4o-prod", "cancelled"), (f"bedrock/{CLAUDE}", "ok")]
    assert azure.seen[0].headers["api-key"] == azure.key and azure.refused == bedrock.refused == 0


async def test_a_throttled_bedrock_answer_is_retried_on_bedrock_then_serves() -> None:
    anthropic, azure, bedrock = FakeAnthropic([]), FakeAzure([]), FakeBedrock([THROTTLED, TEXT.body])
    routes = {"claude": {"targets": [f"bedrock/{CLAUDE}", "azure/gpt4o-prod"]}}
    async with clouds(anthropic, azure, bedrock, routes, upstream_max_retries=1) as client:
        final = await run(client)
    assert final["status"] == "ok" and final["provider"] == "bedrock", final
    assert outcomes(final) == [(f"bedrock/{CLAUDE}", "rate_limited"), (f"bedrock/{CLAUDE}", "ok")]
    assert len(bedrock.seen) == 2 and bedrock.refused == 0 and not azure.seen


async def test_an_open_azure_circuit_is_skipped_for_bedrock() -> None:
    failing = (500, {"error": {"code": "InternalServerError", "message": "The server had an error."}}, {})
    anthropic, azure, bedrock = FakeAnthropic([]), FakeAzure([failing]), FakeBedrock([TEXT.body, TEXT.body])
    routes = {"claude": {"targets": ["azure/gpt4o-prod", f"bedrock/{CLAUDE}"]}}
    async with clouds(anthropic, azure, bedrock, routes, breaker_failures=1,
                      breaker_cooldown_seconds=3600) as client:
        first = await run(client)
        second = await run(client)
        ready = (await client.get("/readyz")).json()
    assert outcomes(first) == [("azure/gpt4o-prod", "error"), (f"bedrock/{CLAUDE}", "ok")]
    assert outcomes(second) == [("azure/gpt4o-prod", "skipped"), (f"bedrock/{CLAUDE}", "ok")]
    assert second["provider"] == "bedrock" and len(azure.seen) == 1 and len(bedrock.seen) == 2
    assert ready["circuits"]["azure/gpt4o-prod"] == "open"
