"""Azure OpenAI end to end: the gateway on loopback, configured by AZURE_OPENAI_ENDPOINT (and
AZURE_OPENAI_API_KEY or an Entra ID credential), in front of a fake Azure that accepts only its
`api-key` or its bearer: the native API and the chat facade (passed through, relayed as sent),
the v1 and the deployment paths, Responses, a prompt refused by the content filter."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator
from typing import Any

import httpx
import pytest

from app.main import create_app
from app.providers.cloud_auth import AzureBearer
from app.providers.sse import SSEDecoder
from app.settings import Settings
from app.startup import provider_statuses
from tests.cloud_fakes import EntraCredential, FakeAzure
from tests.cloud_support import cloud_recordings
from tests.support import parse_sse, recordings, serve

RECORDING = {r.name: r for r in cloud_recordings("azure", ".sse")}
RESPONSES = {r.name: r for r in recordings("openai-responses")}
ASK = {"messages": [{"role": "user", "content": "What is color?"}], "max_tokens": 100}
KEY = "azure-fake-key-0000"


@contextlib.asynccontextmanager
async def azure_gateway(fake: FakeAzure, clients: dict[str, Any] | None = None,
                        **settings: Any) -> AsyncIterator[httpx.AsyncClient]:
    async with serve(fake.app()) as upstream:
        config = Settings(azure_openai_endpoint=upstream, upstream_max_retries=0, **settings)
        async with serve(create_app(config, clients=clients)) as url, \
                httpx.AsyncClient(base_url=url, timeout=30) as client:
            yield client


def _events(body: bytes) -> list[tuple[str, str]]:
    decoder = SSEDecoder()
    return [(e.event, e.data) for e in [*decoder.feed(body), *decoder.flush()]]


async def test_a_content_filter_stop_through_the_native_api_with_the_api_key() -> None:
    fake = FakeAzure([RECORDING["content-filter-stop"].body])
    async with azure_gateway(fake, azure_openai_api_key=KEY) as client:
        answer = await client.post("/v1/stream", json={**ASK, "model": "azure/gpt4o-prod"})
    final = parse_sse(answer.content)[-1][2]
    assert final["status"] == "ok" and final["stop_reason"] == "content_filter"
    assert final["message"]["content"] == "The fight ended" and final["usage"]["input_tokens"] == 18
    expected = RECORDING["content-filter-stop"].expected
    assert final["content_filter"] == {"prompt": expected["prompt_filter_results"],
                                       "completion": expected["content_filter_results"]}
    (seen,) = fake.seen
    assert seen.path == "/openai/v1/chat/completions" and seen.headers["api-key"] == KEY
    assert seen.body["model"] == "gpt4o-prod" and seen.body["stream_options"] == {"include_usage": True}


async def test_the_chat_facade_relays_azure_chunks_as_sent_on_the_deployment_path() -> None:
    fake = FakeAzure([RECORDING["async-filter-offsets"].body])
    async with azure_gateway(fake, azure_openai_api_key=KEY, openai_api_version="2024-10-21") as client:
        answer = await client.post("/v1/chat/completions", json={**ASK, "model": "azure/gpt4o-prod", "stream": True})
    assert answer.status_code == 200, answer.text
    assert _events(answer.content) == _events(RECORDING["async-filter-offsets"].body)
    assert fake.seen[0].path == "/openai/deployments/gpt4o-prod/chat/completions?api-version=2024-10-21"


async def test_entra_id_bearer_and_the_responses_api() -> None:
    fake = FakeAzure([RESPONSES["text"].body])
    credential = EntraCredential()
    async with azure_gateway(fake, clients={"azure-auth": AzureBearer(credential=credential)}) as client:
        answer = await client.post("/v1/stream", json={**ASK, "model": "azure-responses/gpt4o-prod"})
    final = parse_sse(answer.content)[-1][2]
    assert final["status"] == "ok" and final["provider"] == "azure-responses"
    assert final["message"]["content"] == RESPONSES["text"].expected["text"]
    (seen,) = fake.seen
    assert seen.path == "/openai/v1/responses" and seen.headers["authorization"] == "Bearer entra-fake-token-0000"
    assert "api-key" not in seen.headers and fake.refused == 0
    assert credential.scopes == ["https://cognitiveservices.azure.com/.default"]


async def test_a_wrong_key_is_an_upstream_auth_error_without_echoing_it() -> None:
    fake = FakeAzure([])
    async with azure_gateway(fake, azure_openai_api_key="wrong-key-1234") as client:
        answer = await client.post("/v1/stream", json={**ASK, "model": "azure/gpt4o-prod"})
    assert answer.status_code == 502 and answer.json()["error"]["code"] == "upstream_auth"
    assert "wrong-key-1234" not in answer.text and fake.refused == 1


async def test_a_prompt_refused_by_the_content_filter_is_blocked() -> None:
    refusal = {"error": {"message": "The response was filtered due to the prompt triggering Azure OpenAI's content "
                                    "management policy.", "type": None, "param": "prompt", "code": "content_filter",
                         "status": 400}}
    fake = FakeAzure([(400, refusal, {})])
    async with azure_gateway(fake, azure_openai_api_key=KEY) as client:
        answer = await client.post("/v1/stream", json={**ASK, "model": "azure/gpt4o-prod"})
    assert answer.status_code == 400
    assert answer.json()["error"]["code"] == "upstream_blocked"
    assert answer.json()["error"]["block_reason"] == "content_filter"


@pytest.mark.parametrize(("settings", "line"), [
    ({}, "azure: not served: AZURE_OPENAI_ENDPOINT is not set"),
    ({"azure_openai_endpoint": "https://res.openai.azure.com", "azure_openai_api_key": KEY},
     "azure: served (AZURE_OPENAI_ENDPOINT and AZURE_OPENAI_API_KEY set)"),
])
def test_config_check_lines(settings: dict[str, Any], line: str) -> None:
    lines = {s.name: s.line() for s in provider_statuses(Settings(**settings))}
    assert lines["azure"] == line and KEY not in str(lines)
