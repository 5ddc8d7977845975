"""An OTLP/HTTP trace sink for benchmarks (run by uvicorn in its own process): POST /v1/traces is
read whole and answered 200 with an empty export response; GET /count answers how many exports and
bytes it received (so a bench knows tracing really exported); GET /healthz answers 200."""

from __future__ import annotations

from typing import Any

import orjson

_received = {"exports": 0, "bytes": 0}


async def app(scope: dict[str, Any], receive: Any, send: Any) -> None:
    if scope["type"] == "lifespan":
        while (await receive())["type"] != "lifespan.shutdown":
            await send({"type": "lifespan.startup.complete"})
        await send({"type": "lifespan.shutdown.complete"})
        return
    if scope["method"] == "POST":
        more = True
        while more:
            message = await receive()
            _received["bytes"] += len(message.get("body", b""))
            more = message.get("more_body", False)
        _received["exports"] += 1
        answer, kind = b"", b"application/x-protobuf"
    else:
        answer, kind = orjson.dumps(_received) if scope["path"] == "/count" else b"ok", b"application/json"
    await send({"type": "http.response.start", "status": 200,
                "headers": [(b"content-type", kind), (b"content-length", str(len(answer)).encode())]})
    await send({"type": "http.response.body", "body": answer})
