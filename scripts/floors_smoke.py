"""A smoke test of the app on whatever versions are installed (scripts/check_floors.py runs it at the
floors): every module imports, the lifespan starts and stops, GET /healthz answers 200, POST /v1/stream with `mock/simple`
answers SSE ending in a `final`, and without a JSON content type 422. Plain ASGI calls, so it needs
nothing beyond the runtime dependencies.
"""

from __future__ import annotations

import asyncio
import importlib
import json
import pkgutil
import sys
from collections.abc import Awaitable, Callable
from typing import Any

Message = dict[str, Any]


async def request(app: Any, method: str, path: str, body: bytes = b"",
                  headers: tuple[tuple[bytes, bytes], ...] = ()) -> tuple[int, bytes]:
    """One HTTP request through the ASGI app: (status, whole body)."""
    sent: list[Message] = []
    done = asyncio.Event()
    asked = False

    async def receive() -> Message:
        nonlocal asked
        if not asked:
            asked = True
            return {"type": "http.request", "body": body, "more_body": False}
        await done.wait()
        return {"type": "http.disconnect"}

    async def send(message: Message) -> None:
        sent.append(message)
        if message["type"] == "http.response.body" and not message.get("more_body", False):
            done.set()

    scope = {"type": "http", "asgi": {"version": "3.0"}, "http_version": "1.1", "method": method, "scheme": "http",
             "path": path, "raw_path": path.encode(), "query_string": b"", "root_path": "",
             "headers": [(b"host", b"smoke"), (b"content-length", str(len(body)).encode()), *headers],
             "client": ("127.0.0.1", 1), "server": ("127.0.0.1", 80), "state": {}}
    await app(scope, receive, send)
    status = next(m["status"] for m in sent if m["type"] == "http.response.start")
    return status, b"".join(m.get("body", b"") for m in sent if m["type"] == "http.response.body")


async def lifespan(app: Any) -> tuple[Callable[[], Awaitable[None]], asyncio.Task[None]]:
    """Start the app's lifespan; give back the call that shuts it down."""
    inbox: asyncio.Queue[Message] = asyncio.Queue()
    outbox: asyncio.Queue[Message] = asyncio.Queue()
    task = asyncio.create_task(app({"type": "lifespan", "asgi": {"version": "3.0"}, "state": {}}, inbox.get, outbox.put))
    await inbox.put({"type": "lifespan.startup"})
    started = await outbox.get()
    if started["type"] != "lifespan.startup.complete":
        raise SystemExit(f"lifespan startup failed: {started}")

    async def stop() -> None:
        await inbox.put({"type": "lifespan.shutdown"})
        stopped = await outbox.get()
        if stopped["type"] != "lifespan.shutdown.complete":
            raise SystemExit(f"lifespan shutdown failed: {stopped}")
        await task

    return stop, task


def import_everything() -> int:
    """Import every module of the app (some import their library only when used: Redis, PostgreSQL)."""
    import app

    count = 0
    for module in pkgutil.walk_packages(app.__path__, "app."):
        if ".migrations" in module.name or module.name.endswith("__main__"):
            continue  # alembic's env runs migrations when imported; a __main__ runs its command
        importlib.import_module(module.name)
        count += 1
    return count


async def main() -> None:
    from app.main import create_app

    modules = import_everything()

    app = create_app()
    stop, _ = await lifespan(app)
    try:
        status, _ = await request(app, "GET", "/healthz")
        assert status == 200, f"GET /healthz: {status}"
        ask = json.dumps({"model": "mock/simple", "messages": [{"role": "user", "content": "hi"}]}).encode()
        status, body = await request(app, "POST", "/v1/stream", ask, ((b"content-type", b"application/json"),))
        assert status == 200, f"POST /v1/stream: {status} {body[:500]!r}"
        events = [line.split(b":", 1)[1].strip() for line in body.splitlines() if line.startswith(b"event:")]
        assert events and events[0] == b"start" and events[-1] == b"final", f"POST /v1/stream events: {events}"
        data = [line.split(b":", 1)[1] for line in body.splitlines() if line.startswith(b"data:")]
        final = json.loads(data[-1])  # the final's data (a `retry:` hint may follow the frames)
        assert final["status"] == "ok", f"final: {final}"
        # A body without a JSON content type is not parsed (FastAPI's strict content type): 422 naming the body.
        status, body = await request(app, "POST", "/v1/stream", ask)
        assert status == 422 and json.loads(body)["error"]["field"] == "body", f"no content type: {status} {body!r}"
    finally:
        await stop()
    traced = await traced_run(ask)
    print(f"smoke OK: {modules} modules imported, /healthz 200, /v1/stream {len(events)} events ending in final(ok), "
          f"traced: {traced}")


async def traced_run(ask: bytes) -> str:
    """A run traced by the OpenTelemetry SDK (in-memory exporter): its span, the caller's traceparent its parent."""
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

    from app.main import create_app
    from app.tracing import Tracing

    exporter = InMemorySpanExporter()
    app = create_app(tracing=Tracing(exporter=exporter, batch=False))
    parent = b"00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
    status, body = await request(app, "POST", "/v1/stream", ask,
                                 ((b"content-type", b"application/json"), (b"traceparent", parent)))
    assert status == 200 and b"event: final" in body, f"traced POST /v1/stream: {status} {body[:500]!r}"
    runs = [s for s in exporter.get_finished_spans() if s.name == "chat mock/simple" and s.parent is not None]
    assert runs and format(runs[0].parent.span_id, "016x") == "00f067aa0ba902b7", "the run span and its parent"
    return f"{len(exporter.get_finished_spans())} spans"


if __name__ == "__main__":
    try:
        asyncio.run(main())
    except AssertionError as exc:
        sys.exit(f"smoke FAILED: {exc}")
