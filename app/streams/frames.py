"""The SSE frame codec of the stream logs: an event to its frame, and frames back to content events;
a final cut to fit a log's byte cap (`fitted_final`); a finished log's frames packed in one bytes
object (`PackedFrames`).

A log encodes each event once, for all its readers (app/streams/log.py); a store that rebuilds a
stream from stored frames decodes them here (app/streams/redis/follower.py)."""

from __future__ import annotations

import dataclasses
from array import array
from bisect import bisect_left
from collections.abc import Callable, Iterator, Sequence
from itertools import accumulate
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

__all__ = ["CUT_MARKER", "LastFrames", "PackedFrames", "decode_frames", "encode_frame", "fitted_final"]


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


class LastFrames(bytes):
    """A stream's last frames, its final among them: the response that sends them ends with them
    (`more_body: False`, app/api/sse.py), in one write where a separate end of the body takes another."""

    __slots__ = ()


class PackedFrames:
    """A finished log's frames in one bytes object, with the end of each frame in an array: read
    like the deque they were (`len`, `popleft`) and by spans, without an object per frame. A log
    packs its frames when its final is in (app/streams/log.py): a stream kept for replay after it
    ended then holds two allocations, not one small one per event scattered over the heap (a
    200-event stream kept ~60 KiB of memory for its ~14 KiB of frames, docs/performance.md)."""

    __slots__ = ("_blob", "_ends", "_first")

    def __init__(self, frames: Sequence[bytes]) -> None:
        self._blob = b"".join(frames)
        # 4 bytes a frame, 8 past 4 GiB
        self._ends = array("I" if len(self._blob) < 1 << 32 else "Q", accumulate(map(len, frames)))
        self._first = 0
        """Frames popped from the left (their bytes stay in the blob)."""

    def __len__(self) -> int:
        return len(self._ends) - self._first

    def __iter__(self) -> Iterator[bytes]:
        blob, ends = self._blob, self._ends
        for index in range(self._first, len(ends)):
            yield blob[self._start(index):ends[index]]

    def _start(self, index: int) -> int:
        return self._ends[index - 1] if index else 0

    def popleft(self) -> bytes:
        index = self._first
        if index >= len(self._ends):
            raise IndexError("pop from an empty PackedFrames")
        self._first = index + 1
        return self._blob[self._start(index):self._ends[index]]

    def span(self, offset: int, stop: int, max_bytes: int | None, max_frames: int) -> tuple[bytes, int]:
        """The frames from `offset` up to `stop` (counted from the first kept), at most `max_frames`
        of them, joined; with `max_bytes`, only as many as reach it (one at least). And how many."""
        first = self._first + offset
        last = self._first + min(stop, offset + max_frames)
        begin = self._start(first)
        if max_bytes is not None:  # the frame that reaches max_bytes is the last one taken
            last = min(last, bisect_left(self._ends, begin + max_bytes, first, last) + 1)
        return self._blob[begin:self._ends[last - 1]], last - first
