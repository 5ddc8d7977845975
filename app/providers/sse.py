"""The one incremental SSE byte parser every provider shares.

Bytes may be split anywhere, inside a line or inside a UTF-8 character: the same bytes give
the same events. Lines end in LF, CRLF or a lone CR (a CR ends its line at once; an LF that
starts the next chunk is then skipped). UTF-8 is decoded per whole line. Field handling
follows the WHATWG event-stream interpretation: a blank line dispatches, `:` lines are
comments, `data` lines join with LF, unknown fields are ignored. Three divergences, on purpose:
1. `flush()` at the end of the body dispatches a last event that lacks its blank line
   (several servers omit it); the provider's own completion check still catches truncation.
2. Undecodable bytes are replaced (U+FFFD), never fatal: the JSON parse reports them.
3. Bounded: a line longer than `max_line_bytes`, or an event whose data passes
   `max_event_bytes`, raises `SSELimitExceeded` (an upstream read is always bounded, DESIGN.md
   section 4). Only the chunk just read is searched for a line end and the unfinished line is
   kept in a `bytearray`, so a line that never ends costs time linear in its length. Lines that
   carry nothing (a blank line that dispatches no event, a comment) are counted too: more than
   `max_idle_lines` of them before an event, or in one read, raise `SSELimitExceeded` (a gzip of
   empty lines inflates to millions of them; keep-alives come one every few seconds).
"""

from __future__ import annotations

from typing import NamedTuple

from app.providers.config import ReadLimits
from app.providers.framing import FrameLimitExceeded

__all__ = ["MAX_EVENT_BYTES", "MAX_IDLE_LINES", "SSEDecoder", "SSEEvent", "SSELimitExceeded", "encode_event"]

MAX_EVENT_BYTES = 1 << 20
"""The default cap on one line and on one event's data (FOUNDRY_UPSTREAM_MAX_EVENT_BYTES)."""
MAX_IDLE_LINES = 10_000
"""The default cap on blank and comment lines before an event, and in one read
(FOUNDRY_UPSTREAM_MAX_IDLE_LINES)."""


class SSELimitExceeded(FrameLimitExceeded):
    """A line or an event past the decoder's cap."""


class SSEEvent(NamedTuple):
    """One dispatched event. The decoder builds it with `tuple.__new__` directly (`_event`): the
    NamedTuple's own `__new__` is a Python function, a frame per upstream event on the hot path."""

    event: str
    data: str
    id: str | None = None


_tuple_new = tuple.__new__


def _event(name: str, data: str, event_id: str | None) -> SSEEvent:
    return _tuple_new(SSEEvent, (name, data, event_id))


def encode_event(event: SSEEvent) -> bytes:
    """An SSE event encoded again as its provider sent it (one `data:` line per line of data)."""
    head = b"" if event.event == "message" else b"event: " + event.event.encode() + b"\n"
    data = event.data
    if "\n" not in data:  # one line, as nearly every provider event is
        return head + b"data: " + data.encode() + b"\n\n"
    return head + b"".join(b"data: " + line.encode() + b"\n" for line in data.split("\n")) + b"\n"


