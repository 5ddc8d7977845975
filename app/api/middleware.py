"""Pure ASGI middleware: request id, body size limit, one log line and metrics per request, and
the `Server-Timing` header that says where the time to the first byte went.

Pure ASGI (not BaseHTTPMiddleware) so streaming responses pass through untouched and the
client's disconnect still reaches the SSE response. The middleware's `send` wrapper only has work
at `http.response.start` (the status, the headers); a streamed response sends its body frames
through `RequestLog.send`, the channel below this middleware, so no frame pays for the wrapper.
"""

from __future__ import annotations

import asyncio
import logging
import re
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import orjson
import structlog
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from app.core.ids import time_ordered_hex
from app.core.secrets import scrub
from app.observability import Metrics, get_logger
from app.tracing import Tracing

if TYPE_CHECKING:
    from app.run import Run

__all__ = ["RequestContextMiddleware", "RequestLog", "disconnected", "note_refusal", "watch_client"]

_MAX_MESSAGE = 300


def note_refusal(scope: Scope, code: str | None, field: str | None, message: str) -> None:
    """The request's log line (if the middleware made one) says why it was refused."""
    record = scope.get("state", {}).get("record")
    if isinstance(record, RequestLog):
        record.refused(code, field, message)


@dataclass(slots=True)
class RequestLog:
    """One request's log line, written by the middleware when the response ended. A route that
    opens a run attaches it; the run's report (app/core/report.py) adds the run's fields."""

    request_id: str
    method: str
    path: str
    model: str | None = None
    """The model asked for, once the body was read."""
    run: Run | None = None
    key_id: str | None = None
    """Who called (app/api/access.py): the API key's id, `admin` or `open`; never the key."""
    key_name: str | None = None
    trace_id: str | None = None
    """The run's trace id (app/tracing.py), when tracing is on and the request started a run."""
    refusal: dict[str, str] | None = None
    """Why the request was refused before any run (error code, field, scrubbed message)."""
    send: Send | None = None
    """The channel below the middleware: once the response started, its body may go straight there."""
    gone: asyncio.Future[None] | None = None
    """The request's watcher of its client leaving (`watch_gone`), once started."""

    def watch_gone(self, receive: Receive) -> asyncio.Future[None]:
        """The request's one watcher of its client leaving (a task reading `receive` until
        `http.disconnect`), started on first use: the wait for a run to open and the response that
        reads the run share it. The middleware stops it when the request ends."""
        if self.gone is None:
            self.gone = asyncio.ensure_future(disconnected(receive))
        return self.gone

    def upstream_seconds(self, *, whole: bool) -> float | None:
        """The provider's share of the time to the answer's first byte: its attempts' time to their
        first content (or failure); for an answer that waited for the whole run (`whole`: a JSON
        answer), also the run's time after its first content. None when no run opened."""
        run = self.run
        route = run.plan.route if run is not None else None
        if run is None or route is None:
            return None
        seconds = sum(a.duration_ms for a in route.attempts if a.step == 1) / 1000
        report = run.report
        if whole and report is not None and report.ttft is not None:
            seconds += report.duration - report.ttft
        return seconds

    def refused(self, code: str | None, field: str | None, message: str) -> None:
        """Explain a refusal in the log line: its code, field and message, scrubbed of secrets."""
        self.refusal = {"error_code": code or "invalid_request", "error_field": field or "",
                        "error_message": scrub(message)[:_MAX_MESSAGE]}

    def fields(self) -> dict[str, Any]:
        out: dict[str, Any] = {"request_id": self.request_id, "method": self.method, "path": self.path}
        if self.refusal is not None:
            out.update(self.refusal)
        if self.trace_id is not None:
            out["trace_id"] = self.trace_id
        if self.key_id is not None:
            out["key_id"] = self.key_id
        if self.key_name is not None:
            out["key_name"] = self.key_name
        run = self.run
        if run is None:
            if self.model is not None:
                out["model"] = self.model
            return out
        out.update(model=run.model, provider=run.provider)
        if run.report is not None:
            out.update(run.report.log_fields())
        else:  # still running (in the background): its own line comes when it ends
            out["stream_id"] = run.stream_id
        return out

_REQUEST_ID_RE = re.compile(r"^[A-Za-z0-9._:-]{1,128}$")


