"""`HttpAdapter` (app/providers/upstream.py), the seam a provider plugs into: the descriptor's
request builder, then the credentials hook awaited on the final request (it can sign the exact
body bytes), on an injected `aiohttp.ClientSession` (used, not closed by the adapter)."""

from __future__ import annotations

import hashlib
from dataclasses import replace

import aiohttp
import orjson
import pytest
from pydantic import SecretStr

from app.core.accumulator import Accumulator
from app.core.errors import GatewayError
from app.core.events import FinalEvent
from app.core.messages import Message
from app.providers.base import ProviderRequest, drive
from app.providers.config import ProviderConfig
from app.providers.descriptor import UpstreamRequest
from app.providers.gemini_spec import GEMINI
from app.providers.upstream import HttpAdapter, proxy_for
from tests.support import recordings, serve
from tests.upstream_fakes import FakeUpstream

TEXT = next(r for r in recordings("gemini") if r.name == "text")
ASK = ProviderRequest(model="gemini-2.5-flash", messages=(Message(role="user", content="hi"),))


class BodySigner:
    """A credentials hook: a signature over the final body bytes, and a token fetched per request."""

    def __init__(self) -> None:
        self.signed: list[bytes] = []

    async def apply(self, request: UpstreamRequest) -> None:
        request.headers["x-body-sha256"] = hashlib.sha256(request.body).hexdigest()
        request.headers["authorization"] = "Bearer fresh-token"
        self.signed.append(request.body)


async def test_the_credentials_hook_signs_the_bytes_that_are_sent_on_the_injected_session() -> None:
    fake = FakeUpstream("/v1beta/models/{target}", [TEXT.body])
    signer = BodySigner()
    async with serve(fake.app()) as url, aiohttp.ClientSession() as session:
        config = ProviderConfig(values={"gemini_api_key": SecretStr("k"), "gemini_base_url": url})
        adapter = HttpAdapter(GEMINI, config, session=session, auth=signer)
        final = await drive(await adapter.open_stream(ASK), Accumulator(model="m", provider="gemini"))
        await adapter.aclose()
        assert not session.closed  # injected: the caller's to close
    assert isinstance(final, FinalEvent) and final.status == "ok"
    (sent,) = fake.requests
    assert sent.headers["x-body-sha256"] == hashlib.sha256(signer.signed[0]).hexdigest()
    assert sent.headers["authorization"] == "Bearer fresh-token"
    assert orjson.loads(signer.signed[0]) == sent.body


async def test_a_descriptor_without_an_error_mapping_still_answers_in_the_gateways_words() -> None:
    fake = FakeUpstream("/v1beta/models/{target}", [(429, {"oops": 1}, {"retry-after": "3"})])
    async with serve(fake.app()) as url:
        config = ProviderConfig(values={"gemini_api_key": SecretStr("k"), "gemini_base_url": url})
        adapter = HttpAdapter(replace(GEMINI, error_answer=None), config)
        with pytest.raises(GatewayError) as caught:
            await adapter.open_stream(ASK)
        await adapter.aclose()
    assert caught.value.status == 429 and caught.value.to_dict()["retry_after"] == "3"


def test_the_proxy_environment_is_read_for_the_upstream_host(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY", "NO_PROXY"):
        monkeypatch.delenv(name, raising=False)
        monkeypatch.delenv(name.lower(), raising=False)
    assert proxy_for("https://api.example.test/v1") == (None, None)
    monkeypatch.setenv("HTTPS_PROXY", "http://user:pw@proxy.test:3128")
    monkeypatch.setenv("NO_PROXY", "skip.test")
    proxy, headers = proxy_for("https://api.example.test/v1")
    assert proxy == "http://proxy.test:3128" and headers == {"Proxy-Authorization": "Basic dXNlcjpwdw=="}
    assert proxy_for("https://skip.test/v1") == (None, None)
    assert proxy_for("http://api.example.test/v1") == (None, None)  # HTTP_PROXY not set