class SSEDecoder:
    """The SSE `FrameDecoder` (app/providers/framing.py)."""

    __slots__ = ("_buf", "_cr", "_event", "_data", "_size", "_id", "comments", "_max_line", "_max_event", "_idle",
                 "_max_idle")

    def __init__(self, *, max_line_bytes: int = MAX_EVENT_BYTES, max_event_bytes: int = MAX_EVENT_BYTES,
                 max_idle_lines: int = MAX_IDLE_LINES) -> None:
        self._buf = bytearray()
        """The unfinished line (no line end in it)."""
        self._cr = False
        """The last chunk ended in CR: an LF starting the next one belongs to it."""
        self._event = ""
        self._data: list[str] = []
        self._size = 0
        """Bytes of `data` lines in the current event."""
        self._id: str | None = None
        self.comments = 0
        self._max_line = max_line_bytes
        self._max_event = max_event_bytes
        self._idle = 0
        """Blank and comment lines since the last event."""
        self._max_idle = max_idle_lines

    @classmethod
    def bounded(cls, limits: ReadLimits) -> SSEDecoder:
        """A decoder with the gateway's read limits (a line and an event's data: `max_event_bytes`)."""
        return cls(max_line_bytes=limits.max_event_bytes, max_event_bytes=limits.max_event_bytes,
                   max_idle_lines=limits.max_idle_lines)

    encode = staticmethod(encode_event)

    def feed(self, chunk: bytes) -> list[SSEEvent]:
        """Consume bytes; return the events completed by them."""
        lines = self._lines(chunk)
        if not lines:
            return []
        out: list[SSEEvent] = []
        data = self._data
        size = self._size  # kept in locals on the hot path; _line() sees them through self
        max_line, max_event = self._max_line, self._max_event
        idle_in_read = 0
        for line in lines:
            if not line:  # dispatch
                if data:
                    if size > max_event:
                        raise SSELimitExceeded(f"an event's data passed {max_event} bytes")
                    out.append(_tuple_new(SSEEvent, (self._event or "message", "\n".join(data), self._id)))
                    self._data = data = []
                    size = 0
                    self._idle = 0
                else:
                    idle_in_read += 1
                    self._count_idle(idle_in_read)
                self._event = ""
            elif line[:5] == b"data:":  # the common case, without the general field machine
                value = line[6:] if line[5:6] == b" " else line[5:]
                if len(value) > max_line:
                    raise SSELimitExceeded(f"an event-stream line passed {max_line} bytes")
                size += len(value)
                data.append(value.decode("utf-8", "replace"))
            else:
                self._size = size
                if self._line(line, out):
                    idle_in_read += 1
                    self._count_idle(idle_in_read)
                data, size = self._data, self._size
        self._size = size
        if size > max_event:
            raise SSELimitExceeded(f"an event's data passed {max_event} bytes")
        return out

    def _lines(self, chunk: bytes) -> list[bytes]:
        """The lines `chunk` completes (the held unfinished one joined to its end); holds the rest."""
        if not chunk:
            return []
        if self._cr:
            self._cr = False
            if chunk[:1] == b"\n":
                chunk = chunk[1:]
        if b"\r" in chunk:
            self._cr = chunk.endswith(b"\r")
            chunk = chunk.replace(b"\r\n", b"\n").replace(b"\r", b"\n")
        lines = chunk.split(b"\n")
        rest = lines.pop()
        if lines and self._buf:
            lines[0] = bytes(self._buf + lines[0])
            self._buf = bytearray()
        if rest:
            self._hold(rest)
        return lines

    def flush(self) -> list[SSEEvent]:
        """End of body: the last unterminated line and event, if any."""
        out: list[SSEEvent] = []
        if self._buf:
            rest, self._buf = bytes(self._buf), bytearray()
            self._line(rest, out)
        self._line(b"", out)
        return out

    def _hold(self, part: bytes) -> None:
        self._buf += part
        if len(self._buf) > self._max_line:
            size = len(self._buf)
            self._buf = bytearray()
            raise SSELimitExceeded(f"an event-stream line passed {self._max_line} bytes ({size} so far)")

    def _count_idle(self, in_read: int) -> None:
        self._idle += 1
        if self._idle > self._max_idle or in_read > self._max_idle:
            raise SSELimitExceeded(f"more than {self._max_idle} blank or comment lines without an event")

    def _grow(self, size: int) -> None:
        self._size += size
        if self._size > self._max_event or size > self._max_line:
            raise SSELimitExceeded(f"an event's data passed {self._max_event} bytes")

    def _line(self, raw: bytes, out: list[SSEEvent]) -> bool:
        """Take one line; True when it carries nothing (a comment, an ignored field)."""
        if not raw:
            if self._data:
                out.append(_event(self._event or "message", "\n".join(self._data), self._id))
                self._data = []
                self._size = 0
                self._idle = 0
            self._event = ""
            return False
        if len(raw) > self._max_line:
            raise SSELimitExceeded(f"an event-stream line passed {self._max_line} bytes")
        if raw[:5] == b"data:":  # as in feed(): the value decoded once, no copies of the whole line
            data = raw[6:] if raw[5:6] == b" " else raw[5:]
            self._grow(len(data))
            self._data.append(data.decode("utf-8", "replace"))
            return False
        if raw[:1] == b":":
            self.comments += 1
            return True
        line = raw.decode("utf-8", "replace")
        name, sep, value = line.partition(":")
        if sep and value[:1] == " ":
            value = value[1:]
        if name == "data":
            self._grow(len(value))
            self._data.append(value)
        elif name == "event":
            self._event = value
        elif name == "id":
            if "\0" not in value:
                self._id = value
        else:  # "retry" and unknown fields are ignored: lines that carry nothing, like comments
            return True
        return False
