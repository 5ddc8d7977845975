"""`generate()`: one signature, declared by `ProviderAdapter` and written once on `open_stream()`
(app/providers/reference.py, the reference helpers' home), so every adapter answers a whole
request as its run streams it (the reference adapter's own tests: test_openai_chat_adapter.py).

Every recording of the streamed wire formats, served by a loopback provider to the adapter the
gateway builds from its keys: `generate()`
returns the message the stream's own final carries, or raises the error that ended it."""

from __future__ import annotations

import inspect
from typing import Any

import pytest

from app.core.accumulator import Accumulator
from app.core.errors import GatewayError
from app.core.messages import AdapterError, Message
from app.providers.base import ProviderAdapter, ProviderRequest, drive
from app.providers.mock import MockAdapter
from app.providers.reference import generate
from tests.support import Recording, recordings, serve
from tests.upstream_fakes import Scripted, closed_port_url, http_adapter, sse

HI = (Message(role="user", content="Hi"),)
PROVIDERS = {"openai-chat": "openai", "openai-responses": "openai-responses", "anthropic": "anthropic",
             "gemini": "gemini"}
"""Wire format -> the provider serving it."""
RECORDINGS = [rec for wire in PROVIDERS if wire != "openai-chat" for rec in recordings(wire)]


@pytest.mark.parametrize("rec", RECORDINGS, ids=repr)
async def test_generate_answers_what_the_stream_releases(rec: Recording) -> None:
    async with serve(Scripted(lambda _: sse(rec.body)).app()) as url:
        streamed = http_adapter(PROVIDERS[rec.provider], url)
        final = await drive(await streamed.open_stream(ProviderRequest(model="m", messages=HI)),
                            Accumulator(model="m", provider=streamed.name))
        try:
            if final.status != "ok":
                with pytest.raises(GatewayError) as info:
                    await streamed.generate(HI, model="m")
                assert final.error is not None and info.value.code == final.error["code"]
                return
            message = await streamed.generate(HI, model="m")
        finally:
            await streamed.aclose()
    assert message.role == "assistant"
    assert (message.content, message.tool_calls, message.reasoning) == (
        final.message.content, final.message.tool_calls, final.message.reasoning)


async def test_every_adapter_has_the_one_generate() -> None:
    adapters = [http_adapter(provider, closed_port_url()) for provider in PROVIDERS.values()]
    for adapter in [*adapters, MockAdapter()]:
        assert type(adapter).generate is ProviderAdapter.generate
    method = list(inspect.signature(ProviderAdapter.generate).parameters.values())[1:]  # less `self`
    function = list(inspect.signature(generate).parameters.values())[1:]  # less `adapter`
    assert method == function
    message = await MockAdapter().generate((Message(role="user", content="say it back"),), model="echo")
    assert message.content == "say it back"


@pytest.mark.parametrize(("options", "model", "match"), [
    ({"messages": []}, "m", "first argument"),
    ({"stream": True}, "m", "does not stream"),
    ({"stream": False}, "m", "does not stream"),
    ({}, "", "model is required"),
])
@pytest.mark.parametrize("provider", list(PROVIDERS.values()))
async def test_generate_refuses_what_is_not_the_callers(provider: str, options: dict[str, Any], model: str,
                                                         match: str) -> None:
    adapter = http_adapter(provider, closed_port_url())  # a request sent would fail as upstream_unavailable
    with pytest.raises(AdapterError, match=match):
        await adapter.generate(HI, model=model, **options)
