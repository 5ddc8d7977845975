"""The gateway's own upstream client (app/providers/upstream.py) at the edges of HTTP/1.1: bytes
past the answer asked for, trailers, a head without end, an answer before the request was read,
and the proxy environment. Loopback servers whose handlers write every byte (`RawUpstream`,
tests/test_transport.py)."""

from __future__ import annotations

import asyncio
from typing import Any

import aiohttp
import httpx
import pytest

from app.core.errors import GatewayError
from app.main import create_app
from app.providers.config import ProviderConfig
from app.providers.descriptor import UpstreamRequest
from app.providers.errors import CONNECTION_ERRORS, transport_error
from app.providers.upstream import client_session, send
from tests.support import serve
from tests.test_transport import HELLO, PROVIDERS, RawUpstream, provider_settings, writes


def upstream_http_client(*, connect_timeout: float, read_timeout: float) -> aiohttp.ClientSession:
    """The session the gateway makes for an upstream (its timeouts, pool, head bounds)."""
    return client_session(ProviderConfig(connect_timeout=connect_timeout, read_timeout=read_timeout))


async def _read(client: aiohttp.ClientSession, url: str, **kw: Any) -> tuple[int, bytes]:
    """One request on the gateway's send path, its body read whole."""
    response = await send(client, UpstreamRequest(url=url, body=kw.pop("content", b"{}")), "p")
    async with response:
        return response.status, await response.read()


_FIRST = b"HTTP/1.1 200 OK\r\ncontent-length: 5\r\n\r\nfirst"


async def test_bytes_after_a_complete_answer_are_not_its_body_and_retire_the_connection() -> None:
    second = b"HTTP/1.1 200 OK\r\ncontent-length: 6\r\n\r\nsecond"  # a second answer nobody asked for
    upstream = RawUpstream(writes(_FIRST + second))  # one write: the client parses both in one read
    async with upstream.running() as base, upstream_http_client(connect_timeout=5, read_timeout=5) as client:
        for _ in range(2):
            assert await _read(client, f"{base}/x") == (200, b"first")  # the answer asked for, whole
    assert upstream.connections == 2  # a connection out of step with its answers is not reused


async def test_garbage_after_a_complete_answer_is_an_upstream_failure_never_a_body() -> None:
    # aiohttp parses what arrived in one read together: bytes that are no answer fail the
    # exchange (a ClientError); the gateway maps it as a connection failure (502), and the
    # connection is not reused.
    upstream = RawUpstream(writes(_FIRST + b"\x00\x01garbage\r\n"))
    async with upstream.running() as base, upstream_http_client(connect_timeout=5, read_timeout=5) as client:
        for _ in range(2):
            try:
                assert await _read(client, f"{base}/x") == (200, b"first")
            except GatewayError as error:  # before the body: mapped by the send path
                assert error.status == 502 and error.code == "upstream_unavailable"
            except CONNECTION_ERRORS as exc:  # while reading the body
                mapped = transport_error(exc, "p")
                assert mapped.status == 502 and mapped.code == "upstream_unavailable"
    assert upstream.connections == 2


async def test_chunked_trailers_are_not_merged_into_the_headers() -> None:
    upstream = RawUpstream(writes(b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n3\r\nabc\r\n0\r\n"
                                  b"x-trailer: 1\r\n\r\n"))
    async with upstream.running() as base, upstream_http_client(connect_timeout=5, read_timeout=5) as client:
        for _ in range(2):
            response = await send(client, UpstreamRequest(url=f"{base}/x", body=b"{}"), "p")
            async with response:
                # RFC 9110 section 6.5.1: trailer fields are not header fields (and, read in the same
                # read as the headers or not, the response's headers are the same)
                assert "x-trailer" not in response.headers
                assert await response.read() == b"abc"
    assert upstream.connections == 1  # the trailer section ends the answer: the connection is reused


