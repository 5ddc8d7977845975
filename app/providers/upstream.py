"""The gateway's own upstream client: one `aiohttp.ClientSession` per upstream, public API only
(`session.post`, `resp.content`), and `HttpAdapter`, a provider adapter on it (DESIGN.md section 4).

Why not the SDKs: on the path the gateway exists for, the SDK's request machinery (typed params,
its httpx layer over aiohttp) costs several times the CPU of aiohttp itself per request, and more
per chunk (measured in docs/performance.md); the gateway builds the bytes of each request from its
own converters and parses the answer's bytes once (its frame decoders).

Each session: the gateway's connect timeout and read timeout (the longest silence, before the
head or mid-body), a bounded pool kept alive 30 s, TLS verified against the trust store the
environment names (SSL_CERT_FILE), the proxy environment honoured (HTTP(S)_PROXY, ALL_PROXY,
NO_PROXY: `proxy_for`), response heads bounded (`max_line_size`, `max_field_size`), and never a redirect
followed (`allow_redirects=False`: the request carries the gateway's credential, so a 3xx is an
upstream error). An error answer is read up to `max_body_bytes` after decompression (aiohttp
inflates in bounded pieces) and no further. Failures are mapped in app/providers/errors.py.
"""

from __future__ import annotations

import contextlib
import functools
import os
import ssl
import urllib.request
from collections.abc import Awaitable, Callable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

import aiohttp
import yarl

from app.core.errors import GatewayError, RequestError, UpstreamError
from app.core.messages import AdapterError
from app.providers.base import PatchStream, ProviderAdapter, ProviderRequest, mid_stream_errors
from app.providers.config import DEFAULT_LIMITS, ProviderConfig, ReadLimits
from app.providers.descriptor import ProviderDescriptor, RequestAuth, UpstreamRequest
from app.providers.errors import CONNECTION_ERRORS, status_error, transport_error
from app.providers.framing import FrameDecoder, FramePatchStream, StreamNormalizer
from app.providers.passthrough import Wire, passthrough_for

__all__ = ["KEEPALIVE_SECONDS", "MAX_HEAD_BYTES", "Call", "ErrorAnswer", "HttpAdapter", "Plan", "SessionFactory",
           "bounded_read", "client_session", "descriptor_plan", "send"]

KEEPALIVE_SECONDS = 30.0
"""How long an idle upstream connection is kept for reuse (providers keep theirs 60 s or more, so
the gateway lets go first and never writes a request onto a connection being closed)."""

MAX_HEAD_BYTES = 64 * 1024
"""The longest response head line and header field the client holds (aiohttp's own default is 8 KiB)."""

SessionFactory = Callable[[], aiohttp.ClientSession]
_NO_ANSWER: tuple[type[Exception], ...] = (*CONNECTION_ERRORS, TimeoutError)


def client_session(config: ProviderConfig) -> aiohttp.ClientSession:
    """A session with the gateway's timeouts, pool, proxy rule and head bounds (module docstring).
    Built in the running loop (at a provider's first request)."""
    timeout = aiohttp.ClientTimeout(total=None, connect=config.connect_timeout, sock_connect=config.connect_timeout,
                                    sock_read=config.read_timeout)
    trust = (os.environ.get("SSL_CERT_FILE"), os.environ.get("SSL_CERT_DIR"))
    connector = aiohttp.TCPConnector(limit=1000, limit_per_host=0, keepalive_timeout=KEEPALIVE_SECONDS,
                                     ssl=_tls_context(*trust))
    return aiohttp.ClientSession(timeout=timeout, connector=connector, auto_decompress=True,
                                 max_line_size=MAX_HEAD_BYTES, max_field_size=MAX_HEAD_BYTES)


@functools.lru_cache(maxsize=8)
def _tls_context(cert_file: str | None, cert_dir: str | None) -> ssl.SSLContext:
    """The default context for the trust store the environment names now (SSL_CERT_FILE /
    SSL_CERT_DIR), not aiohttp's context made once at its import; one per trust store, shared by
    the sessions, since loading a CA bundle costs tens of milliseconds of CPU."""
    return ssl.create_default_context()


Proxy = tuple[str | None, dict[str, str] | None]
"""The proxy's URL and its `Proxy-Authorization` header (from the URL's credentials), or (None, None)."""


