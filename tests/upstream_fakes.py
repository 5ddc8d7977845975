"""Fakes and drivers shared by the Responses and Gemini provider tests.

- `Body`: a response body for `httpx2.MockTransport`, served in pieces, that remembers whether
  the client closed it; `drain()` runs an adapter's stream into canonical events.
- `FakeUpstream`: a scripted provider server for end-to-end tests, served on loopback with
  `support.serve`. Every POST to its path answers the next scripted reply: SSE bytes (sent in
  small uneven reads) or `(status, json_body, headers)`. Requests are recorded. With `hold`, the
  response stays open after its body until the client goes away; `closed` is set when the body
  generator ends, which is how a test sees the gateway let go. `gateway()` serves the app
  configured against it; `first_token_then_leave()` is a client that disconnects early.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field
from typing import Any

import httpx
import httpx2
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.routing import Route

from app.core.accumulator import Accumulator
from app.core.events import StreamEvent
from app.main import create_app
from app.providers.base import ProviderAdapter, ProviderRequest, drive
from app.settings import Settings
from tests.support import serve

__all__ = ["Body", "FakeUpstream", "Recorded", "drain", "first_token_then_leave", "gateway"]


class Body(httpx2.AsyncByteStream):
    """A response body served in pieces, remembering whether the client closed it."""

    def __init__(self, chunks: list[bytes], *, fail: Exception | None = None) -> None:
        self.chunks = chunks
        self.fail = fail
        self.closed = False

    async def __aiter__(self) -> AsyncIterator[bytes]:
        for chunk in self.chunks:
            yield chunk
        if self.fail is not None:
            raise self.fail

    async def aclose(self) -> None:
        self.closed = True


def event_stream(body: Body) -> httpx2.Response:
    return httpx2.Response(200, headers={"content-type": "text/event-stream"}, stream=body)


async def drain(adapter: ProviderAdapter, request: ProviderRequest) -> list[StreamEvent]:
    """Open the adapter's stream and run it to its final event, as the pipeline does (`drive`)."""
    stream = await adapter.open_stream(request)
    events: list[StreamEvent] = []
    await drive(stream, Accumulator(model=request.model, provider=adapter.name), events)
    return events


@dataclass(frozen=True)
class Recorded:
    url: str
    headers: dict[str, str]
    body: dict[str, Any]


@dataclass
class FakeUpstream:
    path: str
    replies: list[Any]
    requests: list[Recorded] = field(default_factory=list)
    hold: bool = False
    closed: asyncio.Event = field(default_factory=asyncio.Event)

    async def handle(self, request: Request) -> Response:
        url = request.url.path + (f"?{request.url.query}" if request.url.query else "")
        self.requests.append(Recorded(url, dict(request.headers), await request.json()))
        reply = self.replies.pop(0)
        if isinstance(reply, tuple):
            status, body, headers = reply
            return JSONResponse(body, status_code=status, headers=headers)
        return StreamingResponse(self._body(reply), media_type="text/event-stream")

    async def _body(self, body: bytes) -> AsyncIterator[bytes]:
        try:
            for i in range(0, len(body), 173):  # small, uneven network reads
                yield body[i:i + 173]
            if self.hold:
                await asyncio.Event().wait()
        finally:
            self.closed.set()

    def app(self) -> Starlette:
        return Starlette(routes=[Route(self.path, self.handle, methods=["POST"])])


@contextlib.asynccontextmanager
async def gateway(fake: FakeUpstream, settings: Callable[[str], Settings]) -> AsyncIterator[httpx.AsyncClient]:
    """The fake upstream and the gateway (configured by `settings(upstream_url)`) on loopback."""
    async with serve(fake.app()) as upstream:
        async with serve(create_app(settings(upstream))) as url, httpx.AsyncClient(base_url=url, timeout=10) as client:
            yield client


async def first_token_then_leave(client: httpx.AsyncClient, ask: dict[str, Any]) -> None:
    """Stream a request and go away right after the first token event."""
    async with client.stream("POST", "/v1/stream", json=ask) as response:
        async for line in response.aiter_lines():
            if line.startswith("event: token"):
                break
