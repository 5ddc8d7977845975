"""Bedrock end to end: the gateway under uvicorn on loopback, configured by AWS_REGION and
AWS_ENDPOINT_URL_BEDROCK_RUNTIME, in front of a fake Bedrock that recomputes every SigV4 signature
with botocore. Every Converse recording through POST /v1/stream; Claude through the Messages
facade (passed through to InvokeModelWithResponseStream and relayed as Anthropic SSE); a throttled
answer before output as HTTP 429; a fallback from `anthropic/...` to `bedrock/...`; cost in the final."""

from __future__ import annotations

import contextlib
import json
from collections.abc import AsyncIterator
from typing import Any

import httpx
import pytest

from app.main import create_app
from app.providers.cloud_auth import AwsSigner
from app.providers.sse import SSEDecoder
from app.settings import Settings
from app.startup import provider_statuses
from tests.cloud_fakes import AWS_KEYS, FakeBedrock
from tests.cloud_support import cloud_recordings
from tests.support import parse_sse, recordings, serve
from tests.upstream_fakes import closed_port_url

RECORDINGS = cloud_recordings("bedrock")
INVOKE = {r.name: r for r in cloud_recordings("bedrock-invoke")}
ANTHROPIC = {r.name: r for r in recordings("anthropic")}
CLAUDE = "us.anthropic.claude-sonnet-4-5-20250929-v1:0"
PRICE = {"input": 3.0, "output": 15.0, "cache_read": 0.3, "cache_write": 3.75}
ASK = {"messages": [{"role": "user", "content": "Hello"}], "max_tokens": 100}


@contextlib.asynccontextmanager
async def bedrock_gateway(fake: FakeBedrock, **settings: Any) -> AsyncIterator[httpx.AsyncClient]:
    async with serve(fake.app()) as upstream:
        config = Settings(aws_region="us-east-1", bedrock_endpoint_url=upstream, upstream_max_retries=0,
                          prices={"bedrock/*": PRICE}, **settings)
        signer = AwsSigner(region="us-east-1", credentials=AWS_KEYS)
        async with serve(create_app(config, clients={"bedrock-signer": signer})) as url, \
                httpx.AsyncClient(base_url=url, timeout=30) as client:
            yield client


@pytest.mark.parametrize("rec", [r for r in RECORDINGS if not r.expected["errors"]], ids=repr)
async def test_every_converse_recording_through_the_native_api(rec: Any) -> None:
    fake = FakeBedrock([rec.body])
    async with bedrock_gateway(fake) as client:
        answer = await client.post("/v1/stream", json={**ASK, "model": f"bedrock/{CLAUDE}"})
    assert answer.status_code == 200, answer.text
    events = parse_sse(answer.content)
    assert [e for _, e, _ in events].count("final") == 1 and events[-1][1] == "final"
    final = events[-1][2]
    assert final["status"] == "ok" and final["provider"] == "bedrock"
    assert final["message"]["content"] == rec.expected["text"]
    assert [c["id"] for c in final["message"]["tool_calls"]] == [c["id"] for c in rec.expected["tool_calls"]]
    usage = rec.expected["usage"]
    read, write = usage.get("cacheReadInputTokens", 0), usage.get("cacheWriteInputTokens", 0)
    assert final["usage"]["input_tokens"] == usage["inputTokens"] + read + write
    # Bedrock's inputTokens are the uncached prompt (cache reads and writes are outside it, as Anthropic's):
    # each kind at its own rate, never the cache twice (app/core/cost.py)
    expected_cost = (usage["inputTokens"] * PRICE["input"] + usage["outputTokens"] * PRICE["output"]
                     + read * PRICE["cache_read"] + write * PRICE["cache_write"]) / 1e6
    assert final["usage"]["cost_usd"] == pytest.approx(expected_cost)
    assert fake.refused == 0 and fake.seen[0].path.endswith("/converse-stream")


@pytest.mark.parametrize("rec", [r for r in RECORDINGS if r.expected["errors"]], ids=repr)
async def test_every_exception_recording_ends_honestly(rec: Any) -> None:
    fake = FakeBedrock([rec.body])
    async with bedrock_gateway(fake) as client:
        answer = await client.post("/v1/stream", json={**ASK, "model": f"bedrock/{CLAUDE}"})
    if rec.name.endswith("-before-output"):  # nothing released yet: an HTTP error in the gateway's vocabulary
        status = {"throttling": 429, "validation": 400}.get(rec.name.removesuffix("-before-output"), 502)
        assert answer.status_code == status, answer.text
        assert rec.expected["errors"][0]["message"] in answer.json()["error"]["message"]
        return
    events = parse_sse(answer.content)
    final = events[-1][2]
    assert [e for _, e, _ in events].count("final") == 1
    assert final["status"] == "error" and final["message"]["content"] == "Partial answer"
    assert rec.expected["errors"][0]["message"] in final["error"]["message"]


