"""A fake OpenAI-compatible upstream for benchmarks (run by uvicorn in its own process).

POST /v1/chat/completions answers a streamed chat completion. The requested model names the
shape: `chunks-<N>` sends N text-delta chunks (then finish, usage, [DONE]) as fast as it can,
each as its own body write; `hold-<N>` sends N chunks and then holds the connection open until
the client goes away (for memory per open stream).
"""

from __future__ import annotations

import asyncio

import orjson


def chunk(delta: dict, finish: str | None = None, usage: dict | None = None, choices: bool = True, *,
          model: str = "bench") -> bytes:
    """One Chat Completions SSE chunk, as `data: {...}` and its blank line."""
    body = {"id": f"chatcmpl-{model}", "object": "chat.completion.chunk", "created": 1, "model": model,
            "choices": [{"index": 0, "delta": delta, "finish_reason": finish}] if choices else [], "usage": usage}
    return b"data: " + orjson.dumps(body) + b"\n\n"


async def lifespan(receive, send) -> None:
    """Answer the ASGI lifespan protocol until shutdown."""
    while True:
        message = await receive()
        if message["type"] == "lifespan.startup":
            await send({"type": "lifespan.startup.complete"})
        elif message["type"] == "lifespan.shutdown":
            await send({"type": "lifespan.shutdown.complete"})
            return


async def read_body(receive) -> bytes:
    """An HTTP request's whole body."""
    body = b""
    while True:
        message = await receive()
        body += message.get("body", b"")
        if not message.get("more_body"):
            return body


def body_chunks(n: int, *, finish: bool = True) -> list[bytes]:
    out = [chunk({"role": "assistant", "content": ""})]
    # A sentence ends every tenth token, so the sentence chunker (--gate) cuts real chunks.
    out += [chunk({"content": f" tok{i}" + ("." if i % 10 == 9 else "")}) for i in range(n)]
    if finish:
        out.append(chunk({}, finish="stop"))
        out.append(chunk({}, usage={"prompt_tokens": 5, "completion_tokens": n, "total_tokens": n + 5},
                          choices=False))
        out.append(b"data: [DONE]\n\n")
    return out


_CACHE: dict[tuple[int, bool], list[bytes]] = {}


async def app(scope, receive, send):
    if scope["type"] == "lifespan":
        await lifespan(receive, send)
        return
    if scope["path"].endswith("/healthz"):
        await send({"type": "http.response.start", "status": 200, "headers": []})
        await send({"type": "http.response.body", "body": b"ok"})
        return
    model = orjson.loads(await read_body(receive)).get("model", "chunks-10")
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
