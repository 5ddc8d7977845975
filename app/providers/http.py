"""The HTTP clients the gateway builds for its providers: the SDKs' own aiohttp-backed clients.

OpenAI and Anthropic get their SDK's `DefaultAioHttpClient` (the `aiohttp` extra); Gemini, which
has no SDK, an `httpx2.AsyncClient` on the same transport (`httpx_aiohttp.httpx2`, the package the
SDKs' client is built from). All three are httpx2 clients, so one error mapping serves them
(app/providers/errors.py) and tests can still inject `httpx2.MockTransport` clients.

Why aiohttp and not httpx2's default transport (httpcore2 + h11): measured with
`bench/transport_bench.py` (one streamed POST to a loopback upstream, the adapters' path: the SDK's
`client.post` with the raw-stream options), the same path on httpx2's default transport costs
about 1.8x the CPU per request and about 2.5x the round trip of the path on `DefaultAioHttpClient`;
not close, so aiohttp. The numbers, and plain aiohttp as the floor, are in the bench's output.

Each client: the gateway's connect and read timeouts, a bounded pool, the proxy environment
honoured (`trust_env`: HTTP(S)_PROXY / NO_PROXY through httpx2's mounts), and redirects never
followed: a provider's credential must not go to another origin, so a 3xx is an upstream error.
"""

from __future__ import annotations

import anthropic
import httpx2
import openai
from httpx_aiohttp.httpx2 import Httpx2AiohttpClient

__all__ = ["UPSTREAM_LIMITS", "anthropic_http_client", "gemini_http_client", "openai_http_client", "upstream_timeout"]

UPSTREAM_LIMITS = httpx2.Limits(max_connections=1000, max_keepalive_connections=100, keepalive_expiry=30.0)
"""The SDKs' own default pool size; idle connections kept 30 s (providers keep theirs ~60 s+)."""


def upstream_timeout(*, connect: float, read: float) -> httpx2.Timeout:
    """`connect` for the connection, `read` for the longest silence (headers or mid-body)."""
    return httpx2.Timeout(read, connect=connect)


def openai_http_client(*, connect_timeout: float, read_timeout: float) -> httpx2.AsyncClient:
    """The OpenAI SDK's aiohttp client with the gateway's timeouts, pool and redirect rule."""
    client: httpx2.AsyncClient = openai.DefaultAioHttpClient(
        timeout=upstream_timeout(connect=connect_timeout, read=read_timeout), limits=UPSTREAM_LIMITS,
        follow_redirects=False, trust_env=True,
    )
    return client


def anthropic_http_client(*, connect_timeout: float, read_timeout: float) -> httpx2.AsyncClient:
    """The Anthropic SDK's aiohttp client with the gateway's timeouts, pool and redirect rule."""
    client: httpx2.AsyncClient = anthropic.DefaultAioHttpClient(
        timeout=upstream_timeout(connect=connect_timeout, read=read_timeout), limits=UPSTREAM_LIMITS,
        follow_redirects=False, trust_env=True,
    )
    return client


def gemini_http_client(*, connect_timeout: float, read_timeout: float) -> httpx2.AsyncClient:
    """An httpx2 client on aiohttp (the transport under the SDKs' `DefaultAioHttpClient`)."""
    return Httpx2AiohttpClient(
        timeout=upstream_timeout(connect=connect_timeout, read=read_timeout), limits=UPSTREAM_LIMITS,
        follow_redirects=False, trust_env=True,
    )