def proxy_for(url: str) -> Proxy:
    """The proxy the environment names for `url` (HTTPS_PROXY, HTTP_PROXY, ALL_PROXY; NO_PROXY
    honoured), with its credentials, or (None, None). Read once per upstream host (`HttpAdapter`),
    not per request as aiohttp's `trust_env` does (with netrc), which costs CPU on every request
    (docs/performance.md)."""
    parts = urlsplit(url)
    proxies = urllib.request.getproxies()
    proxy = proxies.get(parts.scheme) or proxies.get("all")
    if not proxy or urllib.request.proxy_bypass(parts.hostname or ""):
        return None, None
    target = yarl.URL(proxy if "://" in proxy else f"http://{proxy}")
    headers = None
    if target.user is not None:
        headers = {"Proxy-Authorization": aiohttp.encode_basic_auth(target.user, target.password or "")}
    return str(target.with_user(None)), headers


@contextlib.contextmanager
def _before_body(provider: str) -> Iterator[None]:
    try:
        yield
    except GatewayError:
        raise
    except _NO_ANSWER as exc:
        raise transport_error(exc, provider) from exc


async def send(session: aiohttp.ClientSession, request: UpstreamRequest, provider: str,
               proxy: Proxy = (None, None)) -> aiohttp.ClientResponse:
    """The request sent, its head read (a transport failure mapped: 502 unavailable, 504 timeout)."""
    with _before_body(provider):
        return await session.request(request.method, request.url, data=request.body, headers=request.headers,
                                     allow_redirects=False, proxy=proxy[0], proxy_headers=proxy[1])


async def bounded_read(response: aiohttp.ClientResponse, limit: int) -> bytes:
    """At most `limit` bytes of a body (decompressed), then the response closed."""
    body = bytearray()
    try:
        while len(body) < limit:
            part = await response.content.read(min(65536, limit - len(body)))
            if not part:
                break
            body += part
    finally:
        response.close()
    return bytes(body)


@dataclass(slots=True, kw_only=True)
class Call:
    """What one request becomes: the wire request, and how its answer is read (its frame decoder and
    normalizer, chosen per request: a cloud picks them per model). `relay`: each event also relayed
    as its own frame (a same-wire route)."""

    request: UpstreamRequest
    decoder: FrameDecoder[Any]
    normalizer: StreamNormalizer[Any]
    relay: bool = False


Plan = Callable[[ProviderRequest], Call]
"""A provider's request mapping and framing for one call; `HttpAdapter` sends it."""

ErrorAnswer = Callable[[int, Mapping[str, str], bytes, str], GatewayError]
"""(status, headers, bounded body, provider) -> the gateway's error for an HTTP error answer."""


def descriptor_plan(descriptor: ProviderDescriptor, config: ProviderConfig, name: str,
                    build: Callable[[ProviderRequest], UpstreamRequest] | None = None) -> Plan:
    """The plan of a provider with one framing: the descriptor's request builder (or `build`, e.g. an
    OpenAI-compatible server's), frame decoder and normalizer."""
    if build is None:
        builder = descriptor.request
        if builder is None:
            raise TypeError(f"{descriptor.name}: the descriptor has no request builder")

        def build(request: ProviderRequest) -> UpstreamRequest:
            return builder(request, config)
    framing, normalizer, wire = descriptor.framing, descriptor.normalizer, descriptor.wire
    if framing is None or normalizer is None:
        raise TypeError(f"{descriptor.name}: the descriptor has no framing or normalizer")
    limits, send_request = config.limits or DEFAULT_LIMITS, build

    def plan(request: ProviderRequest) -> Call:
        passthrough = passthrough_for(request.passthrough, wire) if wire else None  # type: ignore[arg-type]
        return Call(request=send_request(request), decoder=framing(limits), normalizer=normalizer(name),
                    relay=passthrough is not None and passthrough.relay)

    return plan


