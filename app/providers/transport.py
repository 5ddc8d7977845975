"""The upstream HTTP transport: an `httpx2` transport whose bytes move through aiohttp.

The SDKs (`openai`, `anthropic`) and the Gemini adapter all speak `httpx2`; by default its
transport is the pure-Python httpcore2/h11 stack, which was 42% of the gateway's CPU under load
(issue 12). Both SDKs ship an aiohttp extra (`DefaultAioHttpClient`, a vendored httpx-aiohttp
transport); this is the same idea, kept here because of what the vendored one gets wrong for a
gateway that promises "refused is 502, silence is 504":
1. Errors are mapped by what happened, not by a first-match table: the vendored table turns a
   refused connection (`ClientConnectorError`) and a server that hangs up mid-body
   (`ServerDisconnectedError`) into `ConnectTimeout`, which the SDKs report as a timeout (504).
   Here: refused/DNS/TLS -> ConnectError, connect timeout -> ConnectTimeout, read silence ->
   ReadTimeout, a connection lost or a body cut -> ReadError / RemoteProtocolError.
2. The body is an async iterator over `StreamReader.readany()` (bytes as they arrive, no
   re-chunking, no generator per response), and `sse_body()` reads it directly when the body
   has no content-encoding (`AiohttpBody`), skipping httpx2's decoder and chunker layers.
3. `aclose()` on a body not read to the end drops the connection (aiohttp's `release()` closes a
   connection whose payload is not at EOF), so a cancelled run stops the upstream generating;
   a body read to the end returns its connection to the pool (reuse).
4. The proxy environment (HTTP(S)_PROXY, NO_PROXY) is honoured by the httpx2 client around
   this transport, which routes proxied URLs through its own transports.
5. `retries` repeats failed connection attempts only (as httpx2's `AsyncHTTPTransport(retries=)`);
   retries after a response started are never the transport's business.
The SDKs keep what they own: auth, base URLs, retries before the response, typed errors.
"""

from __future__ import annotations

import asyncio
import ssl
from typing import Any

import aiohttp
import httpx2

__all__ = ["AiohttpBody", "AiohttpTransport", "upstream_http_client"]


class AiohttpBody(httpx2.AsyncByteStream):
    """An aiohttp response body as httpx2 sees it: chunks as they arrive, errors mapped."""

    __slots__ = ("_response", "_content")

    def __init__(self, response: aiohttp.ClientResponse) -> None:
        self._response = response
        self._content = response.content

    def __aiter__(self) -> AiohttpBody:
        return self

    async def __anext__(self) -> bytes:
        try:
            chunk = await self._content.readany()
        except (TimeoutError, aiohttp.ClientError) as exc:
            raise _mapped(exc, connecting=False) from exc
        if not chunk:
            raise StopAsyncIteration
        return chunk

    async def aclose(self) -> None:
        # At EOF the connection goes back to the pool; before it, it is closed (point 3).
        self._response.release()


