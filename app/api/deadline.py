"""A deadline on receiving a request: its head and body must arrive within `request_timeout` seconds.

uvicorn bounds the idle time between two requests of a connection (`timeout_keep_alive`) but
not the time a request takes to arrive: a client that opens a connection and sends its head a
byte at a time (or a body it never finishes) holds the connection, its buffers and, once the
head is in, a task, for as long as it likes. No ASGI middleware can see a head that has not
arrived, so the deadline sits in the HTTP protocol: uvicorn's own (httptools) protocol class,
chosen through its documented `http=` option, with a timer armed when a connection opens or a
request starts and disarmed when the request's last byte is in. When it fires before the
response started, the client gets a 408 JSON error and the connection is closed (as nginx's
`client_header_timeout` / `client_body_timeout` do); the application sees the client gone.
"""

from __future__ import annotations

import asyncio
from typing import Any

from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol

__all__ = ["deadline_protocol"]

_BODY = b'{"error":{"code":"request_timeout","message":"the request did not arrive in time","retryable":true}}'
_TIMEOUT_ANSWER = (b"HTTP/1.1 408 Request Timeout\r\ncontent-type: application/json\r\n"
                   b"content-length: " + str(len(_BODY)).encode() + b"\r\nconnection: close\r\n\r\n" + _BODY)


class _DeadlineProtocol(HttpToolsProtocol):
    request_timeout: float = 30.0

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.request_deadline: asyncio.TimerHandle | None = None

    def _arm(self) -> None:
        if self.request_deadline is None:
            self.request_deadline = self.loop.call_later(self.request_timeout, self._request_too_slow)

    def _disarm(self) -> None:
        if self.request_deadline is not None:
            self.request_deadline.cancel()
            self.request_deadline = None

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(transport)
        self._arm()  # a connection that sends nothing at all is a request that never arrives

    def on_message_begin(self) -> None:
        super().on_message_begin()
        self._arm()

    def on_message_complete(self) -> None:
        self._disarm()
        super().on_message_complete()

    def connection_lost(self, exc: Exception | None) -> None:
        self._disarm()
        super().connection_lost(exc)

    def _request_too_slow(self) -> None:
        self.request_deadline = None
        if self.transport.is_closing():
            return
        cycle = self.cycle
        if cycle is None or not cycle.response_started:
            self.transport.write(_TIMEOUT_ANSWER)
        self.transport.close()


def deadline_protocol(request_timeout: float) -> type[asyncio.Protocol]:
    """uvicorn's `http=` protocol class with this deadline."""
    return type("DeadlineHttpToolsProtocol", (_DeadlineProtocol,), {"request_timeout": request_timeout})
