"""The baseline: a bare parse-and-re-emit ASGI relay of the same upstream stream.

It does the least any gateway must do per chunk: read the upstream SSE body through the same
HTTP client (httpx2), split events, parse each JSON chunk with orjson, and re-emit the text as
an SSE frame. No validation, no accumulation, no events model, no logging or metrics.
"""

from __future__ import annotations

import os

import httpx2
import orjson

UPSTREAM = os.environ.get("RELAY_UPSTREAM", "http://127.0.0.1:9101/v1")
_client: httpx2.AsyncClient | None = None


async def app(scope, receive, send):
    global _client
    if scope["type"] == "lifespan":
        while True:
            message = await receive()
            if message["type"] == "lifespan.startup":
                _client = httpx2.AsyncClient(timeout=60, limits=httpx2.Limits(max_connections=1000))
                await send({"type": "lifespan.startup.complete"})
            elif message["type"] == "lifespan.shutdown":
                await _client.aclose()
                await send({"type": "lifespan.shutdown.complete"})
                return
    if scope["path"] == "/healthz":
        await send({"type": "http.response.start", "status": 200, "headers": []})
        await send({"type": "http.response.body", "body": b"ok"})
        return
    body = b""
    while True:
        message = await receive()
        body += message.get("body", b"")
        if not message.get("more_body"):
            break
    request = orjson.loads(body)
    payload = {"model": request["model"].partition("/")[2], "messages": request["messages"], "stream": True}
    await send({"type": "http.response.start", "status": 200,
                "headers": [(b"content-type", b"text/event-stream"), (b"cache-control", b"no-store")]})
    buf = b""
    seq = 0
    async with _client.stream("POST", f"{UPSTREAM}/chat/completions", json=payload) as response:
        async for data in response.aiter_bytes():
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
                await send({"type": "http.response.body", "body": b"".join(out), "more_body": True})
    await send({"type": "http.response.body", "body": b"id: %d\nevent: final\ndata: {}\n\n" % (seq + 1),
                "more_body": False})
