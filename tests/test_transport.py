"""The upstream transport (app/providers/transport.py, `H1Transport`), through the gateway's default
clients: errors mapped by what happened (refused 502, silence 504 / final timeout, a hang-up
mid-body a disconnect), connections reused, and a client that leaves closes the upstream.

The upstream here is a raw HTTP/1.1 server on loopback (asyncio streams), so each test decides
exactly what the wire does: headers then silence, a chunked body cut mid-way, keep-alive.
"""

from __future__ import annotations

import asyncio
import contextlib
import socket
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from typing import Any

import httpx
import httpx2
import pytest

from app.main import create_app
from app.providers.transport import H1Transport, upstream_http_client
from app.settings import CompatibleProvider, Settings
from tests.support import parse_sse, serve

HELLO = [{"role": "user", "content": "hi"}]
_HEAD = b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ntransfer-encoding: chunked\r\n\r\n"


def _chunk(data: bytes) -> bytes:
    return b"%x\r\n%s\r\n" % (len(data), data)


def _sse(delta: dict[str, Any] | None = None, finish: str | None = None) -> bytes:
    import orjson

    choice = {"index": 0, "delta": delta or {}, "finish_reason": finish}
    return b"data: " + orjson.dumps({"id": "c1", "model": "m", "choices": [choice]}) + b"\n\n"


BODY = [_sse({"role": "assistant", "content": "Hel"}), _sse({"content": "lo"}), _sse(finish="stop"), b"data: [DONE]\n\n"]

Handler = Callable[[asyncio.StreamReader, asyncio.StreamWriter], Awaitable[None]]


class RawUpstream:
    """A loopback HTTP/1.1 server: `reply(reader, writer)` answers each request; connections and
    requests are counted, and `gone` is set when a client closes a connection mid-reply."""

    def __init__(self, reply: Handler) -> None:
        self.reply = reply
        self.connections = 0
        self.requests = 0
        self.ended = 0  # connections the client closed between requests
        self.received: list[bytes] = []  # each request as it arrived: head and body
        self.gone = asyncio.Event()

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.connections += 1
        try:
            while True:
                head = await reader.readuntil(b"\r\n\r\n")
                length = next((int(line.split(b":", 1)[1]) for line in head.split(b"\r\n")
                               if line.lower().startswith(b"content-length:")), 0)
                self.received.append(head + await reader.readexactly(length))
                self.requests += 1
                await self.reply(reader, writer)
        except asyncio.IncompleteReadError:
            self.ended += 1
        except ConnectionError:
            pass
        finally:
            writer.close()

    @contextlib.asynccontextmanager
    async def running(self, path: str = "/v1") -> AsyncIterator[str]:
        server = await asyncio.start_server(self._serve, "127.0.0.1", 0)
        port = server.sockets[0].getsockname()[1]
        try:
            yield f"http://127.0.0.1:{port}{path}"
        finally:
            server.close()
            with contextlib.suppress(Exception):
                await asyncio.wait_for(server.wait_closed(), 1.0)


def writes(raw: bytes) -> Handler:
    """A reply that writes `raw`, byte for byte, to each request."""
    async def reply(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        writer.write(raw)
        await writer.drain()
    return reply


whole_body = writes(_HEAD + b"".join(_chunk(part) for part in BODY) + b"0\r\n\r\n")


def settings(base_url: str, **kw: Any) -> Settings:
    return Settings(openai_api_key=None, upstream_max_retries=0,
                    providers=[CompatibleProvider(name="up", base_url=base_url)], **kw)


async def stream(upstream: RawUpstream, *, read_timeout: float = 10.0) -> list[tuple[int, str, dict[str, Any]]]:
    async with upstream.running() as base, serve(create_app(settings(base, read_timeout=read_timeout))) as url:
        async with httpx.AsyncClient(base_url=url, timeout=10) as client:
            response = await client.post("/v1/stream", json={"model": "up/m", "messages": HELLO})
    assert response.status_code == 200
    return parse_sse(response.content)


def test_the_default_clients_are_on_the_gateways_transport() -> None:
    # What the e2e tests of every provider exercise: create_app(settings) with no injected client.
    from app.providers.registry import build_registry

    config = settings("http://127.0.0.1:1/v1", gemini_api_key="k", anthropic_api_key="k").provider_config()
    registry = build_registry(config)
    for name in ("up", "anthropic", "gemini"):
        adapter: Any = registry.get(name)
        client = adapter._client if name == "gemini" else adapter._client._client
        assert isinstance(client._transport, H1Transport), name


async def test_a_stream_is_read_as_it_arrives_and_its_connection_reused() -> None:
    upstream = RawUpstream(whole_body)
    async with upstream.running() as base, serve(create_app(settings(base))) as url:
        async with httpx.AsyncClient(base_url=url, timeout=10) as client:
            for _ in range(3):
                response = await client.post("/v1/stream", json={"model": "up/m", "messages": HELLO})
                events = parse_sse(response.content)
                assert [e for _, e, _ in events] == ["start", "token", "token", "final"]
                assert events[-1][2]["status"] == "ok" and events[-1][2]["message"]["content"] == "Hello"
    assert upstream.requests == 3 and upstream.connections == 1  # keep-alive: one connection


async def test_a_refused_connection_is_unavailable_not_a_timeout() -> None:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]  # closed again: nobody listens there
    async with upstream_http_client(connect_timeout=5, read_timeout=5) as client:
        with pytest.raises(httpx2.ConnectError):
            await client.post(f"http://127.0.0.1:{port}/v1/chat/completions", content=b"{}")


