"""The floor: a Starlette parse-and-re-emit relay of the same upstream stream, on aiohttp.

It does the least any gateway built from well-kept libraries must do per chunk: read the
upstream SSE body through aiohttp's client, split events, parse each JSON chunk with orjson, and
re-emit the text as an SSE frame through Starlette's `StreamingResponse`. No validation, no
accumulation, no events model, no logging or metrics, no middleware.
"""

from __future__ import annotations

import os
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import aiohttp
import orjson
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import PlainTextResponse, StreamingResponse
from starlette.routing import Route

UPSTREAM = os.environ.get("RELAY_UPSTREAM", "http://127.0.0.1:9101/v1")


@asynccontextmanager
async def lifespan(app: Starlette) -> AsyncIterator[None]:
    # No pool cap: the paced bench holds hundreds of streams open at once, as the gateway does.
    async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=0),
                                     timeout=aiohttp.ClientTimeout(total=None, sock_read=60)) as session:
        app.state.session = session
        yield


async def relay(session: aiohttp.ClientSession, payload: bytes) -> AsyncIterator[bytes]:
    """The upstream's text deltas as `token` frames, then one `final` frame."""
    seq = 0
    buf = b""
    async with session.post(f"{UPSTREAM}/chat/completions", data=payload,
                            headers={"content-type": "application/json"}) as response:
        async for data in response.content.iter_any():
            buf += data
            *frames, buf = buf.split(b"\n\n")
            out = []
            for frame in frames:
                if not frame.startswith(b"data: ") or frame == b"data: [DONE]":
                    continue
                chunk = orjson.loads(frame[6:])
                for choice in chunk.get("choices") or ():
                    content = choice["delta"].get("content")
                    if content:
                        seq += 1
                        out.append(b"id: %d\nevent: token\ndata: %s\n\n" % (seq, orjson.dumps({"content": content})))
            if out:
                yield b"".join(out)
    yield b"id: %d\nevent: final\ndata: {}\n\n" % (seq + 1)


async def stream(request: Request) -> StreamingResponse:
    body = orjson.loads(await request.body())
    payload = orjson.dumps({"model": body["model"].partition("/")[2], "messages": body["messages"], "stream": True})
    return StreamingResponse(relay(request.app.state.session, payload), media_type="text/event-stream",
                             headers={"cache-control": "no-store"})


async def healthz(request: Request) -> PlainTextResponse:
    return PlainTextResponse("ok")


app = Starlette(routes=[Route("/v1/stream", stream, methods=["POST"]), Route("/healthz", healthz)], lifespan=lifespan)
