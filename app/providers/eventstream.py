"""The AWS event-stream framing (`application/vnd.amazon.eventstream`), decoded incrementally.

Bedrock's `ConverseStream` and `InvokeModelWithResponseStream` answer in binary frames
(https://docs.aws.amazon.com/transcribe/latest/dg/streaming-setting-up.html#streaming-event-stream):
a 12-byte prelude (total length, headers length, the prelude's CRC32), typed headers, the payload
and a CRC32 of the whole message. This decoder is written here, on `struct` and `binascii.crc32`,
rather than botocore's `EventStreamBuffer`, for one measured reason: botocore parses each header
through several Python calls per field and copies its whole buffer after each message, several
times this decoder's CPU per Bedrock delta frame (bench/eventstream_decode.py, against the SSE
decoder on the same frames). botocore's decoder stays the reference: the tests decode every recording and random frames with
both and compare. What the gateway needs of every decoder (DESIGN.md section 4):
1. Both CRCs checked; a header of an unknown type, a length out of range (headers past 128 KiB,
   botocore's bound) or a frame past `max_frame_bytes` (checked from the prelude, before the frame
   is held) is an `EventStreamError`, which ends the stream with `upstream_protocol_error`.
2. Bounded reads: at most `max_frames` frames in one read; the unfinished frame is kept in one
   `bytearray`, consumed by offset (no copy of the rest per frame). A stream repeats a few header
   blocks, so up to 64 distinct ones are kept parsed.
3. Typed: a frame becomes `EventFrame` (event type, message type, exception type, payload bytes).
"""

from __future__ import annotations

import binascii
import struct
from dataclasses import dataclass

from app.providers.config import ReadLimits
from app.providers.framing import FrameLimitExceeded

__all__ = ["MAX_FRAME_BYTES", "EventFrame", "EventStreamDecoder", "EventStreamError"]

MAX_FRAME_BYTES = 1 << 20
MAX_FRAMES_PER_READ = 100_000


class EventStreamError(FrameLimitExceeded):
    """A frame that fails its checks, or one past the decoder's bounds (`upstream_protocol_error`)."""


@dataclass(slots=True, kw_only=True)
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


_PRELUDE = struct.Struct("!III")
_CRC = struct.Struct("!I")
MAX_HEADERS_BYTES = 128 * 1024
_FIXED = {0: 0, 1: 0, 2: 1, 3: 2, 4: 4, 5: 8, 8: 8, 9: 16}
"""Header value types of a fixed size (bool true/false, byte, short, int, long, timestamp, uuid)."""


class EventStreamDecoder:
    """`feed(bytes) -> [EventFrame]` and `flush()` at the end of the body, no I/O (a FrameDecoder,
    app/providers/framing.py)."""

    __slots__ = ("_buf", "_max_frame", "_max_frames", "_keep_raw", "_known")

    def __init__(self, *, max_frame_bytes: int = MAX_FRAME_BYTES, max_frames: int = MAX_FRAMES_PER_READ,
                 keep_raw: bool = False) -> None:
        self._buf = bytearray()
        self._max_frame = max_frame_bytes
        self._max_frames = max_frames
        self._keep_raw = keep_raw
        self._known: dict[bytes, dict[str, str]] = {}
        """Header blocks seen, parsed: a stream repeats a handful (`:event-type contentBlockDelta`, ...)."""

    @classmethod
    def bounded(cls, limits: ReadLimits, *, keep_raw: bool = False) -> EventStreamDecoder:
        """A decoder with the gateway's read limits: a frame's bytes `max_event_bytes`."""
        return cls(max_frame_bytes=limits.max_event_bytes, max_frames=limits.max_idle_lines, keep_raw=keep_raw)

    def feed(self, data: bytes) -> list[EventFrame]:
        buf = self._buf
        buf += data
        frames: list[EventFrame] = []
        view = memoryview(buf)
        at, size = 0, len(buf)
        try:
            while size - at >= 12:
                total, head, crc = _PRELUDE.unpack_from(view, at)
                if binascii.crc32(view[at:at + 8]) != crc:
                    raise EventStreamError("invalid event-stream frame: the prelude's CRC does not match")
                if total > self._max_frame or head > MAX_HEADERS_BYTES or head + 16 > total:
                    raise EventStreamError(f"an event-stream frame of {total} bytes ({head} of headers) is past "
                                           f"the bounds ({self._max_frame} bytes)")
                if size - at < total:
                    break
                end = at + total
                if binascii.crc32(view[at + 8:end - 4], crc) != _CRC.unpack_from(view, end - 4)[0]:
                    raise EventStreamError("invalid event-stream frame: the message CRC does not match")
                block = bytes(view[at + 12:at + 12 + head])
                headers = self._known.get(block)
                if headers is None:
                    headers = _headers(block)
                    if len(self._known) < 64:
                        self._known[block] = headers
                get = headers.get
                frames.append(EventFrame(event_type=get(":event-type", ""), message_type=get(":message-type", "event"),
                                         payload=bytes(view[at + 12 + head:end - 4]),
                                         exception_type=get(":exception-type"), error_code=get(":error-code"),
                                         error_message=get(":error-message"),
                                         raw=bytes(view[at:end]) if self._keep_raw else b""))
                at = end
                if len(frames) > self._max_frames:
                    raise EventStreamError(f"more than {self._max_frames} event-stream frames in one read")
        finally:
            view.release()
        if at:
            del buf[:at]
        return frames

    def encode(self, frame: EventFrame) -> bytes:
        """The frame as sent (kept only with `keep_raw`)."""
        return frame.raw

    def flush(self) -> list[EventFrame]:
        """The body ended: bytes of an unfinished frame are a truncated stream."""
        if self._buf:
            raise EventStreamError(f"the body ended inside an event-stream frame ({len(self._buf)} bytes left)")
        return []


def _headers(raw: bytes) -> dict[str, str]:
    """The string headers (type 7) of one frame; values of the other types are skipped."""
    out: dict[str, str] = {}
    at, size = 0, len(raw)
    try:
        while at < size:
            end = at + 1 + raw[at]
            name = raw[at + 1:end].decode()
            kind = raw[end]
            at = end + 1
            if kind == 7 or kind == 6:
                end = at + 2 + ((raw[at] << 8) | raw[at + 1])
                if kind == 7:
                    out[name] = raw[at + 2:end].decode()
                at = end
            elif kind in _FIXED:
                at += _FIXED[kind]
            else:
                raise EventStreamError(f"invalid event-stream frame: header {name[:40]!r} has unknown type {kind}")
    except (IndexError, UnicodeDecodeError):
        raise EventStreamError("invalid event-stream frame: its headers are cut short or not UTF-8") from None
    if at != size:
        raise EventStreamError("invalid event-stream frame: its headers overrun their length")
    return out