class HttpAdapter(ProviderAdapter):
    """A provider on the gateway's own client: the one send path of every provider adapter.

    Per request the `plan` (the descriptor's request builder, frame decoder and normalizer by
    default; a cloud's own, which picks the framing per model) gives the `Call`; the trace headers
    are added, the credentials hook (`auth`: a key, a refreshed bearer, SigV4 over the exact body
    bytes) is awaited on the final request, the request is sent, an error answer mapped (the
    descriptor's `error_answer`, its body bounded) and the body read through the framing seam.
    `wire_for(model)` says which drop-in wire it speaks for a model (the descriptor's `wire`, or a
    cloud's per model: Claude on Bedrock speaks Anthropic Messages). `session`: an injected
    `aiohttp.ClientSession` (tests, embedders; not closed here), else one of its own, made at the
    first request and closed with the adapter; `closing` is awaited at `aclose` (a credential's own
    client)."""

    def __init__(self, descriptor: ProviderDescriptor, config: ProviderConfig, *,
                 build: Callable[[ProviderRequest], UpstreamRequest] | None = None, plan: Plan | None = None,
                 session: aiohttp.ClientSession | None = None, name: str | None = None,
                 auth: RequestAuth | None = None, wire_for: Callable[[str], Wire | None] | None = None,
                 closing: Callable[[], Awaitable[None]] | None = None) -> None:
        self.name = name or descriptor.name
        self.wire = descriptor.wire
        self._config = config
        self._limits: ReadLimits = config.limits or DEFAULT_LIMITS
        self.plan: Plan = plan or descriptor_plan(descriptor, config, self.name, build)
        self._error_answer: ErrorAnswer | None = descriptor.error_answer
        self._wire_for = wire_for
        self._auth = auth if auth is not None else (descriptor.auth(config) if descriptor.auth else None)
        self._session = session
        self._owns_session = session is None
        self._closing = closing
        self._proxies: dict[str, Proxy] = {}

    def ready(self) -> bool:
        return True  # built only when its credentials are configured (the descriptor's build)

    def wire_for(self, model: str) -> Wire | None:
        """The drop-in wire this provider speaks for `model` (a same-wire route passes through)."""
        return self._wire_for(model) if self._wire_for is not None else self.wire  # type: ignore[return-value]

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
        """Send the request; raise GatewayError for anything known before the body starts."""
        try:
            call = self.plan(request)
        except AdapterError as exc:
            raise RequestError(f"{self.name}: {exc}", provider=self.name, field=exc.field) from None
        upstream = call.request
        if request.trace_headers:
            upstream.headers.update(request.trace_headers)
        response = await self.send(upstream)
        return await self._body(response, call)

    async def send(self, upstream: UpstreamRequest) -> aiohttp.ClientResponse:
        """The credentials applied to the final request, then sent: its head read (transport
        failures mapped); the answer is the caller's to read and close."""
        if self._auth is not None:
            try:
                await self._auth.apply(upstream)
            except LookupError as exc:  # a credential chain that found nothing (any more)
                raise UpstreamError(f"{self.name}: no credentials: {exc}", code="upstream_auth",
                                    provider=self.name) from None
        return await send(self._client(), upstream, self.name, self.proxy(upstream.url))

    def proxy(self, url: str) -> Proxy:
        """The environment's proxy for this upstream's host, read at its first request."""
        host = "/".join(url.split("/", 3)[:3])
        if host not in self._proxies:
            self._proxies[host] = proxy_for(url)
        return self._proxies[host]

    async def error(self, response: aiohttp.ClientResponse) -> GatewayError:
        """An HTTP error answer (its body read up to `max_body_bytes`) as the gateway's error."""
        with mid_stream_errors(self.name):
            payload = await bounded_read(response, self._limits.max_body_bytes)
        if self._error_answer is None:
            return status_error(response.status, payload[:300].decode("utf-8", "replace"), provider=self.name,
                                retry_after=response.headers.get("retry-after"))
        return self._error_answer(response.status, response.headers, payload, self.name)

    async def _body(self, response: aiohttp.ClientResponse, call: Call) -> PatchStream:
        if response.status >= 300:
            raise await self.error(response)
        if response.content_type == "application/json":
            with mid_stream_errors(self.name):
                text = (await bounded_read(response, 500)).decode("utf-8", "replace")
            raise UpstreamError(f"{self.name}: expected an event stream, got JSON: {text}", provider=self.name)

        async def close() -> None:
            if response.content.at_eof():
                response.release()  # read to its end: the connection goes back to the pool
            else:
                response.close()  # the provider stops generating

        return FramePatchStream(response.content.iter_any(), call.normalizer, close=close, provider=self.name,
                                decoder=call.decoder, relay=call.relay, read_errors=mid_stream_errors)
