"""The one incremental SSE byte parser every provider shares.

Bytes may be split anywhere, inside a line or inside a UTF-8 character: the same bytes give
the same events. Lines end in LF, CRLF or a lone CR (a CR at the end of a chunk is held until
the next chunk says whether an LF follows). UTF-8 is decoded per whole line. Field handling
follows the WHATWG event-stream interpretation: a blank line dispatches, `:` lines are
comments, `data` lines join with LF, unknown fields are ignored. Two divergences, on purpose:
1. `flush()` at the end of the body dispatches a last event that lacks its blank line
   (several servers omit it); the provider's own completion check still catches truncation.
2. Undecodable bytes are replaced (U+FFFD), never fatal: the JSON parse reports them.
"""

from __future__ import annotations

from typing import NamedTuple

__all__ = ["SSEDecoder", "SSEEvent"]


class SSEEvent(NamedTuple):
    """One dispatched event (a NamedTuple: built once per upstream event, on the hot path)."""

    event: str
    data: str
    id: str | None = None


class SSEDecoder:
    __slots__ = ("_buf", "_event", "_data", "_id", "comments")

    def __init__(self) -> None:
        self._buf = b""
        self._event = ""
        self._data: list[str] = []
        self._id: str | None = None
        self.comments = 0

    def feed(self, chunk: bytes) -> list[SSEEvent]:
        """Consume bytes; return the events completed by them."""
        buf = self._buf + chunk if self._buf else chunk
        tail = b""
        if b"\r" in buf:
            if buf.endswith(b"\r"):
                buf, tail = buf[:-1], b"\r"
            buf = buf.replace(b"\r\n", b"\n").replace(b"\r", b"\n")
        lines = buf.split(b"\n")
        self._buf = lines.pop() + tail
        out: list[SSEEvent] = []
        data = self._data
        for line in lines:
            if not line:  # dispatch
                if data:
                    out.append(SSEEvent(self._event or "message", "\n".join(data), self._id))
                    self._data = data = []
                self._event = ""
            elif line[:5] == b"data:":  # the common case, without the general field machine
                value = line[6:] if line[5:6] == b" " else line[5:]
                data.append(value.decode("utf-8", "replace"))
            else:
                self._line(line, out)
        return out

    def flush(self) -> list[SSEEvent]:
        """End of body: the last unterminated line and event, if any."""
        out: list[SSEEvent] = []
        if self._buf:
            rest, self._buf = self._buf.rstrip(b"\r"), b""
            self._line(rest, out)
        self._line(b"", out)
        return out

    def _line(self, raw: bytes, out: list[SSEEvent]) -> None:
        if not raw:
            if self._data:
                out.append(SSEEvent(self._event or "message", "\n".join(self._data), self._id))
                self._data = []
            self._event = ""
            return
        line = raw.decode("utf-8", "replace")
        if line[0] == ":":
            self.comments += 1
            return
        name, sep, value = line.partition(":")
        if sep and value[:1] == " ":
            value = value[1:]
        if name == "data":
            self._data.append(value)
        elif name == "event":
            self._event = value
        elif name == "id":
            if "\0" not in value:
                self._id = value
        # "retry" and unknown fields are ignored.
