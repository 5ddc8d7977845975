"""A scripted fake provider server for end-to-end tests, served on loopback with `support.serve`.

Every POST to the given path answers the next scripted reply: SSE bytes (sent in small uneven
reads), or `(status, json_body, headers)`. Requests are recorded (path and query, headers, JSON
body). With `hold`, the response stays open after its body until the client goes away; `closed`
is set when the server's body generator ends, which is how a test sees the gateway let go.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Any

from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.routing import Route

__all__ = ["FakeUpstream", "Recorded"]


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
