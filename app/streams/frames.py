"""The SSE frame codec of the stream logs: an event to its frame, and frames back to content events;
a final cut to fit a log's byte cap (`fitted_final`).

A log encodes each event once, for all its readers (app/streams/log.py); a store that rebuilds a
stream from stored frames decodes them here (app/streams/redis/follower.py)."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any

import orjson

from app.core import safejson
from app.core.events import (
    AssistantMessage,
    FinalEvent,
    ReasoningEvent,
    StreamEvent,
    TokenEvent,
    ToolCallEvent,
    ToolResultEvent,
)

__all__ = ["CUT_MARKER", "decode_frames", "encode_frame", "fitted_final"]


def encode_frame(seq: int, event: StreamEvent) -> bytes:
    """One SSE frame: `id`, `event`, one compact JSON `data` line, blank line.

    Text deltas, most of every stream, skip the payload dict: only the content goes through
    JSON (the same bytes as `safejson.dumps(event.data())`; tests/test_stream_log.py). A refusal's
    token takes the general path: its data carries `refusal: true`."""
    kind = type(event)
    if (kind is TokenEvent and not event.refusal) or kind is ReasoningEvent:  # type: ignore[union-attr]
        try:  # orjson at once; safejson's cleaned copy when the text holds a lone surrogate
            content = _dumps(event.content)  # type: ignore[union-attr]
        except orjson.JSONEncodeError:
            content = safejson.dumps(event.content)  # type: ignore[union-attr]
        return (_TOKEN_FRAME if kind is TokenEvent else _REASONING_FRAME) % (seq, event.index, content)  # type: ignore[union-attr]
    return b"id: %d\nevent: %s\ndata: %s\n\n" % (seq, event.type.encode(), safejson.dumps(event.data()))


_dumps = orjson.dumps
_TOKEN_FRAME = b'id: %d\nevent: token\ndata: {"index":%d,"content":%s}\n\n'
_REASONING_FRAME = b'id: %d\nevent: reasoning\ndata: {"index":%d,"content":%s}\n\n'


def decode_frames(data: bytes) -> list[StreamEvent]:
    """The content events (token, reasoning, tool_call, tool_result) of frames made by
    `encode_frame`, back as events; `start`, `final` and comments are skipped. For a store that
    rebuilds what a stream released from its stored frames (app/core/released.py)."""
    events: list[StreamEvent] = []
    for frame in data.split(b"\n\n"):
        lines = frame.split(b"\n")
        if len(lines) != 3 or not lines[1].startswith(b"event: "):
            continue
        decode = _DECODE.get(lines[1][7:])
        if decode is not None:
            events.append(decode(orjson.loads(lines[2][6:])))
    return events


_DECODE: dict[bytes, Callable[[Any], StreamEvent]] = {
    b"token": lambda d: TokenEvent(index=d["index"], content=d["content"], refusal=d.get("refusal", False)),
    b"reasoning": lambda d: ReasoningEvent(index=d["index"], content=d["content"]),
    b"tool_call": lambda d: ToolCallEvent(id=d["id"], name=d["name"], index=d["index"],
                                          args_fragment=d["args_fragment"], is_final=d["is_final"],
                                          arguments=d.get("arguments"), server=d.get("server", False)),
    b"tool_result": lambda d: ToolResultEvent(tool_call_id=d["tool_call_id"], name=d["name"], content=d["content"],
                                              is_error=d["is_error"]),
}


CUT_MARKER = "… [truncated: this final passed the stream's byte cap]"
"""Ends the text of a final kept cut (`fitted_final`)."""


def fitted_final(final: FinalEvent, seq: int, limit: int) -> tuple[FinalEvent, bytes]:
    """A final whose frame passed a log's byte cap, cut to fit it: reasoning and the run's added
    messages left out, the text shortened on a character boundary and ended by `CUT_MARKER`. What
    no cut can shrink (status, usage, error, tool calls) is kept whole."""
    slim = dataclasses.replace(final, message=AssistantMessage(content=CUT_MARKER,
                                                               tool_calls=final.message.tool_calls), messages=())
    frame = encode_frame(seq, slim)
    text = final.message.content.encode("utf-8", "surrogatepass")
    room = limit - len(frame)
    while room > 0 and text:  # JSON escapes can make the text longer on the wire: shrink until it fits
        content = text[:room].decode("utf-8", "ignore") + CUT_MARKER
        fitted = dataclasses.replace(slim, message=dataclasses.replace(slim.message, content=content))
        candidate = encode_frame(seq, fitted)
        if len(candidate) <= limit:
            return fitted, candidate
        room -= len(candidate) - limit
    return slim, frame
