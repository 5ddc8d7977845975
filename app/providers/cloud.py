"""The one send path of the cloud providers (Bedrock, Vertex AI, Azure OpenAI).

A cloud provider is a `plan` (the `ProviderRequest` -> URL, body bytes, frame decoder and
normalizer of one streamed call: its request mapping and framing), a `RequestAuth` (the cloud's
credentials applied to the final request: SigV4 over the exact body bytes, a refreshed bearer, an
`api-key` header) and an `error_answer` (an HTTP error answer, its body bounded, as the gateway's
error). `CloudAdapter` sends the plan through the injected `httpx2.AsyncClient` on aiohttp
(app/providers/http.py: bounded error bodies, redirects never followed: the request carries the
credential) and reads the body through the framing seam (`FramePatchStream`).
`wire_for(model)` says which drop-in wire the provider speaks for a model, for a same-wire route
(Claude on Bedrock or Vertex AI speaks Anthropic Messages; Azure OpenAI its OpenAI wire).
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol

import httpx2

from app.core.errors import GatewayError, RequestError, UpstreamError
from app.core.messages import AdapterError
from app.providers.base import PatchStream, ProviderAdapter, ProviderRequest, mid_stream_errors
from app.providers.config import DEFAULT_LIMITS, ReadLimits
from app.providers.errors import CONNECTION_ERRORS, transport_error
from app.providers.framing import FrameDecoder, FramePatchStream, StreamNormalizer
from app.providers.http import bounded_body
from app.providers.passthrough import Wire

__all__ = ["CloudAdapter", "CloudCall", "CloudRequest", "RequestAuth", "cloud_errors"]


@dataclass(slots=True, kw_only=True)
class CloudRequest:
    """One HTTP request to a cloud as it goes on the wire: what `RequestAuth` signs."""

    url: str
    body: bytes
    headers: dict[str, str] = field(default_factory=dict)


class RequestAuth(Protocol):
    """Credentials applied to the final request just before it is sent; raises LookupError when
    none can be had (the provider's `upstream_auth`)."""

    async def apply(self, request: CloudRequest) -> None: ...


@dataclass(slots=True, kw_only=True)
class CloudCall:
    """What one request becomes: the wire request and how its answer is read."""

    request: CloudRequest
    decoder: FrameDecoder[Any]
    normalizer: StreamNormalizer[Any]
    relay: bool = False


@contextlib.contextmanager
def cloud_errors(provider: str) -> Iterator[None]:
    """Before the body: a request the cloud cannot carry (400, naming the field), no credentials
    (502 `upstream_auth`), transport failures (502/504)."""
    try:
        yield
    except GatewayError:
        raise
    except AdapterError as exc:
        raise RequestError(f"{provider}: {exc}", provider=provider, field=exc.field) from exc
    except LookupError as exc:
        raise UpstreamError(f"{provider}: no credentials: {exc}", code="upstream_auth", provider=provider) from exc
    except CONNECTION_ERRORS as exc:
        raise transport_error(exc, provider) from exc


class CloudAdapter(ProviderAdapter):
    """A cloud provider on an injected `httpx2.AsyncClient` (module docstring)."""

    def __init__(self, client: httpx2.AsyncClient, *, name: str, plan: Callable[[ProviderRequest, ReadLimits], CloudCall],
                 auth: RequestAuth, error_answer: Callable[[int, Mapping[str, str], bytes, str], GatewayError],
                 wire_for: Callable[[str], Wire | None] = lambda model: None, owns_client: bool = False,
                 limits: ReadLimits = DEFAULT_LIMITS, closing: Callable[[], Any] | None = None) -> None:
        self.name = name
        self._client = client
        self._plan = plan
        self.auth = auth
        self._error_answer = error_answer
        self.wire_for = wire_for
        self._owns_client = owns_client
        self._limits = limits
        self._closing = closing

    def ready(self) -> bool:
        return True  # built only when its credentials were found (the builders)

    async def aclose(self) -> None:
        if self._closing is not None:
            await self._closing()
        if self._owns_client:
            await self._client.aclose()

    async def open_stream(self, request: ProviderRequest) -> PatchStream:
        with cloud_errors(self.name):
            call = self._plan(request, self._limits)
            wire = call.request
            await self.auth.apply(wire)
            headers = {**wire.headers, **request.trace_headers} if request.trace_headers else wire.headers
            client = self._client
            response = await client.send(client.build_request("POST", wire.url, content=wire.body, headers=headers),
                                         stream=True, follow_redirects=False)
            if response.status_code >= 300:
                payload = await bounded_body(response, self._limits.max_body_bytes)
                raise self._error_answer(response.status_code, response.headers, payload, self.name)
        return FramePatchStream(response.aiter_bytes(), call.normalizer, decoder=call.decoder, close=response.aclose,
                                provider=self.name, limits=self._limits, relay=call.relay, read_errors=mid_stream_errors)
