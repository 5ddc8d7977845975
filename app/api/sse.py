"""The SSE response: sse-starlette's EventSourceResponse over pre-encoded frames.

Frames are encoded once, by the stream log (app/streams/log.py); sse-starlette supplies the
ping, disconnect and send-timeout machinery. Pings are `: ping` comments.
"""

from __future__ import annotations

from collections.abc import AsyncIterator

from sse_starlette import EventSourceResponse, ServerSentEvent

__all__ = ["sse_response"]

_HEADERS = {"Cache-Control": "no-store", "X-Accel-Buffering": "no"}
_SEND_TIMEOUT = 30.0  # a client that stops reading for this long is dropped


def _ping() -> ServerSentEvent:
    return ServerSentEvent(comment="ping", sep="\n")


def sse_response(frames: AsyncIterator[bytes], *, ping_seconds: float, stream_id: str) -> EventSourceResponse:
    return EventSourceResponse(
        frames, headers={**_HEADERS, "X-Stream-ID": stream_id}, ping=ping_seconds, sep="\n",
        ping_message_factory=_ping, send_timeout=_SEND_TIMEOUT,
    )
