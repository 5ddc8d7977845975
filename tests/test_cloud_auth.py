"""Cloud credentials against loopback fakes: a service-account file's `token_uri` is where the
bearer comes from (the fake checks the signed assertion), cached until it expires; Azure's Entra
token is asked once and kept; the cloud URLs."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import httpx
import pytest

from app.core.messages import AdapterError
from app.providers.cloud_auth import AZURE_SCOPE, AzureBearer, GoogleBearer
from app.providers.cloud_urls import azure_url, vertex_url
from tests.cloud_fakes import EntraCredential, FakeGoogle, service_account
from tests.support import serve


async def test_adc_service_account_token_comes_from_its_token_uri(tmp_path: Path,
                                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    fake = FakeGoogle([])
    async with serve(fake.app()) as url:
        info, fake.public_key = service_account(f"{url}/token")
        path = tmp_path / "sa.json"
        path.write_text(json.dumps(info))
        monkeypatch.setenv("GOOGLE_APPLICATION_CREDENTIALS", str(path))
        found = GoogleBearer.from_adc()
        assert found is not None
        bearer, project = found
        assert project == "fake-project"
        first = await bearer.token()
        second = await bearer.token()
        async with httpx.AsyncClient() as client:
            answer = await client.post(f"{url}/v1/projects/p/locations/l/publishers/google/models/m:x",
                                       headers={"authorization": "Bearer forged"}, content=b"{}")
    assert first == second == "ya29.fake-0" and fake.issued == ["ya29.fake-0"]
    assert answer.status_code == 401 and fake.refused == 1


async def test_a_wrong_key_gets_no_token(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    fake = FakeGoogle([])
    async with serve(fake.app()) as url:
        info, _ = service_account(f"{url}/token")
        _, fake.public_key = service_account(f"{url}/token")  # the fake trusts another key
        path = tmp_path / "sa.json"
        path.write_text(json.dumps(info))
        monkeypatch.setenv("GOOGLE_APPLICATION_CREDENTIALS", str(path))
        found = GoogleBearer.from_adc()
        assert found is not None
        with pytest.raises(LookupError, match="could not be refreshed"):
            await found[0].token()
    assert fake.issued == []


async def test_azure_bearer_asks_once_for_the_cognitive_services_scope() -> None:
    credential = EntraCredential()
    bearer = AzureBearer(credential=credential)
    assert await bearer.token() == await bearer.token() == "entra-fake-token-0000"
    assert credential.scopes == [AZURE_SCOPE] == ["https://cognitiveservices.azure.com/.default"]


@pytest.mark.parametrize(("model", "location", "url"), [
    ("gemini-2.5-pro", "us-central1", "https://us-central1-aiplatform.googleapis.com/v1/projects/p/locations/"
     "us-central1/publishers/google/models/gemini-2.5-pro:streamGenerateContent?alt=sse"),
    ("claude-sonnet-4-5@20250929", "global", "https://aiplatform.googleapis.com/v1/projects/p/locations/global/"
     "publishers/anthropic/models/claude-sonnet-4-5@20250929:streamRawPredict"),
])
def test_vertex_urls(model: str, location: str, url: str) -> None:
    assert vertex_url(model, project="p", location=location) == url


def test_azure_urls() -> None:
    endpoint = "https://res.openai.azure.com/"
    assert azure_url(endpoint, "gpt4o-prod", api="chat") == "https://res.openai.azure.com/openai/v1/chat/completions"
    assert azure_url(endpoint, "gpt4o-prod", api="chat", api_version="2024-10-21") == (
        "https://res.openai.azure.com/openai/deployments/gpt4o-prod/chat/completions?api-version=2024-10-21")
    assert azure_url(endpoint, "d", api="responses", api_version="2025-04-01-preview") == (
        "https://res.openai.azure.com/openai/responses?api-version=2025-04-01-preview")
    with pytest.raises(AdapterError):
        azure_url(endpoint, "a/b", api="chat")


class _Refused:
    async def get_token(self, *scopes: str, **kwargs: Any) -> Any:
        from azure.core.exceptions import ClientAuthenticationError

        raise ClientAuthenticationError("DefaultAzureCredential failed to retrieve a token")

    async def close(self) -> None:
        pass


async def test_a_credential_that_cannot_be_had_is_a_lookup_error() -> None:
    with pytest.raises(LookupError, match="no Microsoft Entra ID token"):
        await AzureBearer(credential=_Refused()).token()