async def test_a_response_head_past_what_the_client_holds_is_an_upstream_error() -> None:
    # Headers are held in memory until they end: without a bound, an upstream (or a box in the
    # way) sending endless headers grows the gateway without a timeout ever firing. aiohttp
    # bounds each header line (8190 bytes); the gateway answers 502.
    async def endless_headers(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        writer.write(b"HTTP/1.1 200 OK\r\n")
        for n in range(128):  # 1 MiB of headers, in many reads
            writer.write(b"x-filler-%d: %s\r\n" % (n, b"a" * 8192))
            await writer.drain()
        writer.write(b"content-length: 2\r\n\r\nok")
        await writer.drain()

    for provider in PROVIDERS:
        async with RawUpstream(endless_headers).running("") as base:
            response = await _post(*provider_settings(provider, base))
        assert response.status_code == 502, (provider, response.text)
        assert response.json()["error"]["code"] == "upstream_unavailable"


async def test_an_answer_before_the_request_was_taken_is_the_answer_and_retires_the_connection() -> None:
    # A server may refuse a request it has not read (a 413 for a prompt too large, a 429) and
    # stop reading: its answer is the outcome, not a WriteTimeout; the rest of the request is
    # still in the socket, so the connection cannot carry another one.
    connections = 0
    release = asyncio.Event()

    async def refuses_unread(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        nonlocal connections
        connections += 1
        await reader.readuntil(b"\r\n\r\n")  # the head only
        writer.write(b"HTTP/1.1 413 Payload Too Large\r\ncontent-length: 8\r\n\r\ntoo big!")
        await writer.drain()
        await release.wait()
        writer.close()

    server = await asyncio.start_server(refuses_unread, "127.0.0.1", 0)
    url = f"http://127.0.0.1:{server.sockets[0].getsockname()[1]}/x"
    body = b"x" * (16 << 20)  # past what the sockets' buffers take: the write pauses
    try:
        async with upstream_http_client(connect_timeout=5, read_timeout=5) as client:
            for _ in range(2):
                assert await _read(client, url, content=body) == (413, b"too big!")
    finally:
        release.set()
        server.close()
    assert connections == 2


@pytest.mark.parametrize("provider", PROVIDERS)
async def test_the_proxy_environment_is_honoured(provider: str, monkeypatch: pytest.MonkeyPatch) -> None:
    # The gateway's client reads HTTP(S)_PROXY / NO_PROXY once per upstream host (`proxy_for`):
    # the request goes to the proxy in absolute form, the key with it (the proxy is the operator's).
    for name in ("HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY", "NO_PROXY"):
        monkeypatch.delenv(name, raising=False)
        monkeypatch.delenv(name.lower(), raising=False)
    request_lines: list[bytes] = []

    class Proxy(RawUpstream):
        async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            head = await reader.readuntil(b"\r\n\r\n")
            request_lines.append(head.split(b"\r\n", 1)[0])
            length = next(int(line.split(b":", 1)[1]) for line in head.split(b"\r\n")
                          if line.lower().startswith(b"content-length:"))
            await reader.readexactly(length)
            await self.reply(reader, writer)
            writer.close()

    proxy = Proxy(writes(b"HTTP/1.1 429 Too Many Requests\r\ncontent-type: application/json\r\n"
                         b"retry-after: 7\r\ncontent-length: 2\r\n\r\n{}"))
    async with proxy.running("") as proxy_url:
        monkeypatch.setenv("HTTP_PROXY", proxy_url)
        monkeypatch.setenv("NO_PROXY", "127.0.0.1")  # the test's own client reaches the gateway directly
        app_settings, model = provider_settings(provider, "http://upstream.invalid")
        async with serve(create_app(app_settings)) as url:
            async with httpx.AsyncClient(base_url=url, timeout=10) as client:
                response = await client.post("/v1/stream", json={"model": model, "messages": HELLO})
    assert response.status_code == 429, response.text  # the proxy's answer: it was asked
    assert response.headers["retry-after"] == "7"
    assert len(request_lines) == 1 and request_lines[0].startswith(b"POST http://upstream.invalid/"), request_lines


async def test_no_proxy_is_honoured(monkeypatch: pytest.MonkeyPatch) -> None:
    # The same environment with the upstream's host in NO_PROXY: straight to the upstream.
    for name in ("HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY", "NO_PROXY"):
        monkeypatch.delenv(name, raising=False)
        monkeypatch.delenv(name.lower(), raising=False)
    upstream = RawUpstream(writes(b"HTTP/1.1 429 Too Many Requests\r\ncontent-length: 2\r\n\r\n{}"))
    async with upstream.running("") as base:
        monkeypatch.setenv("HTTP_PROXY", "http://127.0.0.2:9")  # nothing listens there
        monkeypatch.setenv("NO_PROXY", "127.0.0.1")
        response = await _post(*provider_settings("gemini", base))
    assert response.status_code == 429 and upstream.requests == 1


async def _post(app_settings: Any, model: str) -> httpx.Response:
    async with serve(create_app(app_settings)) as url, httpx.AsyncClient(base_url=url, timeout=10) as client:
        return await client.post("/v1/stream", json={"model": model, "messages": HELLO})
