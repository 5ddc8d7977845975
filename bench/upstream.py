"""A fake OpenAI-compatible upstream for benchmarks (run by uvicorn in its own process).

POST /v1/chat/completions answers a streamed chat completion. The requested model names the
shape: `chunks-<N>` sends N text-delta chunks (then finish, usage, [DONE]) as fast as it can,
each as its own body write; `hold-<N>` sends N chunks and then holds the connection open until
the client goes away (for memory per open stream).
"""

from __future__ import annotations

import asyncio

import orjson

_HEAD = {"id": "chatcmpl-bench", "object": "chat.completion.chunk", "created": 1, "model": "bench"}


def _chunk(delta: dict, finish: str | None = None, usage: dict | None = None, choices: bool = True) -> bytes:
    body = dict(_HEAD, choices=[{"index": 0, "delta": delta, "finish_reason": finish}] if choices else [],
                usage=usage)
    return b"data: " + orjson.dumps(body) + b"\n\n"


def body_chunks(n: int, *, finish: bool = True) -> list[bytes]:
    out = [_chunk({"role": "assistant", "content": ""})]
    # A sentence ends every tenth token, so the sentence chunker (--gate) cuts real chunks.
    out += [_chunk({"content": f" tok{i}" + ("." if i % 10 == 9 else "")}) for i in range(n)]
    if finish:
        out.append(_chunk({}, finish="stop"))
        out.append(_chunk({}, usage={"prompt_tokens": 5, "completion_tokens": n, "total_tokens": n + 5},
                          choices=False))
        out.append(b"data: [DONE]\n\n")
    return out


_CACHE: dict[tuple[int, bool], list[bytes]] = {}


async def app(scope, receive, send):
    if scope["type"] == "lifespan":
        while True:
            message = await receive()
            if message["type"] == "lifespan.startup":
                await send({"type": "lifespan.startup.complete"})
            elif message["type"] == "lifespan.shutdown":
                await send({"type": "lifespan.shutdown.complete"})
                return
    if scope["path"].endswith("/healthz"):
        await send({"type": "http.response.start", "status": 200, "headers": []})
        await send({"type": "http.response.body", "body": b"ok"})
        return
    body = b""
    while True:
        message = await receive()
        body += message.get("body", b"")
        if not message.get("more_body"):
            break
    model = orjson.loads(body).get("model", "chunks-10")
    kind, _, count = model.partition("-")
    n = int(count or 10)
    hold = kind == "hold"
    key = (n, not hold)
    chunks = _CACHE.get(key) or _CACHE.setdefault(key, body_chunks(n, finish=not hold))
    await send({"type": "http.response.start", "status": 200,
                "headers": [(b"content-type", b"text/event-stream")]})
    for chunk in chunks:
        await send({"type": "http.response.body", "body": chunk, "more_body": True})
    if hold:
        while (await receive())["type"] != "http.disconnect":
            pass
        return
    await send({"type": "http.response.body", "body": b"", "more_body": False})
    await asyncio.sleep(0)
