"""The SSE response: pre-encoded frames out, disconnects in, pings on silence.

Frames are encoded once, by the stream log (app/streams/log.py); a response only reads them. We
began on sse-starlette's EventSourceResponse; its per-response task group and its per-send cancel
scope and anyio lock add per-chunk work, so this is the same protocol with less machinery. It is a
StreamingResponse for its headers (set by `StreamingResponse.__init__`) with its own `__call__`.
Deliberate choices, numbered as sse-starlette does:
1. The frames are sent from a child task; the response's own task watches `receive` for
   `http.disconnect` and sends `: ping` after `ping_seconds` of silence. When the client leaves it
   calls `on_disconnect` (the reader's choice: cancel the run, or let it go on) and cancels the
   child, as Starlette's StreamingResponse races its sender against its disconnect listener.
2. The same watcher is the send watchdog: a send stuck longer than `send_timeout` (a client that
   stopped reading) is treated as a disconnect, so a dead reader never pins an upstream. The
   sender reads no clock: it counts frames, and the watcher, waking four times per deadline,
   notes when the count last moved.
3. No lock around sends: a ping is one complete frame and only goes out when nothing was sent
   for a whole interval; uvicorn refuses (and we ignore) a ping that loses the race with the end.
4. Once `http.response.start` went through every layer, the body frames go through the channel
   below the gateway's middleware (`RequestLog.send`, app/api/middleware.py): the wrappers above
   it (the middleware's, Starlette's exception handling) have work only at the start.
5. The frames that hold the stream's final (`LastFrames`, app/streams/frames.py) end the body
   (`more_body: False`): one write for the final and the end of the chunked body, not two.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Callable, Mapping

from starlette.responses import StreamingResponse
from starlette.types import Receive, Scope, Send

from app.api.middleware import RequestLog, watch_client
from app.streams.frames import LastFrames

__all__ = ["SSEResponse"]

_HEADERS = {"cache-control": "no-store", "x-accel-buffering": "no"}
_PING = {"type": "http.response.body", "body": b": ping\n\n", "more_body": True}


class SSEResponse(StreamingResponse):
    media_type = "text/event-stream"

    def __init__(
        self,
        frames: AsyncIterator[bytes],
        *,
        ping_seconds: float = 5.0,
        send_timeout: float = 30.0,
        headers: Mapping[str, str] | None = None,
        status_code: int = 200,
        on_disconnect: Callable[[], object] | None = None,
        retry_ms: int | None = None,
    ) -> None:
        super().__init__(frames, status_code=status_code, headers={**_HEADERS, **(headers or {})})
        self.frames = frames
        self.ping_seconds = ping_seconds
        self.send_timeout = send_timeout
        self.on_disconnect = on_disconnect
        """Called when the client leaves before the last frame (a reader cancelling its run)."""
        self.retry_ms = retry_ms
        """Sent once, after the first frame, as `retry: <ms>`: the EventSource's reconnection delay."""

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        state = _State()
        record = scope.get("state", {}).get("record")
        body = record.send if isinstance(record, RequestLog) and record.send is not None else send
        sender = asyncio.get_running_loop().create_task(self._send(send, body, state))
        client, _ = watch_client(scope, receive)  # the response is its last user: `_watch` stops it
        try:
            gone = await self._watch(client, send, sender, state)
        finally:
            if not sender.done():  # a wait on a done task still costs a turn of the loop
                sender.cancel()
                await asyncio.wait((sender,))
            close = getattr(self.frames, "aclose", None)
            if close is not None:
                with contextlib.suppress(Exception):
                    await close()
        if gone:
            if self.on_disconnect is not None:
                self.on_disconnect()
            return
        failure = None if sender.cancelled() else sender.exception()
        if failure is not None:
            raise failure

    async def _send(self, send: Send, body: Send, state: _State) -> None:
        """The start through every layer (`send`), then the frames through `body` (point 4)."""
        await send({"type": "http.response.start", "status": self.status_code, "headers": self.raw_headers})
        send = body
        retry = b"retry: %d\n\n" % self.retry_ms if self.retry_ms is not None else b""
        async for chunk in self.frames:
            last = chunk.__class__ is LastFrames  # the body ends with it (point 5)
            state.sending = True  # no clock per frame: the watcher samples these (point 2)
            await send({"type": "http.response.body", "body": chunk + retry if retry else chunk, "more_body": not last})
            retry = b""
            state.sending = False
            state.sent += 1
            if last:
                return
        state.sending = True  # the closing send is watched too (a reader that never reads)
        await send({"type": "http.response.body", "body": b"", "more_body": False})

    async def _watch(self, client: asyncio.Future[None], send: Send, sender: asyncio.Task[None], state: _State) -> bool:
        """Until the sender is done (False) or the client is gone (True, `client` done): pings and the
        watchdog."""
        loop = asyncio.get_running_loop()
        # Wake often enough to see either deadline within a fraction of itself.
        interval = min(self.ping_seconds, self.send_timeout) / 4
        seen, changed = state.sent, loop.time()  # the last frame count seen, and when it last moved
        sending_since: float | None = None  # when the send in progress was first seen
        try:
            while True:
                done, _ = await asyncio.wait((sender, client), timeout=interval, return_when=asyncio.FIRST_COMPLETED)
                if sender in done:  # all sent, or the client left mid-send (OSError, ASGI 2.4)
                    return client in done or (not sender.cancelled() and isinstance(sender.exception(), OSError))
                now = loop.time()
                moved = state.sent != seen
                if moved:
                    seen, changed = state.sent, now
                if not state.sending:
                    sending_since = None
                elif moved or sending_since is None:
                    sending_since = now
                if client in done or (sending_since is not None and now - sending_since > self.send_timeout):
                    return True
                if not state.sending and now - changed >= self.ping_seconds:
                    with contextlib.suppress(Exception):
                        await send(_PING)
                    changed = loop.time()
        finally:
            client.cancel()


class _State:
    __slots__ = ("sent", "sending")

    def __init__(self) -> None:
        self.sent = 0  # frames sent; the watcher notes when this last moved
        self.sending = False

