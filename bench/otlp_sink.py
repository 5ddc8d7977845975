"""An OTLP/HTTP trace sink for benchmarks (run by uvicorn in its own process): POST /v1/traces is
read whole and answered 200 with an empty export response; GET /healthz answers 200."""

from __future__ import annotations

from typing import Any


async def app(scope: dict[str, Any], receive: Any, send: Any) -> None:
    if scope["type"] == "lifespan":
        while (await receive())["type"] != "lifespan.shutdown":
            await send({"type": "lifespan.startup.complete"})
        await send({"type": "lifespan.shutdown.complete"})
        return
    more = scope["method"] == "POST"
    while more:
        more = (await receive()).get("more_body", False)
    await send({"type": "http.response.start", "status": 200,
                "headers": [(b"content-type", b"application/x-protobuf"), (b"content-length", b"0")]})
    await send({"type": "http.response.body", "body": b""})
