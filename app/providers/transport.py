"""The upstream HTTP transport: an `httpx2` transport speaking HTTP/1.1 itself, on asyncio's
transports and `httptools` (llhttp, the parser uvicorn serves with).

The SDKs (`openai`, `anthropic`) and the Gemini adapter all speak `httpx2`. Its default
transport, the pure-Python httpcore2/h11 stack, was 42% of the gateway's CPU under load (issue
12). The SDKs' aiohttp extra replaced it for a while; this replaced that. Measured reason
(`python bench/transport_bench.py`: one 1-chunk streamed POST to the bench upstream on loopback,
its body read, in a loop on uvloop; 3000 requests each, this 2-core VM):

| client                                              | round trip median | CPU per request |
|-----------------------------------------------------|-------------------|-----------------|
| httpx2 on its default transport (httpcore2 + h11)   | 639 us            | 613 us          |
| aiohttp alone (URL, headers, timeout built once)    | 271 us            | 203 us          |
| the gateway's prepared request on this transport    | 194 us            | 122 us          |

The gateway's request through httpx2 on aiohttp measured 363 us and 300 us the same way.
aiohttp's request path (URL and header objects, cookie jar, tracing hooks, per-read flow-control
resumes) stood between the gateway and the upstream write for ~145 us of every request's time to
first token. A streamed POST to a provider needs little of it: one pooled keep-alive connection,
the request written in one `write`, the response parsed by llhttp, body bytes handed over as they
arrive. That is all this does, with the gateway's promises kept:
1. Errors are mapped by what happened: refused/DNS/TLS -> ConnectError, connect timeout ->
   ConnectTimeout, silence before the headers or between reads -> ReadTimeout, a peer that hangs
   up or a body cut short -> RemoteProtocolError, a reset mid-body -> ReadError, a malformed
   answer -> RemoteProtocolError.
2. The body is an async iterator of the bytes as they arrive (`H1Body`); `sse_body()` reads it
   directly when it has no content-encoding, skipping httpx2's decoder and chunker layers. An
   encoded body goes through httpx2's decoders as with any transport.
3. `aclose()` on a body not read to the end closes its connection, so a cancelled run stops the
   upstream generating; a body read to the end returns its connection to the pool (reuse), unless
   the server said `Connection: close`. An idle connection is closed `keepalive_expiry` seconds
   after its last response, and leaves the pool at once if the server closes it first.
4. The proxy environment (HTTP(S)_PROXY, NO_PROXY) is honoured by the httpx2 client around this
   transport, which routes proxied URLs through its own transports.
5. Connecting: the host's addresses are tried with Happy Eyeballs (`aiohappyeyeballs`, as aiohttp
   does), within the connect timeout. `retries` repeats failed connection attempts only (as httpx2's
   `AsyncHTTPTransport(retries=)`); retries after a request was written are never the transport's
   business.
6. Flow control both ways: the request body waits for the socket to drain (or for an answer that
   came first: the server refused it unread, and that connection carries no other request); a body
   buffered past `_HIGH_WATER` bytes because its reader is slow pauses reading from the upstream.
Not spoken: HTTP/2, `Expect: 100-continue`, upgrades. HEAD and CONNECT go to httpx2's own
transport (the gateway sends neither).
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import socket
import ssl
from collections.abc import Mapping
from typing import Any

import aiohappyeyeballs
import httptools
import httpx2
from httpx2._utils import get_environment_proxies  # the client's own reading of HTTP(S)_PROXY, NO_PROXY

__all__ = ["H1Body", "H1Transport", "Origin", "head", "origin", "upstream_http_client"]

Origin = tuple[bytes, str, int]
"""(scheme, host, port): the connections a request may use."""

_HIGH_WATER = 1 << 20
"""Bytes buffered for a reader before reading from the upstream pauses (it resumes once they are taken)."""
_NO_BODY_STATUS = frozenset({204, 304})
_MAX_HEAD = 100 * 1024
"""Bytes a response head may take before it is refused (httpcore2's h11 bound, MAX_INCOMPLETE_EVENT_SIZE)."""


class _Connection(asyncio.Protocol):
    """One HTTP/1.1 connection: one request at a time, its response parsed as it arrives."""

    __slots__ = ("transport", "parser", "loop", "status", "reason", "headers", "chunks", "buffered",
                 "head", "waiter", "complete", "until_close", "error", "closed", "keep_alive", "paused",
                 "idle_since", "reading", "write_waiter", "version", "key", "pool", "expiry", "head_size", "sent")

    def __init__(self, loop: asyncio.AbstractEventLoop, key: Origin) -> None:
        self.loop = loop
        self.key = key
        self.transport: asyncio.Transport | None = None
        self.closed = False
        self.idle_since = 0.0
        self.reading = False  # a request is in flight: bytes now belong to its response
        self.write_waiter: asyncio.Future[None] | None = None
        self.paused = False
        self.pool: list[_Connection] | None = None
        """The idle list this connection waits in (H1Transport), while it waits."""
        self.expiry: asyncio.TimerHandle | None = None
        self._reset()

    def _reset(self) -> None:
        self.parser = httptools.HttpResponseParser(self)
        self.status = 0
        self.reason = b""
        self.version = "1.1"
        self.headers: list[tuple[bytes, bytes]] = []
        self.head_size = 0
        self.sent = False  # the whole request reached the socket (else the connection carries no other)
        self.chunks: collections.deque[bytes] = collections.deque()
        self.buffered = 0
        self.head: asyncio.Future[None] | None = None
        self.waiter: asyncio.Future[None] | None = None
        self.complete = False
        self.until_close = False
        self.keep_alive = False
        self.error: httpx2.TransportError | None = None

    # -- asyncio.Protocol --

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]

    def data_received(self, data: bytes) -> None:
        if not self.reading or self.complete:  # bytes nobody asked for (a server talking out of turn): unusable
            self.closed = True
            assert self.transport is not None
            self.transport.close()
            return
        try:
            self.parser.feed_data(data)
        except httptools.HttpParserError as exc:
            if self.complete:  # bytes past the whole answer (on_message_begin): they only retire the connection
                self.closed = True
            else:
                self._fail(httpx2.RemoteProtocolError(f"malformed HTTP response from the upstream: {exc}"))
            assert self.transport is not None
            self.transport.close()
            return
        if not self.status:  # all of it was head: held until the head ends, so bounded
            self.head_size += len(data)
            if self.head_size > _MAX_HEAD:
                self._fail(httpx2.RemoteProtocolError(f"the upstream's response head is over {_MAX_HEAD} bytes"))
                assert self.transport is not None
                self.transport.close()
                return
        if self.buffered > _HIGH_WATER and not self.paused and self.transport is not None:
            self.paused = True
            self.transport.pause_reading()
        self._wake()

    def eof_received(self) -> bool:
        return False  # close our side too: connection_lost follows

    def connection_lost(self, exc: Exception | None) -> None:
        self.closed = True
        self.unpool()  # closed while idle (the server let it go): out of the pool now
        if self.reading and not self.complete and self.error is None:
            if self.head is None or not self.head.done():
                self._fail(_lost(exc, "the upstream closed the connection without sending a response"))
            elif self.until_close and exc is None:
                self.complete = True  # a body delimited by the connection's end
            else:
                self._fail(_lost(exc, "the upstream closed the connection before the body ended"))
        waiter, self.write_waiter = self.write_waiter, None
        if waiter is not None and not waiter.done():
            waiter.set_exception(_lost(exc, "the upstream closed the connection while the request was sent"))
        self._wake()

    def pause_writing(self) -> None:
        if self.write_waiter is None:
            self.write_waiter = self.loop.create_future()

    def resume_writing(self) -> None:
        waiter, self.write_waiter = self.write_waiter, None
        if waiter is not None and not waiter.done():
            waiter.set_result(None)

    # -- httptools callbacks --

    def on_message_begin(self) -> None:
        if self.complete:  # a second answer in the same read: never the body of the first
            raise httptools.HttpParserError("an answer after the one asked for")

    def on_status(self, reason: bytes) -> None:
        self.reason += reason

    def on_header(self, name: bytes, value: bytes) -> None:
        if not self.status:  # once the headers are in, a chunked body's trailers: not headers (RFC 9110 6.5.1)
            self.headers.append((name, value))

    def on_headers_complete(self) -> None:
        status = self.parser.get_status_code()
        if 100 <= status < 200:  # informational (never asked for): the real answer follows
            self.headers, self.reason = [], b""
            return
        self.status = status
        self.version = self.parser.get_http_version()
        self.until_close = status not in _NO_BODY_STATUS and not any(
            name.lower() in (b"content-length", b"transfer-encoding") for name, _ in self.headers)
        if self.head is not None and not self.head.done():
            self.head.set_result(None)

    def on_body(self, body: bytes) -> None:
        self.chunks.append(body)
        self.buffered += len(body)

    def on_message_complete(self) -> None:
        if self.status == 0:  # the end of an informational answer
            return
        self.complete = True
        self.keep_alive = self.parser.should_keep_alive()

    # -- the pool's side --

    def unpool(self) -> None:
        """Leave the idle list (if in one) and drop its expiry timer."""
        pool, self.pool = self.pool, None
        if pool is not None:
            with contextlib.suppress(ValueError):
                pool.remove(self)
        if self.expiry is not None:
            self.expiry.cancel()
            self.expiry = None

    def expire(self) -> None:
        """Idle past the keep-alive expiry: closed."""
        self.expiry = None
        self.unpool()
        self.discard()

    # -- the request's side --

    def _fail(self, error: httpx2.TransportError) -> None:
        if self.error is None:
            self.error = error
        if self.head is not None and not self.head.done():
            self.head.set_exception(error)
        self._wake()

    def _wake(self) -> None:
        waiter = self.waiter
        if waiter is not None and not waiter.done():
            waiter.set_result(None)

    def take(self) -> bytes:
        """The body bytes buffered so far (reading resumes once the reader caught up)."""
        chunks = self.chunks
        data = chunks.popleft() if len(chunks) == 1 else b"".join(chunks)
        chunks.clear()
        self.buffered = 0
        if self.paused and self.transport is not None:
            self.paused = False
            self.transport.resume_reading()
        return data

    async def wait(self, silence: float | None) -> None:
        """Until more of the body, its end, or an error; ReadTimeout after `silence` seconds."""
        waiter = self.waiter = self.loop.create_future()
        deadline = _deadline(waiter, silence)
        try:
            await waiter
        finally:
            self.waiter = None
            if deadline is not None:
                deadline.cancel()

    def discard(self) -> None:
        """Closed and done with: never pooled again, nobody left waiting on the request's send."""
        self.reading = False
        self.closed = True
        waiter, self.write_waiter = self.write_waiter, None
        if waiter is not None:  # nobody waits for the rest of the request now: no error left unretrieved
            waiter.cancel()
        if self.transport is not None:
            self.transport.close()


