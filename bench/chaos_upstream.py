"""The chaos soak's fake OpenAI-compatible upstream (own process, under uvicorn): realistic pacing
and the faults a real provider shows.

POST /v1/chat/completions; the requested model names the behaviour, `<kind>-<tokens>`:
  paced-N   N text deltas, one every 20 ms (50 tokens a second), then finish, usage and [DONE];
  stall-N   half of them, then silence for a minute (the gateway's read timeout ends the run);
  reset-N   half of them, then the connection is dropped mid-body (no chunked terminator);
  limit-N   429 with Retry-After and an OpenAI error body, before any byte of a stream.
GET /healthz answers ok. Usage: `python -m uvicorn bench.chaos_upstream:app --port 9200`.
"""

from __future__ import annotations

import asyncio

import orjson

from bench.upstream import chunk, lifespan, read_body

INTERVAL = 0.02


def _chunk(delta: dict, finish: str | None = None, usage: dict | None = None, choices: bool = True) -> bytes:
    return chunk(delta, finish, usage, choices, model="chaos")


class Reset(Exception):
    """Raised mid-body: uvicorn drops the connection without ending the chunked body."""


async def _plain(send, status: int, body: bytes, headers: list[tuple[bytes, bytes]] | None = None) -> None:
    await send({"type": "http.response.start", "status": status,
                "headers": [(b"content-type", b"application/json"), *(headers or [])]})
    await send({"type": "http.response.body", "body": body})


async def _stream(send, kind: str, n: int) -> None:
    await send({"type": "http.response.start", "status": 200, "headers": [(b"content-type", b"text/event-stream")]})
    await send({"type": "http.response.body", "body": _chunk({"role": "assistant", "content": ""}), "more_body": True})
    cut = n // 2 if kind in ("stall", "reset") else n
    for i in range(cut):
        await send({"type": "http.response.body", "body": _chunk({"content": f" w{i}"}), "more_body": True})
        await asyncio.sleep(INTERVAL)
    if kind == "stall":
        await asyncio.sleep(60)
    if kind == "reset":
        raise Reset("chaos: connection reset mid-stream")
    tail = _chunk({}, finish="stop") + _chunk({}, usage={"prompt_tokens": 5, "completion_tokens": n,
                                                         "total_tokens": n + 5}, choices=False) + b"data: [DONE]\n\n"
    await send({"type": "http.response.body", "body": tail})


async def app(scope, receive, send):
    if scope["type"] == "lifespan":
        await lifespan(receive, send)
        return
    if scope["path"].endswith("/healthz"):
        await _plain(send, 200, b"ok")
        return
    model = str(orjson.loads(await read_body(receive)).get("model", "paced-10"))
    kind, _, count = model.partition("-")
    n = int(count or 10)
    if kind == "limit":
        error = {"error": {"message": "chaos: rate limited", "type": "rate_limit_error", "code": "rate_limit_exceeded"}}
        await _plain(send, 429, orjson.dumps(error), [(b"retry-after", b"1")])
        return
    await _stream(send, kind, n)
