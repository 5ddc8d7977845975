"""The SDKs' aiohttp-backed HTTP clients, for the SDK adapters (an injected SDK client, the
reference `generate()`); the streamed calls the gateway builds from its configuration go through
its own aiohttp client instead (app/providers/upstream.py, docs/performance.md).

OpenAI and Anthropic get their SDK's `DefaultAioHttpClient` (the `aiohttp` extra); Gemini, which
has no SDK, an `httpx2.AsyncClient` on the same transport (`httpx_aiohttp.httpx2`, the package the
SDKs' client is built from). All three are httpx2 clients, so one error mapping serves them
(app/providers/errors.py) and tests can still inject `httpx2.MockTransport` clients.

Why aiohttp and not httpx2's default transport (httpcore2 + h11): `bench/transport_bench.py` (one
streamed POST to a loopback upstream, the adapters' path: the SDK's `client.post` with the
raw-stream options) finds the path on httpx2's default transport costlier in CPU per request and in
round trip than the path on `DefaultAioHttpClient`, by a wide margin, so aiohttp. The numbers, and
plain aiohttp as the floor, are in the bench's output and docs/performance.md.

Each client: the gateway's connect and read timeouts, a bounded pool, the proxy environment
honoured (`trust_env`: HTTP(S)_PROXY / NO_PROXY through httpx2's mounts), redirects never
followed (a provider's credential must not go to another origin, so a 3xx is an upstream error),
and every answer that is not a 2xx read only up to `max_body_bytes` after decompression
(`BoundedAnswers`): the SDKs read an error answer whole before raising their typed error, and a
gzip body of 300 KB can inflate to 300 MiB. httpx2 inflates in pieces of at most 1 MiB, so the
bound holds for memory too.
"""

from __future__ import annotations

from typing import Any

import anthropic
import httpx2
import openai
from httpx_aiohttp.httpx2 import Httpx2AiohttpClient

__all__ = ["UPSTREAM_LIMITS", "BoundedAnswers", "anthropic_http_client", "bounded_answer", "bounded_body", "gemini_http_client",
           "openai_http_client", "upstream_timeout"]

MAX_BODY_BYTES = 1 << 20
_FRAMING = frozenset({"content-encoding", "content-length", "transfer-encoding"})

UPSTREAM_LIMITS = httpx2.Limits(max_connections=1000, max_keepalive_connections=100, keepalive_expiry=30.0)
"""The SDKs' own default pool size; idle connections kept 30 s (providers keep theirs ~60 s+)."""


def upstream_timeout(*, connect: float, read: float) -> httpx2.Timeout:
    """`connect` for the connection, `read` for the longest silence (headers or mid-body)."""
    return httpx2.Timeout(read, connect=connect)


async def bounded_body(response: httpx2.Response, limit: int = 65536) -> bytes:
    """At most `limit` bytes of a body (an error answer), then the response closed: an upstream
    read is always bounded (DESIGN.md section 4)."""
    body = bytearray()
    try:
        async for part in response.aiter_bytes():
            body += part
            if len(body) >= limit:
                break
    finally:
        await response.aclose()
    return bytes(body[:limit])


async def bounded_answer(response: httpx2.Response, limit: int) -> httpx2.Response:
    """The same answer with at most `limit` bytes of its decoded body, already read (the rest is
    never read: the response is closed)."""
    content = await bounded_body(response, limit)
    headers = [(k, v) for k, v in response.headers.multi_items() if k.lower() not in _FRAMING]
    headers.append(("content-length", str(len(content))))
    return httpx2.Response(response.status_code, headers=headers, stream=httpx2.ByteStream(content),
                           request=response.request, extensions=response.extensions)


class BoundedAnswers(httpx2.AsyncClient):
    """`send` (the one method every client path ends in) reads a non-2xx answer, and any answer
    the caller did not ask to stream, only up to `max_body_bytes`: what an SDK then reads to
    build its error is that much. A streamed 2xx is left to its reader (the SSE decoder's caps)."""

    def __init__(self, *, max_body_bytes: int = MAX_BODY_BYTES, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.max_body_bytes = max_body_bytes

    async def send(self, request: httpx2.Request, *, stream: bool = False, **kwargs: Any) -> httpx2.Response:
        response = await super().send(request, stream=True, **kwargs)
        if stream and response.status_code < 300:
            return response
        bounded = await bounded_answer(response, self.max_body_bytes)
        if not stream:
            await bounded.aread()
        return bounded


class _OpenAIClient(BoundedAnswers, openai.DefaultAioHttpClient):
    pass


class _AnthropicClient(BoundedAnswers, anthropic.DefaultAioHttpClient):
    pass


class _GeminiClient(BoundedAnswers, Httpx2AiohttpClient):
    pass


def _options(connect_timeout: float, read_timeout: float, max_body_bytes: int) -> dict[str, Any]:
    return {"timeout": upstream_timeout(connect=connect_timeout, read=read_timeout), "limits": UPSTREAM_LIMITS,
            "follow_redirects": False, "trust_env": True, "max_body_bytes": max_body_bytes}


def openai_http_client(*, connect_timeout: float, read_timeout: float,
                       max_body_bytes: int = MAX_BODY_BYTES) -> httpx2.AsyncClient:
    """The OpenAI SDK's aiohttp client with the gateway's timeouts, pool, redirect rule and read bound."""
    return _OpenAIClient(**_options(connect_timeout, read_timeout, max_body_bytes))


def anthropic_http_client(*, connect_timeout: float, read_timeout: float,
                          max_body_bytes: int = MAX_BODY_BYTES) -> httpx2.AsyncClient:
    """The Anthropic SDK's aiohttp client with the gateway's timeouts, pool, redirect rule and read bound."""
    return _AnthropicClient(**_options(connect_timeout, read_timeout, max_body_bytes))


def gemini_http_client(*, connect_timeout: float, read_timeout: float,
                       max_body_bytes: int = MAX_BODY_BYTES) -> httpx2.AsyncClient:
    """An httpx2 client on aiohttp (the transport under the SDKs' `DefaultAioHttpClient`)."""
    return _GeminiClient(**_options(connect_timeout, read_timeout, max_body_bytes))
