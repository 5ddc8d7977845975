"""A cheap HTTP/1.1 load client for the benchmarks: asyncio protocols and httptools' parser.

The load generator shares two cores with the process it measures, so it must cost little per
event: a protocol's `data_received` feeds httptools (the C parser uvicorn serves with) and hands
each body piece, with its arrival time, to a sink. No client library's per-read machinery.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Iterable

import httptools
import orjson

Sink = Callable[[bytes, int], None]  # (body bytes, arrival time in time.monotonic_ns())


def _ignore(data: bytes, now: int) -> None:
    pass


class Connection(asyncio.Protocol):
    """One keep-alive connection; `exchange` runs one request on it and waits for its whole answer."""

    def __init__(self, host: str) -> None:
        self.host = host.encode()
        self.parser = httptools.HttpResponseParser(self)
        self.transport: asyncio.Transport | None = None
        self.sink: Sink = _ignore
        self.done: asyncio.Future[int] | None = None
        self.status = 0

    @classmethod
    async def open(cls, host: str, port: int) -> Connection:
        _, conn = await asyncio.get_running_loop().create_connection(lambda: cls(f"{host}:{port}"), host, port)
        return conn

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]  # uvloop's transports are not asyncio's classes

    def data_received(self, data: bytes) -> None:
        try:
            self.parser.feed_data(data)
        except httptools.HttpParserError as exc:
            self._fail(exc)

    def connection_lost(self, exc: Exception | None) -> None:
        self._fail(exc or ConnectionError("connection closed before the answer ended"))

    def _fail(self, exc: BaseException) -> None:
        if self.done is not None and not self.done.done():
            self.done.set_exception(exc)

    # httptools callbacks
    def on_headers_complete(self) -> None:
        self.status = self.parser.get_status_code()

    def on_body(self, body: bytes) -> None:
        self.sink(body, time.monotonic_ns())

    def on_message_complete(self) -> None:
        if self.done is not None and not self.done.done():
            self.done.set_result(self.status)

    async def exchange(self, path: str, body: bytes, sink: Sink = _ignore,
                       headers: Iterable[tuple[str, str]] = ()) -> int:
        """POST `body` (JSON) to `path`; every body piece goes to `sink`; returns the status."""
        assert self.transport is not None
        self.sink = sink
        self.done = asyncio.get_running_loop().create_future()
        extra = b"".join(b"%s: %s\r\n" % (k.encode(), v.encode()) for k, v in headers)
        self.transport.write(b"POST %s HTTP/1.1\r\nhost: %s\r\ncontent-type: application/json\r\n"
                             b"content-length: %d\r\n%s\r\n%s" % (path.encode(), self.host, len(body), extra, body))
        return await self.done

    def close(self) -> None:
        if self.transport is not None:
            self.transport.close()


def split_url(url: str) -> tuple[str, int, str]:
    """`http://host:port/path` -> (host, port, path)."""
    rest = url.removeprefix("http://")
    authority, _, path = rest.partition("/")
    host, _, port = authority.partition(":")
    return host, int(port or 80), "/" + path


async def run_streams(url: str, payload: dict, streams: int, concurrency: int,
                      headers: dict[str, str] | None = None) -> tuple[int, float]:
    """Open `streams` SSE streams, `concurrency` at a time (one kept-alive connection each);
    return (events seen, wall seconds)."""
    host, port, path = split_url(url)
    body = orjson.dumps(payload)
    pending = list(range(streams))
    events = 0

    async def worker() -> None:
        tail = b""

        def count(data: bytes, now: int) -> None:
            nonlocal events, tail
            seen = tail + data
            events += seen.count(b"\n\n")
            tail = seen[-1:]  # a frame end split across two pieces is counted once

        conn = await Connection.open(host, port)
        try:
            while pending:
                pending.pop()
                tail = b""
                status = await conn.exchange(path, body, count, (headers or {}).items())
                if status != 200:
                    raise RuntimeError(f"{url} answered {status}")
        finally:
            conn.close()

    start = time.perf_counter()
    await asyncio.gather(*(worker() for _ in range(min(concurrency, streams))))
    return events, time.perf_counter() - start