@pytest.mark.parametrize("name", sorted(ANTHROPIC))
async def test_every_claude_recording_through_the_messages_facade(name: str) -> None:
    fake = FakeBedrock([INVOKE[name].body])
    body = {"model": f"bedrock/{CLAUDE}", "max_tokens": 2048, "stream": True,
            "thinking": {"type": "enabled", "budget_tokens": 1024},
            "messages": [{"role": "user", "content": "What's the weather?"}],
            "tools": [{"name": "get_weather", "input_schema": {"type": "object", "properties": {}}}]}
    async with bedrock_gateway(fake) as client:
        answer = await client.post("/v1/messages", json=body, headers={"anthropic-version": "2023-06-01"})
    assert answer.status_code == 200, answer.text
    decoder = SSEDecoder()
    relayed = [(e.event, json.loads(e.data)) for e in [*decoder.feed(answer.content), *decoder.flush()]]
    decoder = SSEDecoder()
    recorded = [(e.event, json.loads(e.data)) for e in decoder.feed(ANTHROPIC[name].body)]
    assert relayed == recorded
    (seen,) = fake.seen
    assert seen.path == f"/model/{CLAUDE}/invoke-with-response-stream"
    assert seen.body["anthropic_version"] == "bedrock-2023-05-31"
    assert "model" not in seen.body and "stream" not in seen.body
    assert seen.body["thinking"] == {"type": "enabled", "budget_tokens": 1024}


async def test_fallback_from_anthropic_to_bedrock() -> None:
    fake = FakeBedrock([next(r for r in RECORDINGS if r.name == "text").body])
    routes = {"claude": {"targets": ["anthropic/claude-sonnet-4-5", f"bedrock/{CLAUDE}"]}}
    async with bedrock_gateway(fake, anthropic_api_key="sk-ant-unreachable", anthropic_base_url=closed_port_url(),
                               routes=routes) as client:
        answer = await client.post("/v1/stream", json={**ASK, "model": "claude"})
    assert answer.status_code == 200, answer.text
    events = parse_sse(answer.content)
    final = events[-1][2]
    assert final["status"] == "ok" and final["provider"] == "bedrock", final
    assert [(a["target"], a["outcome"]) for a in final["attempts"]] == [
        ("anthropic/claude-sonnet-4-5", "error"), (f"bedrock/{CLAUDE}", "ok")]


def test_config_check_names_what_bedrock_lacks(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN", "AWS_PROFILE", "AWS_REGION"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("AWS_EC2_METADATA_DISABLED", "true")
    monkeypatch.setenv("AWS_CONFIG_FILE", "/nonexistent")
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", "/nonexistent")
    lines = {s.name: s.line() for s in provider_statuses(Settings())}
    assert lines["bedrock"] == "bedrock: not served: AWS_REGION is not set"
    lines = {s.name: s.line() for s in provider_statuses(Settings(aws_region="eu-west-1"))}
    assert lines["bedrock"].startswith("bedrock: not served: botocore's credential chain found no AWS credentials")
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", AWS_KEYS.access_key)
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", AWS_KEYS.secret_key)
    lines = {s.name: s.line() for s in provider_statuses(Settings(aws_region="eu-west-1"))}
    assert lines["bedrock"] == "bedrock: served (region eu-west-1, credentials: env)"
    assert AWS_KEYS.secret_key not in str(lines)


def test_the_endpoint_override_from_the_environment_or_the_config_file(tmp_path: Any,
                                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("AWS_ENDPOINT_URL_BEDROCK_RUNTIME", "https://vpce-1.bedrock-runtime.us-east-1.vpce.amazonaws.com")
    monkeypatch.setenv("AWS_REGION", "us-east-1")
    config = Settings().provider_config()
    assert (config.secret("aws_region"), config.secret("bedrock_endpoint_url")) == (
        "us-east-1", "https://vpce-1.bedrock-runtime.us-east-1.vpce.amazonaws.com")
    monkeypatch.delenv("AWS_ENDPOINT_URL_BEDROCK_RUNTIME")
    toml = tmp_path / "gateway.toml"
    toml.write_text('[upstream]\nbedrock_endpoint_url = "https://bedrock.internal.example"\naws_region = "eu-west-3"\n')
    monkeypatch.setenv("FOUNDRY_CONFIG", str(toml))
    monkeypatch.delenv("AWS_REGION")
    config = Settings().provider_config()
    assert (config.secret("aws_region"), config.secret("bedrock_endpoint_url")) == (
        "eu-west-3", "https://bedrock.internal.example")


async def test_an_exception_on_the_claude_passthrough_names_bedrock() -> None:
    fake = FakeBedrock([INVOKE["throttling-before-output"].body])
    body = {"model": f"bedrock/{CLAUDE}", "max_tokens": 100, "stream": True,
            "messages": [{"role": "user", "content": "Hello"}]}
    async with bedrock_gateway(fake) as client:
        answer = await client.post("/v1/messages", json=body, headers={"anthropic-version": "2023-06-01"})
    assert answer.status_code == 429, answer.text
    message = answer.json()["error"]["message"]
    assert message.startswith("bedrock: ") and "anthropic:" not in message, message
