"""Each provider's adapter sends the request's trace context (`ProviderRequest.trace_headers`, set by
the routing layer per attempt when tracing is on) as request headers, beside its own; none without it."""

from __future__ import annotations

import pytest

from app.core.errors import GatewayError
from app.core.messages import Message
from app.providers.base import ProviderRequest
from tests.support import serve
from tests.upstream_fakes import Scripted, answer, http_adapter

TRACEPARENT = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
OWN_HEADER = {"openai": ("authorization", "Bearer sk-test"), "openai-responses": ("authorization", "Bearer sk-test"),
              "anthropic": ("authorization", "Bearer test-key"), "gemini": ("x-goog-api-key", "gm-test-key")}


@pytest.mark.parametrize("provider", sorted(OWN_HEADER))
@pytest.mark.parametrize("trace_headers", [{"traceparent": TRACEPARENT, "tracestate": "k=v"}, None])
async def test_the_trace_context_goes_upstream_as_headers(provider: str, trace_headers: dict[str, str] | None) -> None:
    fake = Scripted(lambda _: answer(400, {"error": {"message": "stop here", "type": "invalid_request_error"}}))
    request = ProviderRequest(model="m", messages=(Message(role="user", content="Hi"),), trace_headers=trace_headers)
    async with serve(fake.app()) as url:
        adapter = http_adapter(provider, url)
        with pytest.raises(GatewayError):
            await adapter.open_stream(request)
        await adapter.aclose()
    (sent,) = fake.requests
    if trace_headers is None:
        assert "traceparent" not in sent.headers
    else:
        assert sent.headers["traceparent"] == TRACEPARENT and sent.headers["tracestate"] == "k=v"
    name, value = OWN_HEADER[provider]  # the provider's own headers stay beside ours
    assert sent.headers[name] == value


@pytest.mark.parametrize("provider", sorted(OWN_HEADER))
async def test_one_requests_trace_context_does_not_stay_on_the_adapter(provider: str) -> None:
    """The trace headers go on that request's headers only: the next request through the same
    adapter carries none (the request builders make fresh headers per call)."""
    fake = Scripted(lambda _: answer(400, {"error": {"message": "stop here", "type": "invalid_request_error"}}))
    hi = (Message(role="user", content="Hi"),)
    async with serve(fake.app()) as url:
        adapter = http_adapter(provider, url)
        for trace_headers in ({"traceparent": TRACEPARENT}, None):
            with pytest.raises(GatewayError):
                await adapter.open_stream(ProviderRequest(model="m", messages=hi, trace_headers=trace_headers))
        await adapter.aclose()
    traced, plain = fake.requests
    assert traced.headers["traceparent"] == TRACEPARENT and "traceparent" not in plain.headers