@contextlib.contextmanager
def unanswered_port() -> Iterator[int]:
    """A loopback port whose accept queue is full: connection attempts hang (SYNs are dropped)."""
    with socket.socket() as server:
        server.bind(("127.0.0.1", 0))
        server.listen(0)
        port = server.getsockname()[1]
        fillers = []
        try:
            for _ in range(3):
                filler = socket.socket()
                filler.setblocking(False)
                with contextlib.suppress(BlockingIOError):
                    filler.connect(("127.0.0.1", port))
                fillers.append(filler)
            yield port
        finally:
            for filler in fillers:
                filler.close()


async def test_a_connection_that_never_completes_is_a_504() -> None:
    with unanswered_port() as port:
        app = create_app(settings(f"http://127.0.0.1:{port}/v1", connect_timeout=0.3))
        async with serve(app) as url, httpx.AsyncClient(base_url=url, timeout=10) as client:
            response = await client.post("/v1/stream", json={"model": "up/m", "messages": HELLO})
    assert response.status_code == 504 and response.json()["error"]["code"] == "upstream_timeout"


async def test_silence_before_the_headers_is_a_504() -> None:
    async def silent(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await reader.read()  # until the gateway gives up and closes

    upstream = RawUpstream(silent)
    async with upstream.running() as base, serve(create_app(settings(base, read_timeout=0.2))) as url:
        async with httpx.AsyncClient(base_url=url, timeout=10) as client:
            response = await client.post("/v1/stream", json={"model": "up/m", "messages": HELLO})
    assert response.status_code == 504 and response.json()["error"]["code"] == "upstream_timeout"


async def test_silence_mid_stream_ends_in_final_timeout_with_the_text_so_far() -> None:
    async def stalls(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        writer.write(_HEAD + _chunk(BODY[0]))
        await writer.drain()
        await reader.read()

    events = await stream(RawUpstream(stalls), read_timeout=1.0)  # generous: the headers must beat it
    final = events[-1][2]
    # The route's idle deadline (issue 16) defaults to the provider's read timeout: whichever of the
    # two fires first ends the stream, both as an honest, retryable timeout.
    assert final["status"] == "error" and final["error"]["code"] in {"timeout", "upstream_timeout"}, final["error"]
    assert final["error"]["retryable"] is True and final["message"]["content"] == "Hel"


async def test_a_hang_up_mid_body_is_a_disconnect_not_a_timeout() -> None:
    async def hangs_up(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        writer.write(_HEAD + _chunk(BODY[0]))  # no terminating chunk
        await writer.drain()
        writer.close()
        raise ConnectionError

    events = await stream(RawUpstream(hangs_up))
    final = events[-1][2]
    assert final["status"] == "error" and final["error"]["code"] == "upstream_disconnected"
    assert final["error"]["retryable"] is True and final["message"]["content"] == "Hel"


async def test_an_http_error_before_the_body_keeps_the_sdk_mapping() -> None:
    body = b'{"error": {"message": "slow down", "type": "rate_limit"}}'
    upstream = RawUpstream(writes(b"HTTP/1.1 429 Too Many Requests\r\ncontent-type: application/json\r\n"
                                  b"retry-after: 3\r\ncontent-length: %d\r\n\r\n%s" % (len(body), body)))
    async with upstream.running() as base, serve(create_app(settings(base))) as url:
        async with httpx.AsyncClient(base_url=url, timeout=10) as client:
            response = await client.post("/v1/stream", json={"model": "up/m", "messages": HELLO})
    assert response.status_code == 429 and response.headers["retry-after"] == "3"
    assert response.json()["error"]["code"] == "rate_limited"


async def test_a_client_that_leaves_closes_the_upstream_within_a_second() -> None:
    upstream: RawUpstream

    async def holds(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        writer.write(_HEAD + _chunk(BODY[0]))
        await writer.drain()
        if not await reader.read(1):  # EOF: the gateway closed the connection
            upstream.gone.set()
        raise ConnectionError

    upstream = RawUpstream(holds)
    async with upstream.running() as base, serve(create_app(settings(base))) as url:
        async with httpx.AsyncClient(base_url=url, timeout=10) as client:
            async with client.stream("POST", "/v1/stream", json={"model": "up/m", "messages": HELLO}) as response:
                async for line in response.aiter_lines():
                    if line.startswith("event: token"):
                        break
                assert not upstream.gone.is_set()
        await asyncio.wait_for(upstream.gone.wait(), timeout=1.0)  # DESIGN.md section 6


async def test_an_encoded_body_goes_through_httpx2_decoding() -> None:
    import gzip

    gzipped = writes(b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ncontent-encoding: gzip\r\n"
                     b"transfer-encoding: chunked\r\n\r\n" + _chunk(gzip.compress(b"".join(BODY))) + b"0\r\n\r\n")
    events = await stream(RawUpstream(gzipped))
    assert events[-1][2]["status"] == "ok" and events[-1][2]["message"]["content"] == "Hello"


# -- the transport itself (app/providers/transport.py), on an httpx2 client as the adapters use it --

async def _read(client: httpx2.AsyncClient, url: str, **kw: Any) -> tuple[int, bytes]:
    async with client.stream("POST", url, content=kw.pop("content", b"{}"), **kw) as response:
        return response.status_code, b"".join([part async for part in response.aiter_raw()])


def _answer(body: bytes, *, extra: bytes = b"") -> Handler:
    return writes(b"HTTP/1.1 200 OK\r\ncontent-length: %d\r\n%s\r\n%s" % (len(body), extra, body))


async def test_a_connection_the_server_closed_while_idle_is_not_reused() -> None:
    async def answers_then_hangs_up(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await _answer(b"ok")(reader, writer)
        writer.close()  # keep-alive was implied (HTTP/1.1), but the server lets the connection go
        raise ConnectionError

    upstream = RawUpstream(answers_then_hangs_up)
    transport = H1Transport()
    async with upstream.running() as base, httpx2.AsyncClient(transport=transport) as client:
        for _ in range(3):
            assert await _read(client, f"{base}/x") == (200, b"ok")
            await asyncio.sleep(0.05)  # the server's FIN arrives while the connection is idle
            assert all(not idle for idle in transport._idle.values())  # and it left the pool at once
    assert upstream.requests == 3 and upstream.connections == 3


async def test_connection_close_and_an_expired_keep_alive_each_take_a_new_connection() -> None:
    closing = RawUpstream(_answer(b"bye", extra=b"connection: close\r\n"))
    async with closing.running() as base, upstream_http_client(connect_timeout=5, read_timeout=5) as client:
        for _ in range(2):
            assert await _read(client, f"{base}/x") == (200, b"bye")
    assert closing.connections == 2

    kept = RawUpstream(_answer(b"hi"))
    transport = H1Transport(limits=httpx2.Limits(max_connections=10, keepalive_expiry=0.05))
    async with kept.running() as base, httpx2.AsyncClient(transport=transport) as client:
        assert await _read(client, f"{base}/x") == (200, b"hi")
        assert await _read(client, f"{base}/x") == (200, b"hi")  # at once: reused
        await asyncio.sleep(0.2)  # past the keep-alive expiry: closed while idle, without more traffic
        assert kept.ended == 1 and transport._idle[(b"http", "127.0.0.1", int(base.split(":")[2].split("/")[0]))] == []
        assert await _read(client, f"{base}/x") == (200, b"hi")  # on a new connection
    assert kept.requests == 3 and kept.connections == 2


async def test_a_body_delimited_by_the_connections_end_is_whole_and_not_reused() -> None:
    async def until_close(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        writer.write(b"HTTP/1.1 200 OK\r\ncontent-type: text/plain\r\n\r\npart one, ")
        await writer.drain()
        await asyncio.sleep(0.02)
        writer.write(b"part two")
        writer.close()
        raise ConnectionError

    upstream = RawUpstream(until_close)
    async with upstream.running() as base, upstream_http_client(connect_timeout=5, read_timeout=5) as client:
        assert await _read(client, f"{base}/x") == (200, b"part one, part two")
        assert await _read(client, f"{base}/x") == (200, b"part one, part two")
    assert upstream.connections == 2


async def test_informational_answers_are_skipped_and_headers_kept_in_order() -> None:
    upstream = RawUpstream(writes(b"HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 201 Created\r\nx-a: 1\r\nx-a: 2\r\n"
                                  b"content-length: 4\r\n\r\ndone"))
    async with upstream.running() as base, upstream_http_client(connect_timeout=5, read_timeout=5) as client:
        async with client.stream("POST", f"{base}/x", content=b"{}") as response:
            assert response.status_code == 201 and response.reason_phrase == "Created"
            assert response.headers.get_list("x-a") == ["1", "2"]
            assert await response.aread() == b"done"


async def test_a_malformed_answer_is_a_protocol_error_and_the_connection_is_dropped() -> None:
    upstream = RawUpstream(writes(b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\nzz\r\n"))
    async with upstream.running() as base, upstream_http_client(connect_timeout=5, read_timeout=5) as client:
        for _ in range(2):
            with pytest.raises(httpx2.RemoteProtocolError):
                await _read(client, f"{base}/x")
    assert upstream.connections == 2


async def test_a_server_that_hangs_up_before_answering_is_a_protocol_error() -> None:
    async def hangs_up(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        writer.close()
        raise ConnectionError

    upstream = RawUpstream(hangs_up)
    async with upstream.running() as base, upstream_http_client(connect_timeout=5, read_timeout=5) as client:
        with pytest.raises(httpx2.RemoteProtocolError, match="without sending a response"):
            await _read(client, f"{base}/x")


async def test_a_streamed_upload_is_sent_chunked_and_a_large_body_read_whole(monkeypatch) -> None:
    from app.providers import transport

    monkeypatch.setattr(transport, "_HIGH_WATER", 4096)  # a slow reader pauses reading from the upstream
    received: list[bytes] = []
    big = bytes(range(256)) * 20_000  # 5 MB

    async def echo_size(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        writer.write(b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n")
        for start in range(0, len(big), 65536):
            writer.write(_chunk(big[start:start + 65536]))
            await writer.drain()
        writer.write(b"0\r\n\r\n")
        await writer.drain()

    class Chunked(RawUpstream):
        async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            self.connections += 1
            head = await reader.readuntil(b"\r\n\r\n")
            assert b"transfer-encoding: chunked" in head.lower()
            while True:
                size = int((await reader.readuntil(b"\r\n")).strip(), 16)
                data = await reader.readexactly(size + 2)
                if not size:
                    break
                received.append(data[:-2])
            self.requests += 1
            await self.reply(reader, writer)
            writer.close()

    async def upload() -> AsyncIterator[bytes]:
        for part in (b"one ", b"two ", b"three"):
            yield part

    async def read_slowly(client: httpx2.AsyncClient, url: str) -> bytes:
        async with client.stream("POST", url, content=upload()) as response:
            slow = b""
            async for part in response.aiter_raw():
                slow += part
                await asyncio.sleep(0.001)  # a reader slower than the socket
        return slow

    upstream = Chunked(echo_size)
    async with upstream.running() as base, upstream_http_client(connect_timeout=5, read_timeout=5) as client:
        slow = await asyncio.wait_for(read_slowly(client, f"{base}/x"), 30)  # a reading never resumed times out
    assert b"".join(received) == b"one two three" and slow == big


async def test_the_pool_limit_waits_then_times_out() -> None:
    async def holds(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        writer.write(_HEAD + _chunk(b"x"))
        await writer.drain()
        await reader.read()

    transport = H1Transport(limits=httpx2.Limits(max_connections=1))
    upstream = RawUpstream(holds)
    async with upstream.running() as base, httpx2.AsyncClient(transport=transport, timeout=httpx2.Timeout(5, pool=0.2)) as client:
        async with client.stream("POST", f"{base}/x", content=b"{}") as held:
            assert held.status_code == 200
            with pytest.raises(httpx2.PoolTimeout):
                await _read(client, f"{base}/x")
        # the held response closed: its slot is free again
        async with client.stream("POST", f"{base}/x", content=b"{}") as again:
            assert again.status_code == 200
    assert upstream.connections == 2  # the first, closed mid-body, was not reused


async def test_tls_upstreams_verify_the_certificate() -> None:
    import ssl

    trustme = pytest.importorskip("trustme")
    ca = trustme.CA()
    server_ctx = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    ca.issue_cert("127.0.0.1").configure_cert(server_ctx)
    client_ctx = ssl.create_default_context()
    ca.configure_trust(client_ctx)

    async def serve_tls(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await RawUpstream(_answer(b"secret"))._serve(reader, writer)

    server = await asyncio.start_server(serve_tls, "127.0.0.1", 0, ssl=server_ctx)
    port = server.sockets[0].getsockname()[1]
    try:
        async with httpx2.AsyncClient(transport=H1Transport(verify=client_ctx)) as client:
            assert await _read(client, f"https://127.0.0.1:{port}/x") == (200, b"secret")
        async with httpx2.AsyncClient(transport=H1Transport()) as client:  # the system's CAs: not trusted
            with pytest.raises(httpx2.ConnectError):
                await _read(client, f"https://127.0.0.1:{port}/x")
    finally:
        server.close()