def _deadline(waiter: asyncio.Future[None], silence: float | None) -> asyncio.TimerHandle | None:
    """Fail `waiter` (the response head, or more of the body) with ReadTimeout after `silence`
    seconds; the caller cancels the handle once it stopped waiting. (Not a coroutine wrapping
    the await: this runs once per upstream read, where a coroutine frame more is not wanted.)"""
    return None if silence is None else waiter.get_loop().call_later(silence, _silent, waiter, silence)


def _silent(waiter: asyncio.Future[None], silence: float) -> None:
    if not waiter.done():
        waiter.set_exception(httpx2.ReadTimeout(f"the upstream was silent for {silence:g} s"))


def _lost(exc: Exception | None, message: str) -> httpx2.TransportError:
    if isinstance(exc, OSError):  # a reset or another socket error
        return httpx2.ReadError(f"{message}: {exc}")
    return httpx2.RemoteProtocolError(message)


class H1Body(httpx2.AsyncByteStream):
    """A response body as httpx2 sees it: bytes as they arrive, errors mapped (point 2)."""

    __slots__ = ("_conn", "_read_timeout", "_release", "_done")

    def __init__(self, conn: _Connection, read_timeout: float | None, release: Any) -> None:
        self._conn = conn
        self._read_timeout = read_timeout
        self._release = release
        self._done = False

    def __aiter__(self) -> H1Body:
        return self

    async def __anext__(self) -> bytes:
        conn = self._conn
        while True:
            if conn.chunks:
                return conn.take()
            if conn.error is not None:
                raise conn.error
            if conn.complete or self._done:
                await self.aclose()
                raise StopAsyncIteration
            await conn.wait(self._read_timeout)

    async def aclose(self) -> None:
        if not self._done:
            self._done = True
            self._release(self._conn)


