"""Each SDK adapter sends the request's trace context (`ProviderRequest.trace_headers`, set by the
routing layer per attempt when tracing is on) as request headers, beside its own; none without it."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import anthropic
import httpx2
import openai
import pytest

from app.core.errors import GatewayError
from app.core.messages import Message
from app.providers.anthropic import AnthropicAdapter
from app.providers.base import ProviderAdapter, ProviderRequest
from app.providers.gemini import GeminiAdapter
from app.providers.openai_chat import OpenAIAdapter
from app.providers.openai_responses import OpenAIResponsesAdapter

TRACEPARENT = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
Handler = Callable[[httpx2.Request], httpx2.Response]


def _http(handler: Handler) -> httpx2.AsyncClient:
    return httpx2.AsyncClient(transport=httpx2.MockTransport(handler))


ADAPTERS: dict[str, Callable[[Handler], ProviderAdapter]] = {
    "openai": lambda h: OpenAIAdapter(openai.AsyncOpenAI(api_key="sk-test", base_url="http://up.test/v1", max_retries=0,
                                                         http_client=_http(h))),
    "openai-responses": lambda h: OpenAIResponsesAdapter(openai.AsyncOpenAI(
        api_key="sk-test", base_url="http://up.test/v1", max_retries=0, http_client=_http(h))),
    "anthropic": lambda h: AnthropicAdapter(anthropic.AsyncAnthropic(api_key="test-key", base_url="http://up.test",
                                                                     max_retries=0, http_client=_http(h))),
    "gemini": lambda h: GeminiAdapter(_http(h), api_key="gm-test-key"),
}


@pytest.mark.parametrize("provider", sorted(ADAPTERS))
@pytest.mark.parametrize("trace_headers", [{"traceparent": TRACEPARENT, "tracestate": "k=v"}, None])
async def test_the_trace_context_goes_upstream_as_headers(provider: str, trace_headers: dict[str, str] | None) -> None:
    seen: list[httpx2.Request] = []

    def handler(request: httpx2.Request) -> httpx2.Response:
        seen.append(request)
        return httpx2.Response(400, json={"error": {"message": "stop here", "type": "invalid_request_error"}})

    adapter: Any = ADAPTERS[provider](handler)
    request = ProviderRequest(model="m", messages=(Message(role="user", content="Hi"),), trace_headers=trace_headers)
    with pytest.raises(GatewayError):
        await adapter.open_stream(request)
    (sent,) = seen
    if trace_headers is None:
        assert "traceparent" not in sent.headers
    else:
        assert sent.headers["traceparent"] == TRACEPARENT and sent.headers["tracestate"] == "k=v"
    if provider != "gemini":  # the SDKs' own raw-stream marker stays beside ours
        assert sent.headers["x-stainless-raw-response"] == "stream"
    else:
        assert sent.headers["x-goog-api-key"] == "gm-test-key"


def test_the_shared_raw_stream_options_are_never_changed() -> None:
    from app.providers.base import RAW_STREAM, raw_stream

    before = {**RAW_STREAM, "headers": dict(RAW_STREAM["headers"])}
    options = raw_stream({"traceparent": TRACEPARENT})
    assert options["headers"]["traceparent"] == TRACEPARENT and raw_stream(None) is RAW_STREAM
    assert RAW_STREAM == before and "traceparent" not in RAW_STREAM["headers"]
