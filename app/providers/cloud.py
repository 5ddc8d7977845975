"""The one send path of the cloud providers (Bedrock, Vertex AI, Azure OpenAI).

A cloud provider is a `plan` (the `ProviderRequest` -> URL, body bytes, frame decoder and
normalizer of one streamed call: its request mapping and framing), a `RequestAuth` (the cloud's
credentials applied to the final request: SigV4 over the exact body bytes, a refreshed bearer, an
`api-key` header) and an `error_answer` (an HTTP error answer, its body bounded, as the gateway's
error). `CloudAdapter` sends the plan on the gateway's own aiohttp client (app/providers/upstream.py:
bounded heads and error bodies, redirects never followed: the request carries the credential) and
reads the body through the framing seam (`FramePatchStream`). Unlike `HttpAdapter` (one framing per
provider), a cloud picks its framing per model: Bedrock's Converse event stream or Claude's own
events inside it, Vertex AI's Gemini or Claude SSE.
`wire_for(model)` says which drop-in wire the provider speaks for a model, for a same-wire route
(Claude on Bedrock or Vertex AI speaks Anthropic Messages; Azure OpenAI its OpenAI wire).
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from dataclasses import dataclass
from typing import Any

import aiohttp

from app.core.errors import GatewayError, RequestError, UpstreamError
from app.core.messages import AdapterError
from app.providers.base import PatchStream, ProviderAdapter, ProviderRequest, mid_stream_errors
from app.providers.config import ProviderConfig
from app.providers.descriptor import RequestAuth, UpstreamRequest
from app.providers.framing import FrameDecoder, FramePatchStream, StreamNormalizer
from app.providers.passthrough import Wire
from app.providers.upstream import Proxy, bounded_read, client_session, proxy_for, send

__all__ = ["CloudAdapter", "CloudCall", "ErrorAnswer", "Plan"]

ErrorAnswer = Callable[[int, Mapping[str, str], bytes, str], GatewayError]


@dataclass(slots=True, kw_only=True)
class CloudCall:
    """What one request becomes: the wire request and how its answer is read."""

    request: UpstreamRequest
    decoder: FrameDecoder[Any]
    normalizer: StreamNormalizer[Any]
    relay: bool = False


Plan = Callable[[ProviderRequest], CloudCall]


class CloudAdapter(ProviderAdapter):
    """A cloud provider on the gateway's own aiohttp client (module docstring). `session`: an
    injected `aiohttp.ClientSession` (not closed here), else one of its own made at the first request."""

    def __init__(self, *, name: str, config: ProviderConfig, plan: Plan, auth: RequestAuth,
                 error_answer: ErrorAnswer, wire_for: Callable[[str], Wire | None] = lambda model: None,
                 session: aiohttp.ClientSession | None = None,
                 closing: Callable[[], Awaitable[None]] | None = None) -> None:
        self.name = name
        self._config = config
        self._plan = plan
        self.auth = auth
        self._error_answer = error_answer
        self.wire_for = wire_for
        self._session = session
        self._owns_session = session is None
        self._closing = closing
        self._proxies: dict[str, Proxy] = {}
        """The environment's proxy per upstream host, read at its first request (as HttpAdapter does)."""

    def ready(self) -> bool:
        return True  # built only when its credentials were found (the builders)

    async def aclose(self) -> None:
        if self._closing is not None:
            await self._closing()
        if self._owns_session and self._session is not None:
            await self._session.close()

    def _client(self) -> aiohttp.ClientSession:
        if self._session is None or self._session.closed:
            self._session = client_session(self._config)
        return self._session

    async def open_stream(self, request: ProviderRequest) -> PatchStream:
        try:
            call = self._plan(request)
        except AdapterError as exc:
            raise RequestError(f"{self.name}: {exc}", provider=self.name, field=exc.field) from None
        wire = call.request
        if request.trace_headers:
            wire.headers.update(request.trace_headers)
        try:
            await self.auth.apply(wire)
        except LookupError as exc:  # the credential chain found nothing (any more)
            raise UpstreamError(f"{self.name}: no credentials: {exc}", code="upstream_auth",
                                provider=self.name) from None
        host = "/".join(wire.url.split("/", 3)[:3])
        if host not in self._proxies:
            self._proxies[host] = proxy_for(wire.url)
        response = await send(self._client(), wire, self.name, self._proxies[host])
        if response.status >= 300:
            with mid_stream_errors(self.name):
                payload = await bounded_read(response, self._config.limits.max_body_bytes)
            raise self._error_answer(response.status, response.headers, payload, self.name)

        async def close() -> None:
            if response.content.at_eof():
                response.release()  # read to its end: the connection goes back to the pool
            else:
                response.close()  # the provider stops generating

        return FramePatchStream(_chunks(response), call.normalizer, decoder=call.decoder, close=close,
                                provider=self.name, limits=self._config.limits, relay=call.relay,
                                read_errors=mid_stream_errors)


async def _chunks(response: aiohttp.ClientResponse) -> AsyncIterator[bytes]:
    async for part in response.content.iter_any():
        yield part