class H1Transport(httpx2.AsyncBaseTransport):
    """`httpx2.AsyncBaseTransport` over pooled HTTP/1.1 connections (see the module's notes).
    Timeouts come from each request (`connect`, `read`, `write`, `pool`)."""

    def __init__(
        self,
        *,
        limits: httpx2.Limits | None = None,
        retries: int = 0,
        verify: ssl.SSLContext | bool = True,
    ) -> None:
        limits = limits or httpx2.Limits(max_connections=1000, keepalive_expiry=5.0)  # the SDKs' own defaults
        self._slots = asyncio.Semaphore(limits.max_connections) if limits.max_connections else None
        self._keepalive = limits.keepalive_expiry if limits.keepalive_expiry is not None else 5.0
        self._retries = retries
        self._ssl = httpx2.create_ssl_context(verify=verify)
        self._idle: dict[Origin, list[_Connection]] = {}
        self._fallback: httpx2.AsyncHTTPTransport | None = None
        self._verify = verify
        self._closed = False

    async def handle_async_request(self, request: httpx2.Request) -> httpx2.Response:
        method = request.method
        if method in ("HEAD", "CONNECT"):  # not spoken here: httpx2's own transport
            if self._fallback is None:
                self._fallback = httpx2.AsyncHTTPTransport(verify=self._verify, retries=self._retries)
            return await self._fallback.handle_async_request(request)
        try:
            body: bytes | None = request.content
        except httpx2.RequestNotRead:  # a streamed upload: sent chunked as it comes
            body = None
        return await self.exchange(origin(request.url), head(request), body, request,
                                   request.extensions.get("timeout") or {}, stream=request.stream)

    async def exchange(self, key: Origin, head: bytes, body: bytes | None, request: httpx2.Request,
                       timeouts: Mapping[str, float | None], *, stream: Any = None) -> httpx2.Response:
        """Send one request (`head`: its request line and headers, less the body's framing; then
        `body`, or else `stream` chunked) on a pooled connection to `key` and return the response
        once its headers are in. `request` is only what the response names as its request."""
        if self._closed:
            raise httpx2.ConnectError("the transport is closed")
        slots = self._slots
        if slots is not None:
            if slots.locked():
                try:
                    async with asyncio.timeout(timeouts.get("pool")):
                        await slots.acquire()
                except TimeoutError:
                    raise httpx2.PoolTimeout("no upstream connection became free in time") from None
            else:
                await slots.acquire()
        conn: _Connection | None = None
        read = timeouts.get("read")
        try:
            conn = self._reuse(key) or await self._connect(key, timeouts.get("connect"),
                                                           request.extensions.get("sni_hostname"))
            conn.reading = True
            conn.head = head_ready = conn.loop.create_future()
            await self._send(conn, head, body, stream, request.method, timeouts.get("write"))
            if not head_ready.done():
                deadline = _deadline(head_ready, read)
                try:
                    await head_ready
                finally:
                    if deadline is not None:
                        deadline.cancel()
            else:
                head_ready.result()  # raises what failed it
        except BaseException:
            if conn is not None:
                conn.discard()
            if slots is not None:
                slots.release()
            raise
        return httpx2.Response(
            status_code=conn.status,
            headers=conn.headers,
            stream=H1Body(conn, read, self._release),
            request=request,
            extensions={"http_version": b"HTTP/" + conn.version.encode(), "reason_phrase": conn.reason},
        )

    def _reuse(self, key: Origin) -> _Connection | None:
        idle = self._idle.get(key)
        if not idle:
            return None
        expired = asyncio.get_running_loop().time() - self._keepalive  # should its timer run late
        while idle:
            conn = idle[-1]  # the most recently used first
            conn.unpool()
            assert conn.transport is not None
            if not conn.closed and conn.idle_since > expired and not conn.transport.is_closing():
                conn._reset()
                return conn
            conn.discard()
        return None

    async def _connect(self, key: Origin, within: float | None, sni: str | None) -> _Connection:
        scheme, host, port = key
        loop = asyncio.get_running_loop()
        tls = self._ssl if scheme == b"https" else None
        attempts = self._retries + 1
        while True:
            attempts -= 1
            try:
                async with asyncio.timeout(within):
                    # Happy Eyeballs (RFC 8305) over the host's addresses, as aiohttp connects: a
                    # dead IPv6 path costs 0.25 s, not the whole connect timeout (uvloop's own
                    # create_connection tries addresses one after another).
                    infos = await loop.getaddrinfo(host, port, type=socket.SOCK_STREAM)
                    sock = await aiohappyeyeballs.start_connection(infos, happy_eyeballs_delay=0.25, interleave=1)
                    try:
                        _, conn = await loop.create_connection(
                            lambda: _Connection(loop, key), sock=sock, ssl=tls,
                            server_hostname=(sni or host) if tls is not None else None)
                    except BaseException:
                        sock.close()
                        raise
                return conn
            except TimeoutError:
                error: httpx2.TransportError = httpx2.ConnectTimeout(f"connecting to {host}:{port} took over {within} s")
            except (OSError, ssl.SSLError) as exc:  # refused, unreachable, DNS, a TLS handshake refused
                error = httpx2.ConnectError(f"cannot connect to {host}:{port}: {exc}")
            if attempts <= 0:
                raise error

    async def _send(self, conn: _Connection, head: bytes, body: bytes | None, stream: Any, method: str,
                    within: float | None) -> None:
        transport = conn.transport
        assert transport is not None
        if body is not None:
            transport.write(head + b"content-length: %d\r\n\r\n" % len(body) + body
                            if body or method in ("POST", "PUT", "PATCH") else head + b"\r\n")
        else:
            transport.write(head + b"transfer-encoding: chunked\r\n\r\n")
            async for part in stream:
                if part:
                    transport.write(b"%x\r\n%s\r\n" % (len(part), part))
                    if not await self._drained(conn, within):
                        return  # answered already: the rest is not sent
            transport.write(b"0\r\n\r\n")
        conn.sent = await self._drained(conn, within)

    @staticmethod
    async def _drained(conn: _Connection, within: float | None) -> bool:
        """Until the socket took what was written (True), or the answer's head came first (False):
        a server may refuse a request it has not read (a 413, a 429) and stop reading it."""
        waiter = conn.write_waiter
        if waiter is None:
            return True
        head = conn.head
        assert head is not None
        try:
            async with asyncio.timeout(within):
                await asyncio.wait((waiter, head), return_when=asyncio.FIRST_COMPLETED)
        except TimeoutError:
            raise httpx2.WriteTimeout(f"the upstream did not take the request within {within} s") from None
        if waiter.done() and not (head.done() and waiter.exception() is not None):
            waiter.result()  # drained, or what ended the connection before any answer
            return True
        return False

    def _release(self, conn: _Connection) -> None:
        """A response closed: its connection back to the pool when its body was read to the end
        and the server keeps it alive, else closed (a run let go of mid-body stops the upstream)."""
        if self._slots is not None:
            self._slots.release()
        if conn.complete and conn.keep_alive and conn.sent and not conn.closed and not conn.chunks and not self._closed:
            conn.reading = False
            conn.idle_since = conn.loop.time()
            conn.pool = pool = self._idle.setdefault(conn.key, [])
            pool.append(conn)
            conn.expiry = conn.loop.call_later(self._keepalive, conn.expire)
        else:
            conn.discard()

    async def aclose(self) -> None:
        self._closed = True
        for idle in list(self._idle.values()):
            for conn in list(idle):
                conn.unpool()
                conn.discard()
        self._idle.clear()
        if self._fallback is not None:
            await self._fallback.aclose()


