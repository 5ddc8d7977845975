"""`generate()`: one signature, declared by `ProviderAdapter` and written once on `open_stream()`
(app/providers/base.py), so every adapter answers a whole request as its run streams it; the one
exception is OpenAI Chat's, the reference adapter's non-streaming call with the same signature
(tested with the reference's fake client in test_openai_chat_adapter.py).

Every recording of the streamed wire formats, served by an injected transport: `generate()`
returns the message the stream's own final carries, or raises the error that ended it."""

from __future__ import annotations

import inspect
from collections.abc import Callable
from typing import Any

import anthropic
import httpx2
import openai
import pytest

from app.core.accumulator import Accumulator
from app.core.errors import GatewayError
from app.core.messages import AdapterError, Message
from app.providers.anthropic import AnthropicAdapter
from app.providers.base import ProviderAdapter, ProviderRequest, drive
from app.providers.gemini import GeminiAdapter
from app.providers.mock import MockAdapter
from app.providers.openai_chat import OpenAIAdapter
from app.providers.openai_responses import OpenAIResponsesAdapter
from tests.support import Recording, recordings
from tests.upstream_fakes import Body, event_stream

Handler = Callable[[httpx2.Request], httpx2.Response]
HI = (Message(role="user", content="Hi"),)


def _mock(handler: Handler) -> httpx2.AsyncClient:
    return httpx2.AsyncClient(transport=httpx2.MockTransport(handler))


ADAPTERS: dict[str, Callable[[Handler], ProviderAdapter]] = {
    "openai-chat": lambda h: OpenAIAdapter(openai.AsyncOpenAI(api_key="k", base_url="http://u.test/v1", max_retries=0,
                                                              http_client=_mock(h))),
    "openai-responses": lambda h: OpenAIResponsesAdapter(openai.AsyncOpenAI(
        api_key="k", base_url="http://u.test/v1", max_retries=0, http_client=_mock(h))),
    "anthropic": lambda h: AnthropicAdapter(anthropic.AsyncAnthropic(api_key="k", base_url="http://u.test",
                                                                     max_retries=0, http_client=_mock(h))),
    "gemini": lambda h: GeminiAdapter(_mock(h), api_key="k"),
}
RECORDINGS = [rec for provider in ADAPTERS if provider != "openai-chat" for rec in recordings(provider)]


def serving(rec: Recording) -> ProviderAdapter:
    return ADAPTERS[rec.provider](lambda req: event_stream(Body([rec.body[i:i + 211] for i in range(0, len(rec.body), 211)])))


@pytest.mark.parametrize("rec", RECORDINGS, ids=repr)
async def test_generate_answers_what_the_stream_releases(rec: Recording) -> None:
    streamed = serving(rec)
    final = await drive(await streamed.open_stream(ProviderRequest(model="m", messages=HI)),
                        Accumulator(model="m", provider=streamed.name))
    if final.status != "ok":
        with pytest.raises(GatewayError) as info:
            await serving(rec).generate(HI, model="m")
        assert final.error is not None and info.value.code == final.error["code"]
        return
    message = await serving(rec).generate(HI, model="m")
    assert message.role == "assistant"
    assert (message.content, message.tool_calls, message.reasoning) == (
        final.message.content, final.message.tool_calls, final.message.reasoning)


async def test_every_adapter_has_the_one_generate() -> None:
    adapters = [factory(lambda req: httpx2.Response(500)) for factory in ADAPTERS.values()]
    for adapter in [*adapters, MockAdapter()]:
        assert inspect.signature(type(adapter).generate) == inspect.signature(ProviderAdapter.generate)
        assert (type(adapter).generate is ProviderAdapter.generate) != isinstance(adapter, OpenAIAdapter)
    message = await MockAdapter().generate((Message(role="user", content="say it back"),), model="echo")
    assert message.content == "say it back"


@pytest.mark.parametrize(("options", "model", "match"), [
    ({"messages": []}, "m", "first argument"),
    ({"stream": True}, "m", "does not stream"),
    ({"stream": False}, "m", "does not stream"),
    ({}, "", "model is required"),
])
@pytest.mark.parametrize("provider", list(ADAPTERS))
async def test_generate_refuses_what_is_not_the_callers(provider: str, options: dict[str, Any], model: str,
                                                         match: str) -> None:
    adapter = ADAPTERS[provider](lambda req: pytest.fail("no request may be sent"))
    with pytest.raises(AdapterError, match=match):
        await adapter.generate(HI, model=model, **options)