class RequestContextMiddleware:
    def __init__(self, app: ASGIApp, *, metrics: Metrics, max_body_bytes: int, tracing: Tracing | None = None) -> None:
        self.app = app
        self.metrics = metrics
        self.max_body_bytes = max_body_bytes
        self.tracing = tracing
        # Bound once, to the logging this app configured (create_app, before its first request builds
        # the middleware): a lazy `get_logger` proxy binds a new logger on every call (5.1 us against
        # 0.2, timeit), once a request here.
        self.log = get_logger("foundry.http").bind()

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        started = time.perf_counter()
        request_id = _request_id(scope)
        record = RequestLog(request_id=request_id, method=scope["method"], path=scope["path"], send=send)
        scope.setdefault("state", {})["record"] = record
        status = 500

        async def send_wrapper(message: Message) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = message["status"]
                headers = message.get("headers", ())
                message["headers"] = [*headers, *self._headers(record, started, scope, _streamed(headers))]
            await send(message)

        structlog.contextvars.bind_contextvars(request_id=request_id)
        # the caller's `traceparent`: the parent of a run this request starts (app/tracing.py)
        trace_token = self.tracing.attach(scope["headers"]) if self.tracing is not None else None
        try:
            if scope["method"] in ("POST", "PUT", "PATCH"):
                buffered = await self._limited_body(scope, receive, send_wrapper)
                if buffered is None:
                    status = 413
                    return
                receive = buffered
            await self.app(scope, receive, send_wrapper)
        finally:
            if record.gone is not None:
                record.gone.cancel()
            # The scope holds the record: the server's channel, or the watcher (whose cancellation's
            # traceback holds the server's frames), held past the request would make a reference cycle,
            # freed only by the garbage collector with the whole request's graph.
            record.send = record.gone = None
            if trace_token is not None:
                self.tracing.detach(trace_token)  # type: ignore[union-attr]
            structlog.contextvars.unbind_contextvars("request_id")
            self._done(scope, record, status, started)

    def _headers(self, record: RequestLog, started: float, scope: Scope,
                 streamed: bool) -> list[tuple[bytes, bytes]]:
        """The headers the middleware adds to every answer: its request id, its trace id, and the
        Server-Timing split of its time to the first byte (observed in metrics too)."""
        first_byte = time.perf_counter() - started
        upstream = record.upstream_seconds(whole=not streamed)
        route = getattr(scope.get("route"), "path", None) or "unmatched"
        timing, child = self.metrics.first_byte, self.metrics.child
        if upstream is None:
            child(timing, route, "gateway").observe(first_byte)
            server_timing = b"gateway;dur=%.3f" % (first_byte * 1000)
        else:
            upstream = min(upstream, first_byte)
            child(timing, route, "gateway").observe(first_byte - upstream)
            child(timing, route, "upstream").observe(upstream)
            server_timing = b"gateway;dur=%.3f, upstream;dur=%.3f" % ((first_byte - upstream) * 1000, upstream * 1000)
        headers = [(b"x-request-id", record.request_id.encode()), (b"server-timing", server_timing)]
        if record.trace_id is not None:
            headers.append((b"x-trace-id", record.trace_id.encode()))
        return headers

    def _done(self, scope: Scope, record: RequestLog, status: int, started: float) -> None:
        """The request's metrics and its log line."""
        route = scope.get("route")
        route_path = getattr(route, "path", None) or "unmatched"
        self.metrics.child(self.metrics.requests, route_path, scope["method"], str(status)).inc()
        # the line's fields are gathered only when it is written (a gateway logging at warning and above)
        if route_path != "/metrics" and not route_path.endswith("z") and self.log.is_enabled_for(logging.INFO):
            self.log.info("request", **record.fields(), status=status,
                          duration_ms=round((time.perf_counter() - started) * 1000, 3))

    async def _limited_body(self, scope: Scope, receive: Receive, send: Send) -> Receive | None:
        """Read the body up to the limit; answer 413 (and return None) past it."""
        limit = self.max_body_bytes
        for name, value in scope.get("headers", ()):
            if name == b"content-length" and value.isdigit() and int(value) > limit:
                await _too_large(send, limit)
                return None
        chunks: list[bytes] = []
        size = 0
        while True:
            message = await receive()
            if message["type"] != "http.request":  # disconnect before the body ended
                return _replay([message], receive)
            body = message.get("body", b"")
            size += len(body)
            if size > limit:
                await _too_large(send, limit)
                return None
            chunks.append(body)
            if not message.get("more_body", False):
                break
        scope["state"]["body_bytes"] = size  # the media check holds the rest of the body to the base limit
        return _replay([{"type": "http.request", "body": b"".join(chunks), "more_body": False}], receive)


def _streamed(headers: Any) -> bool:
    """Whether an answer streams (SSE): it starts before its run ends."""
    return any(name == b"content-type" and value.startswith(b"text/event-stream") for name, value in headers)


def _replay(messages: list[Message], receive: Receive) -> Receive:
    """A receive that hands out the buffered body first, then the real channel (disconnects)."""
    pending = list(messages)

    async def replay() -> Message:
        if pending:
            return pending.pop(0)
        return await receive()

    return replay


async def _too_large(send: Send, limit: int) -> None:
    body = orjson.dumps({"error": {"code": "payload_too_large", "retryable": False, "field": "body",
                                   "message": f"request body exceeds {limit} bytes"}})
    await send({"type": "http.response.start", "status": 413,
                "headers": [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode()),
                            (b"connection", b"close")]})
    await send({"type": "http.response.body", "body": body})


def _request_id(scope: Scope) -> str:
    for name, value in scope.get("headers", ()):
        if name == b"x-request-id":
            candidate = value.decode("latin-1")
            if _REQUEST_ID_RE.match(candidate):
                return candidate
            break
    return time_ordered_hex()


async def disconnected(receive: Receive) -> None:
    """Until the client has gone (`http.disconnect`): the request's body was read already."""
    while (await receive())["type"] != "http.disconnect":
        pass


def watch_client(scope: Scope, receive: Receive) -> tuple[asyncio.Future[None], bool]:
    """The watcher of the request's client leaving, and whether it is the request's own
    (`RequestLog.watch_gone`: shared by whoever waits on the client, stopped by the middleware at the
    request's end) rather than one made here for want of the middleware's log, which the caller
    stops."""
    record = scope.get("state", {}).get("record")
    if isinstance(record, RequestLog):
        return record.watch_gone(receive), True
    return asyncio.ensure_future(disconnected(receive)), False
