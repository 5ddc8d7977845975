"""The Bedrock adapter against a loopback fake that recomputes every SigV4 signature with botocore."""

from __future__ import annotations

import datetime
from collections.abc import AsyncIterator
from typing import Any

import pytest
from botocore.credentials import Credentials, RefreshableCredentials

from app.core.errors import GatewayError
from app.core.events import FinalEvent
from app.core.messages import Message, ToolSpec
from app.providers.base import ProviderAdapter, ProviderRequest
from app.providers.bedrock import build_bedrock
from app.providers.cloud_auth import AwsSigner
from app.providers.config import ProviderConfig
from tests.cloud_fakes import AWS_KEYS, FakeBedrock
from tests.cloud_support import cloud_recordings
from tests.support import serve
from tests.upstream_fakes import drain

RECORDING = {r.name: r for r in cloud_recordings("bedrock")}
MODEL = "arn:aws:bedrock:us-east-1:123456789012:inference-profile/us.anthropic.claude-sonnet-4-5-20250929-v1:0"
ASK = ProviderRequest(model=MODEL, messages=(Message(role="system", content="Be brief."),
                                             Message(role="user", content="Weather in Paris and Tokyo?")),
                      tools=(ToolSpec(name="get_weather", parameters={"type": "object", "properties": {
                          "city": {"type": "string"}}, "required": ["city"]}),),
                      max_tokens=200, temperature=0.2, stop=("END",))


async def _adapter(fake: FakeBedrock, credentials: Credentials = AWS_KEYS) -> AsyncIterator[ProviderAdapter]:
    async with serve(fake.app()) as url:
        config = ProviderConfig(values={"aws_region": "us-east-1", "bedrock_endpoint_url": url})
        adapter = build_bedrock(config, {"bedrock-signer": AwsSigner(region="us-east-1", credentials=credentials)})[
            "bedrock"]
        try:
            yield adapter
        finally:
            await adapter.aclose()  # type: ignore[attr-defined]


async def test_a_signed_converse_stream_with_parallel_tool_calls() -> None:
    fake = FakeBedrock([RECORDING["parallel-tool-use"].body])
    async for adapter in _adapter(fake):
        events = await drain(adapter, ASK)
    final = events[-1]
    assert isinstance(final, FinalEvent) and final.status == "ok", final.error
    assert fake.refused == 0
    assert [(c.id, dict(c.arguments)) for c in final.message.tool_calls] == [
        ("tooluse_kZJMlvQmRJ6eAyJE5GIl7Q", {"city": "Paris"}), ("tooluse_2SZMnAJYQ3mXnYcT5Zf0Ag", {"city": "Tokyo"})]
    (seen,) = fake.seen
    assert seen.path == "/model/arn:aws:bedrock:us-east-1:123456789012:inference-profile%2Fus.anthropic." \
                        "claude-sonnet-4-5-20250929-v1:0/converse-stream"
    assert seen.body["system"] == [{"text": "Be brief."}]
    assert seen.body["inferenceConfig"] == {"maxTokens": 200, "temperature": 0.2, "stopSequences": ["END"]}
    assert seen.body["toolConfig"]["tools"][0]["toolSpec"]["name"] == "get_weather"
    assert seen.headers["x-amz-security-token"] == AWS_KEYS.token


async def test_wrong_credentials_are_refused_by_the_fake_and_named_upstream_auth() -> None:
    fake = FakeBedrock([RECORDING["text"].body])
    wrong = Credentials(AWS_KEYS.access_key, "not-the-secret", AWS_KEYS.token)
    async for adapter in _adapter(fake, wrong):
        with pytest.raises(GatewayError) as caught:
            await adapter.open_stream(ASK)
    assert fake.refused == 1
    assert caught.value.code == "upstream_auth"
    assert "not-the-secret" not in str(caught.value)


async def test_expiring_credentials_are_refreshed_before_signing() -> None:
    calls: list[int] = []

    def refresh() -> dict[str, Any]:
        calls.append(1)
        later = datetime.datetime.now(datetime.UTC) + datetime.timedelta(hours=1)
        return {"access_key": AWS_KEYS.access_key, "secret_key": AWS_KEYS.secret_key, "token": AWS_KEYS.token,
                "expiry_time": later.isoformat()}

    soon = datetime.datetime.now(datetime.UTC) + datetime.timedelta(seconds=30)
    stale = RefreshableCredentials.create_from_metadata(
        {"access_key": AWS_KEYS.access_key, "secret_key": "stale", "token": "stale", "expiry_time": soon.isoformat()},
        refresh_using=refresh, method="test")
    fake = FakeBedrock([RECORDING["text"].body])
    async for adapter in _adapter(fake, stale):
        events = await drain(adapter, ASK)
    assert calls == [1] and fake.refused == 0
    assert isinstance(events[-1], FinalEvent) and events[-1].message.content == "Hello! How can I help you today?"


@pytest.mark.parametrize(("status", "kind", "code", "retryable"), [
    (429, "ThrottlingException", "rate_limited", True),
    (400, "ValidationException", "upstream_bad_request", False),
    (404, "ResourceNotFoundException", "model_not_found", False),
    (503, "ServiceUnavailableException", "upstream_error", True),
])
async def test_error_answers_keep_their_class(status: int, kind: str, code: str, retryable: bool) -> None:
    fake = FakeBedrock([(status, {"message": f"{kind} says no"}, {"x-amzn-ErrorType": f"{kind}:http://x/",
                                                                  "retry-after": "7"})])
    async for adapter in _adapter(fake):
        with pytest.raises(GatewayError) as caught:
            await adapter.open_stream(ASK)
    error = caught.value
    assert (error.code, error.retryable) == (code, retryable)
    assert f"{kind} says no" in str(error)
    if status == 429:
        assert error.to_dict()["retry_after"] == "7"


async def test_a_throttling_exception_before_output_is_a_429() -> None:
    fake = FakeBedrock([RECORDING["throttling-before-output"].body])
    async for adapter in _adapter(fake):
        events = await drain(adapter, ASK)
    final = events[-1]
    assert isinstance(final, FinalEvent) and final.error is not None
    assert (final.error["code"], final.error["retryable"], final.error["upstream_status"]) == ("rate_limited", True, 429)