class AiohttpTransport(httpx2.AsyncBaseTransport):
    """`httpx2.AsyncBaseTransport` over one `aiohttp.ClientSession` (made on first use, inside
    the running loop). Timeouts come from each request (`connect`, `read`, `pool`)."""

    def __init__(
        self,
        *,
        limits: httpx2.Limits | None = None,
        retries: int = 0,
        verify: ssl.SSLContext | bool = True,
    ) -> None:
        self._limits = limits or httpx2.Limits(max_connections=1000, keepalive_expiry=5.0)  # the SDKs' own defaults
        self._retries = retries
        self._ssl = httpx2.create_ssl_context(verify=verify)
        self._session: aiohttp.ClientSession | None = None

    def _open_session(self) -> aiohttp.ClientSession:
        limits = self._limits
        connector = aiohttp.TCPConnector(
            limit=limits.max_connections or 0,
            keepalive_timeout=limits.keepalive_expiry if limits.keepalive_expiry is not None else 15.0,
            ssl=self._ssl,
        )
        # trust_env=False: the proxy environment is httpx2's business (its client mounts a
        # transport per proxy); aiohttp's would read it, and ~/.netrc, in a thread per request.
        self._session = aiohttp.ClientSession(connector=connector, trust_env=False, auto_decompress=False)
        return self._session

    async def handle_async_request(self, request: httpx2.Request) -> httpx2.Response:
        session = self._session if self._session is not None else self._open_session()
        timeout = request.extensions.get("timeout") or {}
        try:
            data: Any = request.content or None
        except httpx2.RequestNotRead:  # a streamed upload: aiohttp chunks it itself
            data = request.stream
            request.headers.pop("transfer-encoding", None)
        client_timeout = aiohttp.ClientTimeout(
            total=None, connect=timeout.get("pool"), sock_connect=timeout.get("connect"),
            sock_read=timeout.get("read"),
        )
        attempts = self._retries + 1
        while True:
            attempts -= 1
            try:
                response = await session.request(
                    request.method, str(request.url), headers=list(request.headers.multi_items()), data=data,
                    allow_redirects=False, compress=False, timeout=client_timeout,
                    server_hostname=request.extensions.get("sni_hostname"),
                )
                break
            except (TimeoutError, aiohttp.ClientError) as exc:
                mapped = _mapped(exc, connecting=True)
                if attempts > 0 and isinstance(mapped, (httpx2.ConnectError, httpx2.ConnectTimeout)):
                    continue
                raise mapped from exc
        return httpx2.Response(
            status_code=response.status,
            headers=response.raw_headers,
            stream=AiohttpBody(response),
            request=request,
            extensions={"http_version": b"HTTP/1.1", "reason_phrase": (response.reason or "").encode()},
        )

    async def aclose(self) -> None:
        if self._session is not None:
            session, self._session = self._session, None
            await session.close()


def _mapped(exc: BaseException, *, connecting: bool) -> httpx2.TransportError:
    """aiohttp failure -> the httpx2 exception the SDKs and adapters map (point 1)."""
    message = str(exc) or type(exc).__name__
    if isinstance(exc, aiohttp.ConnectionTimeoutError):
        return httpx2.ConnectTimeout(message)
    if isinstance(exc, (aiohttp.SocketTimeoutError, asyncio.TimeoutError)):
        return httpx2.ReadTimeout(message)
    if isinstance(exc, aiohttp.ClientProxyConnectionError | aiohttp.ClientHttpProxyError):
        return httpx2.ProxyError(message)
    if isinstance(exc, aiohttp.ClientConnectorError):
        return httpx2.ConnectError(message)
    if isinstance(exc, aiohttp.InvalidURL | aiohttp.NonHttpUrlClientError):
        return httpx2.UnsupportedProtocol(message)
    if isinstance(exc, aiohttp.ServerDisconnectedError | aiohttp.ClientResponseError):
        return httpx2.RemoteProtocolError(message)
    if isinstance(exc, aiohttp.ClientPayloadError):
        return httpx2.RemoteProtocolError(message)  # the body ended before its declared end
    if connecting and isinstance(exc, aiohttp.ClientOSError):
        return httpx2.ConnectError(message)
    return httpx2.ReadError(message)


def upstream_http_client(
    *, connect_timeout: float, read_timeout: float, retries: int = 0, follow_redirects: bool = False
) -> httpx2.AsyncClient:
    """An `httpx2.AsyncClient` on `AiohttpTransport`: what the gateway hands the SDKs
    (`http_client=`) and the Gemini adapter. `read_timeout` bounds silence before the headers
    and between reads; `connect_timeout` one connection attempt."""
    return httpx2.AsyncClient(
        transport=AiohttpTransport(retries=retries),
        timeout=httpx2.Timeout(read_timeout, connect=connect_timeout),
        follow_redirects=follow_redirects,
    )
