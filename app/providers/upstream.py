"""The gateway's own upstream client: one `aiohttp.ClientSession` per upstream, public API only
(`session.post`, `resp.content`), and `HttpAdapter`, a provider adapter on it (DESIGN.md section 4).

Why not the SDKs: the SDK's `client.post` costs several times the CPU per request of aiohttp
directly, and more per chunk (the figures: docs/performance.md); the gateway builds the bytes
of each request from its own converters and parses the answer's bytes once (its frame decoders).

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
import ssl
import urllib.request
from collections.abc import AsyncIterator, Callable, Iterator
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
from app.providers.framing import FramePatchStream
from app.providers.passthrough import passthrough_for

__all__ = ["MAX_HEAD_BYTES", "HttpAdapter", "SessionFactory", "bounded_read", "client_session", "send"]

MAX_HEAD_BYTES = 64 * 1024
"""The longest response head line and header field the client holds (aiohttp's own default is 8 KiB)."""

SessionFactory = Callable[[], aiohttp.ClientSession]
_NO_ANSWER: tuple[type[Exception], ...] = (*CONNECTION_ERRORS, TimeoutError)


def client_session(config: ProviderConfig) -> aiohttp.ClientSession:
    """A session with the gateway's timeouts, pool, proxy rule and head bounds (module docstring).
    Built in the running loop (at a provider's first request)."""
    timeout = aiohttp.ClientTimeout(total=None, connect=config.connect_timeout, sock_connect=config.connect_timeout,
                                    sock_read=config.read_timeout)
    # The trust store as the environment names it now (SSL_CERT_FILE / SSL_CERT_DIR), not aiohttp's
    # context made once at its import.
    connector = aiohttp.TCPConnector(limit=1000, limit_per_host=0, keepalive_timeout=30.0,
                                     ssl=ssl.create_default_context())
    return aiohttp.ClientSession(timeout=timeout, connector=connector, auto_decompress=True,
                                 max_line_size=MAX_HEAD_BYTES, max_field_size=MAX_HEAD_BYTES)


Proxy = tuple[str | None, dict[str, str] | None]
"""The proxy's URL and its `Proxy-Authorization` header (from the URL's credentials), or (None, None)."""


def proxy_for(url: str) -> Proxy:
    """The proxy the environment names for `url` (HTTPS_PROXY, HTTP_PROXY, ALL_PROXY; NO_PROXY
    honoured), with its credentials, or (None, None). Read once per upstream host (`HttpAdapter`),
    not per request as aiohttp's `trust_env` does (with netrc), a CPU cost on every request (its
    figure: docs/performance.md)."""
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


async def _chunks(response: aiohttp.ClientResponse) -> AsyncIterator[bytes]:
    async for part in response.content.iter_any():
        yield part


class HttpAdapter(ProviderAdapter):
    """A provider on the gateway's own client: the descriptor's request builder, credentials hook,
    frame decoder, normalizer and error mapping (app/providers/descriptor.py).

    `build` makes the request of one call (the descriptor's `request` with this upstream's config
    bound, or a provider's own, e.g. an OpenAI-compatible server's). `session`: an injected
    `aiohttp.ClientSession` (tests, embedders; not closed here), else one of its own, made at the
    first request and closed with the adapter."""

    def __init__(self, descriptor: ProviderDescriptor, config: ProviderConfig, *,
                 build: Callable[[ProviderRequest], UpstreamRequest] | None = None,
                 session: aiohttp.ClientSession | None = None, name: str | None = None,
                 auth: RequestAuth | None = None) -> None:
        self.name = name or descriptor.name
        self.wire = descriptor.wire
        self._descriptor = descriptor
        self._config = config
        self._limits: ReadLimits = config.limits or DEFAULT_LIMITS
        if build is None:
            builder = descriptor.request
            if builder is None:
                raise TypeError(f"{descriptor.name}: the descriptor has no request builder")

            def build(request: ProviderRequest) -> UpstreamRequest:
                return builder(request, config)
        self._build = build
        self._auth = auth if auth is not None else (descriptor.auth(config) if descriptor.auth else None)
        self._session = session
        self._owns_session = session is None
        self._proxies: dict[str, Proxy] = {}

    def ready(self) -> bool:
        return True  # built only when its credentials are configured (the descriptor's build)

    async def aclose(self) -> None:
        if self._owns_session and self._session is not None:
            await self._session.close()

    def _client(self) -> aiohttp.ClientSession:
        if self._session is None or self._session.closed:
            self._session = client_session(self._config)
        return self._session

    async def open_stream(self, request: ProviderRequest) -> PatchStream:
        """Send the request; raise GatewayError for anything known before the body starts."""
        try:
            upstream = self._build(request)
        except AdapterError as exc:
            raise RequestError(f"{self.name}: {exc}", provider=self.name, field=exc.field) from None
        if request.trace_headers:
            upstream.headers.update(request.trace_headers)
        if self._auth is not None:
            await self._auth.apply(upstream)
        response = await send(self._client(), upstream, self.name, self.proxy(upstream.url))
        return await self._body(response, request)

    def proxy(self, url: str) -> Proxy:
        """The environment's proxy for this upstream's host, read at its first request."""
        key = url.split("/", 3)[:3]
        host = "/".join(key)
        if host not in self._proxies:
            self._proxies[host] = proxy_for(url)
        return self._proxies[host]

    async def _body(self, response: aiohttp.ClientResponse, request: ProviderRequest) -> PatchStream:
        descriptor, limits = self._descriptor, self._limits
        if response.status >= 300:
            with mid_stream_errors(self.name):
                payload = await bounded_read(response, limits.max_body_bytes)
            error = descriptor.error_answer
            if error is None:
                raise status_error(response.status, payload[:300].decode("utf-8", "replace"), provider=self.name,
                                   retry_after=response.headers.get("retry-after"))
            raise error(response.status, response.headers, payload, self.name)
        if response.content_type == "application/json":
            with mid_stream_errors(self.name):
                text = (await bounded_read(response, 500)).decode("utf-8", "replace")
            raise UpstreamError(f"{self.name}: expected an event stream, got JSON: {text}", provider=self.name)
        assert descriptor.framing is not None and descriptor.normalizer is not None
        wire = self.wire
        passthrough = passthrough_for(request.passthrough, wire) if wire else None  # type: ignore[arg-type]

        async def close() -> None:
            if response.content.at_eof():
                response.release()  # read to its end: the connection goes back to the pool
            else:
                response.close()  # the provider stops generating

        return FramePatchStream(_chunks(response), descriptor.normalizer(self.name), close=close,
                                provider=self.name, decoder=descriptor.framing(limits),
                                relay=passthrough is not None and passthrough.relay, read_errors=mid_stream_errors)


def json_request(url: str, body: dict[str, Any], headers: dict[str, str]) -> UpstreamRequest:
    """A JSON POST (orjson: the gateway's bytes, once)."""
    import orjson

    return UpstreamRequest(url=url, body=orjson.dumps(body), headers={"content-type": "application/json", **headers})