def origin(url: httpx2.URL) -> Origin:
    """Where a URL's connections go: (scheme, host, port); UnsupportedProtocol past http(s)."""
    scheme = url.raw_scheme
    if scheme not in (b"http", b"https"):
        raise httpx2.UnsupportedProtocol(f"request URL has an unsupported protocol {url.scheme!r}")
    return scheme, url.host, url.port or (443 if scheme == b"https" else 80)


def head(request: httpx2.Request) -> bytes:
    """The request line and headers, less the body framing (added when the body is known)."""
    url = request.url
    lines = [b"%s %s HTTP/1.1\r\n" % (request.method.encode(), url.raw_path)]
    for name, value in request.headers.raw:
        lowered = name.lower()
        if lowered in (b"content-length", b"transfer-encoding"):
            continue
        lines.append(b"%s: %s\r\n" % (name, value))
    return b"".join(lines)


def upstream_http_client(
    *, connect_timeout: float, read_timeout: float, retries: int = 0, follow_redirects: bool = False
) -> httpx2.AsyncClient:
    """An `httpx2.AsyncClient` on `H1Transport`: what the gateway hands the SDKs
    (`http_client=`) and the Gemini adapter. `read_timeout` bounds silence before the headers
    and between reads; `connect_timeout` one connection attempt."""
    # Point 4: httpx2 reads the proxy environment only for a client on its own transport
    # (`allow_env_proxies = trust_env and transport is None`), so it is mounted here as httpx2
    # would: a proxied pattern on httpx2's proxy transport, a NO_PROXY one (None) on this one.
    mounts: dict[str, httpx2.AsyncBaseTransport | None] = {
        pattern: None if proxy is None else httpx2.AsyncHTTPTransport(proxy=proxy, retries=retries)
        for pattern, proxy in get_environment_proxies().items()
    }
    return httpx2.AsyncClient(
        transport=H1Transport(retries=retries),
        mounts=mounts,
        timeout=httpx2.Timeout(read_timeout, connect=connect_timeout),
        follow_redirects=follow_redirects,
    )
