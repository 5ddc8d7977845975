"""The SSE response: pre-encoded frames out, disconnects in, pings on silence.

Frames are encoded once, by the stream log (app/streams/log.py). We began on sse-starlette's
EventSourceResponse; its per-response task group and its per-send cancel scope and anyio lock
add per-chunk work (bench/run.py measures the whole gateway's CPU per chunk; the saving was not
measured apart), so this is the same protocol with less machinery. It is a StreamingResponse
for its headers (set by `StreamingResponse.__init__`) with its own `__call__`. Deliberate
choices, numbered as sse-starlette does:
1. One helper task per response watches `receive` for `http.disconnect` and cancels the
   streaming task (so the run is cancelled and the upstream closed), and sends `: ping` after
   `ping_seconds` of silence.
2. The same task is the send watchdog: a send stuck longer than `send_timeout` (a client that
   stopped reading) is treated as a disconnect, so a dead reader never pins an upstream. The
   streaming loop reads no clock: it counts frames, and the watcher, waking four times per
   deadline, notes when the count last moved (issue 12: no per-event clock calls).
3. No lock around sends: a ping is one complete frame and only goes out when nothing was sent
   for a whole interval; uvicorn refuses (and we ignore) a ping that loses the race with the end.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Mapping

from starlette.responses import StreamingResponse
from starlette.types import Receive, Scope, Send

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
    ) -> None:
        super().__init__(frames, status_code=status_code, headers={**_HEADERS, **(headers or {})})
        self.frames = frames
        self.ping_seconds = ping_seconds
        self.send_timeout = send_timeout

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        loop = asyncio.get_running_loop()
        streamer = asyncio.current_task()
        assert streamer is not None
        state = _State()
        helper = loop.create_task(self._watch(receive, send, streamer, state))
        try:
            await send({"type": "http.response.start", "status": self.status_code, "headers": self.raw_headers})
            async for chunk in self.frames:
                state.sending = True  # no clock per frame: the watcher samples these (point 2)
                await send({"type": "http.response.body", "body": chunk, "more_body": True})
                state.sending = False
                state.sent += 1
            state.sending = True  # the closing send is watched too (a reader that never reads)
            await send({"type": "http.response.body", "body": b"", "more_body": False})
            state.done = True
        except asyncio.CancelledError:
            if not state.client_gone:
                raise
            streamer.uncancel()  # we cancelled ourselves: the client left; end quietly
        except OSError:
            pass  # the client went away mid-send (ASGI spec 2.4)
        finally:
            state.done = True
            helper.cancel()
            close = getattr(self.frames, "aclose", None)
            if close is not None:
                with contextlib.suppress(Exception):
                    await close()

    async def _watch(self, receive: Receive, send: Send, streamer: asyncio.Task[None], state: _State) -> None:
        loop = asyncio.get_running_loop()
        # Wake often enough to see either deadline within a fraction of itself.
        interval = min(self.ping_seconds, self.send_timeout) / 4
        disconnect = loop.create_task(_wait_disconnect(receive))
        seen, changed = state.sent, loop.time()  # the last frame count seen, and when it last moved
        sending_since: float | None = None  # when the send in progress was first seen
        try:
            while not state.done:
                done, _ = await asyncio.wait({disconnect}, timeout=interval)
                if state.done:
                    return
                now = loop.time()
                moved = state.sent != seen
                if moved:
                    seen, changed = state.sent, now
                if not state.sending:
                    sending_since = None
                elif moved or sending_since is None:
                    sending_since = now
                stuck = sending_since is not None and now - sending_since > self.send_timeout
                if done or stuck:
                    state.client_gone = True
                    streamer.cancel()
                    return
                if not state.sending and now - changed >= self.ping_seconds:
                    with contextlib.suppress(Exception):
                        await send(_PING)
                    changed = loop.time()
        finally:
            disconnect.cancel()


class _State:
    __slots__ = ("sent", "sending", "done", "client_gone")

    def __init__(self) -> None:
        self.sent = 0  # frames sent; the watcher notes when this last moved
        self.sending = False
        self.done = False
        self.client_gone = False


async def _wait_disconnect(receive: Receive) -> None:
    while (await receive())["type"] != "http.disconnect":
        pass
