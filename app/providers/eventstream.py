"""The AWS event-stream framing (`application/vnd.amazon.eventstream`), decoded incrementally.

Bedrock's `ConverseStream` and `InvokeModelWithResponseStream` answer in binary frames: a 12-byte
prelude (total length, headers length, prelude CRC32), headers, the payload and a CRC32 of the
whole message. Decoding is botocore's own `EventStreamBuffer` (its public `botocore.eventstream`
module: it checks both CRCs and refuses headers past 128 KiB); this module adds what the gateway
needs of every decoder (DESIGN.md section 4):
1. Bounded: bytes waiting for a frame to complete may not pass `max_frame_bytes`, so a frame that
   declares 20 MiB (botocore accepts payloads up to 24 MiB) ends the stream once the limit is
   passed, not when 20 MiB are held. Frames in one read are counted as well (`max_frames`).
2. Typed: a frame becomes `EventFrame` (event type, message type, exception type, payload bytes):
   the normalizers read only that, never botocore's classes.
3. Errors are `EventStreamError` (the framing seam's FrameLimitExceeded), whatever botocore raised: a bad CRC, a header
   type it does not know, a length out of range.
"""

from __future__ import annotations

from dataclasses import dataclass

from botocore.eventstream import EventStreamBuffer, ParserError

from app.providers.config import ReadLimits
from app.providers.framing import FrameLimitExceeded

__all__ = ["MAX_FRAME_BYTES", "EventFrame", "EventStreamDecoder", "EventStreamError"]

MAX_FRAME_BYTES = 1 << 20
MAX_FRAMES_PER_READ = 100_000


class EventStreamError(FrameLimitExceeded):
    """A frame that fails its checks, or one past the decoder's bounds (`upstream_protocol_error`)."""


@dataclass(slots=True, frozen=True, kw_only=True)
class EventFrame:
    """One decoded frame: `message_type` is `event`, `exception` or `error`."""

    event_type: str
    message_type: str
    payload: bytes
    exception_type: str | None = None
    error_code: str | None = None
    """`:error-code` of an `error` message (a failure the service reports outside the model's events)."""
    error_message: str | None = None
    raw: bytes = b""
    """The frame's bytes as sent (for a route that relays it), only when asked for."""


class EventStreamDecoder:
    """`feed(bytes) -> [EventFrame]` and `flush()` at the end of the body, no I/O (a FrameDecoder,
    app/providers/framing.py)."""

    __slots__ = ("_buffer", "_pending", "_max_frame", "_max_frames", "_keep_raw", "_raw")

    def __init__(self, *, max_frame_bytes: int = MAX_FRAME_BYTES, max_frames: int = MAX_FRAMES_PER_READ,
                 keep_raw: bool = False) -> None:
        self._buffer = EventStreamBuffer()
        self._pending = 0
        """Bytes fed that no decoded frame has consumed yet."""
        self._max_frame = max_frame_bytes
        self._max_frames = max_frames
        self._keep_raw = keep_raw
        self._raw = bytearray()

    @classmethod
    def bounded(cls, limits: ReadLimits, *, keep_raw: bool = False) -> EventStreamDecoder:
        """A decoder with the gateway's read limits: a frame's bytes `max_event_bytes`."""
        return cls(max_frame_bytes=limits.max_event_bytes, max_frames=limits.max_idle_lines, keep_raw=keep_raw)

    def feed(self, data: bytes) -> list[EventFrame]:
        if not data:
            return []
        self._buffer.add_data(data)
        self._pending += len(data)
        if self._keep_raw:
            self._raw += data
        frames: list[EventFrame] = []
        try:
            for message in self._buffer:
                size = message.prelude.total_length
                self._pending -= size
                frames.append(_frame(message.headers, message.payload, self._take_raw(size)))
                if len(frames) > self._max_frames:
                    raise EventStreamError(f"more than {self._max_frames} event-stream frames in one read")
        except ParserError as exc:
            raise EventStreamError(f"invalid event-stream frame: {type(exc).__name__}: {exc}") from None
        if self._pending > self._max_frame:
            raise EventStreamError(f"an event-stream frame past {self._max_frame} bytes")
        return frames

    def _take_raw(self, size: int) -> bytes:
        if not self._keep_raw:
            return b""
        raw = bytes(self._raw[:size])
        del self._raw[:size]
        return raw

    def encode(self, frame: EventFrame) -> bytes:
        """The frame as sent (kept only with `keep_raw`)."""
        return frame.raw

    def flush(self) -> list[EventFrame]:
        """The body ended: bytes of an unfinished frame are a truncated stream."""
        if self._pending:
            raise EventStreamError(f"the body ended inside an event-stream frame ({self._pending} bytes left)")
        return []


def _frame(headers: dict[str, object], payload: bytes, raw: bytes) -> EventFrame:
    def text(name: str) -> str | None:
        value = headers.get(name)
        return value if isinstance(value, str) else None

    return EventFrame(event_type=text(":event-type") or "", message_type=text(":message-type") or "event",
                      payload=payload, exception_type=text(":exception-type"), error_code=text(":error-code"),
                      error_message=text(":error-message"), raw=raw)

