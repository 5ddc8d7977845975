"""The gateway's own upstream client (app/providers/upstream.py: one aiohttp session per upstream),
through the gateway: errors mapped by what happened (refused 502, silence 504 / final timeout, a
hang-up mid-body a disconnect), connections reused, a client that leaves closes the upstream, and
redirects never followed.

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
import pytest

from app.main import create_app
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


async def stream(upstream: RawUpstream, *, read_timeout: float = 10.0,
                 **extra: Any) -> list[tuple[int, str, dict[str, Any]]]:
    async with upstream.running() as base, serve(create_app(settings(base, read_timeout=read_timeout))) as url:
        async with httpx.AsyncClient(base_url=url, timeout=10) as client:
            response = await client.post("/v1/stream", json={"model": "up/m", "messages": HELLO, **extra})
    assert response.status_code == 200
    return parse_sse(response.content)


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


# -- every provider's client the gateway builds, through the gateway --------------------------

_KEY = "transport-test-key-0000000000"


def provider_settings(provider: str, base: str, **kw: Any) -> tuple[Settings, str]:
    """Settings serving only `provider` at `base` (a loopback origin), and a model of it."""
    if provider == "openai":
        return settings(f"{base}/v1", **kw), "up/m"
    if provider == "anthropic":
        return Settings(openai_api_key=None, upstream_max_retries=0, anthropic_api_key=_KEY, anthropic_base_url=base,
                        **kw), "anthropic/claude-x"
    return Settings(openai_api_key=None, upstream_max_retries=0, gemini_api_key=_KEY, gemini_base_url=base,
                    **kw), "gemini/gemini-x"


PROVIDERS = ["openai", "anthropic", "gemini"]


async def post_stream(app_settings: Settings, model: str) -> httpx.Response:
    async with serve(create_app(app_settings)) as url, httpx.AsyncClient(base_url=url, timeout=10) as client:
        return await client.post("/v1/stream", json={"model": model, "messages": HELLO})


@pytest.mark.parametrize("provider", PROVIDERS)
async def test_a_refused_connection_is_unavailable_not_a_timeout(provider: str) -> None:
    # aiohttp's refused connection (ClientConnectorError) is a connection failure, not a timeout:
    # mapped by its cause in app/providers/errors.py.
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]  # closed again: nobody listens there
    response = await post_stream(*provider_settings(provider, f"http://127.0.0.1:{port}"))
    assert response.status_code == 502, response.text
    assert response.json()["error"]["code"] == "upstream_unavailable"


@pytest.mark.parametrize("provider", PROVIDERS)
async def test_an_upstream_that_hangs_up_before_answering_is_unavailable_not_a_timeout(provider: str) -> None:
    async def hangs_up(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        writer.close()
        raise ConnectionError

    async with RawUpstream(hangs_up).running("") as base:
        response = await post_stream(*provider_settings(provider, base))
    assert response.status_code == 502, response.text
    assert response.json()["error"]["code"] == "upstream_unavailable"


@pytest.mark.parametrize("provider", PROVIDERS)
async def test_a_redirect_is_not_followed_and_the_other_origin_receives_nothing(provider: str) -> None:
    # DESIGN.md section 4: the request carries the gateway's credential (Authorization,
    # x-api-key, x-goog-api-key); a redirect to another origin would hand it over.
    elsewhere = RawUpstream(whole_body)
    async with elsewhere.running("") as other:
        upstream = RawUpstream(writes(b"HTTP/1.1 307 Temporary Redirect\r\nlocation: %s/steal\r\n"
                                      b"content-length: 0\r\n\r\n" % other.encode()))
        async with upstream.running("") as base:
            response = await post_stream(*provider_settings(provider, base))
    assert upstream.requests == 1 and elsewhere.requests == 0 and elsewhere.connections == 0
    assert response.status_code == 502, response.text
    error = response.json()["error"]
    assert error["code"] == "upstream_redirect" and "307" in error["message"]


@pytest.mark.parametrize("provider", PROVIDERS)
async def test_connections_are_reused_across_requests(provider: str) -> None:
    upstream = RawUpstream(writes(b"HTTP/1.1 429 Too Many Requests\r\ncontent-type: application/json\r\n"
                                  b"content-length: 2\r\n\r\n{}"))
    async with upstream.running("") as base:
        app_settings, model = provider_settings(provider, base)
        async with serve(create_app(app_settings)) as url, httpx.AsyncClient(base_url=url, timeout=10) as client:
            for _ in range(3):
                response = await client.post("/v1/stream", json={"model": model, "messages": HELLO})
                assert response.status_code == 429, response.text
    assert upstream.requests == 3 and upstream.connections == 1


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


# The route's idle deadline defaults to the provider's read timeout, and either ends a silent
# stream: each case makes one of them the shorter, so that the code says which fired.
@pytest.mark.parametrize(("read_timeout", "idle", "code"), [(1.0, 30.0, "upstream_timeout"), (10.0, 1.0, "timeout")])
async def test_silence_mid_stream_ends_in_final_timeout_with_the_text_so_far(read_timeout: float, idle: float,
                                                                            code: str) -> None:
    async def stalls(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        writer.write(_HEAD + _chunk(BODY[0]))
        await writer.drain()
        await reader.read()

    # 1 s is generous: the headers must beat it.
    events = await stream(RawUpstream(stalls), read_timeout=read_timeout, timeouts={"idle": idle})
    final = events[-1][2]
    assert final["status"] == "error" and final["error"]["code"] == code, final["error"]
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


async def test_an_http_error_before_the_body_is_mapped_with_its_retry_after() -> None:
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


async def test_an_encoded_body_is_decoded_before_the_frame_decoder() -> None:
    import gzip

    gzipped = writes(b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ncontent-encoding: gzip\r\n"
                     b"transfer-encoding: chunked\r\n\r\n" + _chunk(gzip.compress(b"".join(BODY))) + b"0\r\n\r\n")
    events = await stream(RawUpstream(gzipped))
    assert events[-1][2]["status"] == "ok" and events[-1][2]["message"]["content"] == "Hello"


async def test_tls_upstreams_verify_the_certificate(monkeypatch: pytest.MonkeyPatch) -> None:
    # The gateway's client verifies against the trust store the environment names (SSL_CERT_FILE), and
    # refuse a certificate it does not hold.
    import ssl

    trustme = pytest.importorskip("trustme")
    ca = trustme.CA()
    server_ctx = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    ca.issue_cert("127.0.0.1").configure_cert(server_ctx)
    upstream = RawUpstream(whole_body)
    server = await asyncio.start_server(upstream._serve, "127.0.0.1", 0, ssl=server_ctx)
    base = f"https://127.0.0.1:{server.sockets[0].getsockname()[1]}"
    try:
        refused = await post_stream(*provider_settings("openai", base))
        assert refused.status_code == 502 and refused.json()["error"]["code"] == "upstream_unavailable"
        with ca.cert_pem.tempfile() as ca_file:
            monkeypatch.setenv("SSL_CERT_FILE", ca_file)
            trusted = await post_stream(*provider_settings("openai", base))
    finally:
        server.close()
    assert trusted.status_code == 200, trusted.text
    assert parse_sse(trusted.content)[-1][2]["message"]["content"] == "Hello"
