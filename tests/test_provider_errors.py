"""The one mapping of connection failures (app/providers/errors.py): the exceptions of the gateway's
own client (aiohttp's, asyncio's timeout), as aiohttp chains them, to a timeout (504) or a
connection failure (502)."""

from __future__ import annotations

import aiohttp
import pytest

from app.core.errors import UpstreamTimeout
from app.providers.errors import read_error, status_error, transport_error


def chained(*links: BaseException) -> BaseException:
    """`links[0]` raised from `links[1]` raised from ... (outermost first), as `raise ... from` does."""
    for outer, inner in zip(links, links[1:], strict=False):
        outer.__cause__ = inner
    return links[0]


def _connector_error() -> aiohttp.ClientConnectorError:
    key = aiohttp.client_reqrep.ConnectionKey("127.0.0.1", 1, False, True, None, None, None, None)
    return aiohttp.ClientConnectorError(key, ConnectionRefusedError(111, "Connection refused"))


@pytest.mark.parametrize(("exc", "timeout"), [
    (_connector_error, False),
    (lambda: aiohttp.ServerDisconnectedError(), False),
    (lambda: aiohttp.ConnectionTimeoutError("x"), True),
    (lambda: aiohttp.SocketTimeoutError("x"), True),
    (lambda: aiohttp.ClientPayloadError("cut"), False),
    (lambda: aiohttp.ClientResponseError(None, (), status=400, message="bad head"), False),  # type: ignore[arg-type]
    (lambda: TimeoutError(), True),
    # aiohttp's own error decides, whatever lies beneath it: a body cut while a timer ran is a cut
    (lambda: chained(aiohttp.ClientPayloadError("cut"), TimeoutError()), False),
    (lambda: chained(aiohttp.ClientOSError(104, "reset"), ConnectionResetError(104, "reset")), False),
], ids=["refused", "hung-up", "connect-timeout", "read-timeout", "payload-cut", "bad-head", "asyncio-timeout",
        "cut-over-a-timer", "reset"])
def test_a_connection_failure_is_a_timeout_only_when_it_was_one(exc, timeout: bool) -> None:
    before, during = transport_error(exc(), "p"), read_error(exc(), "p")
    assert isinstance(before, UpstreamTimeout) is timeout and isinstance(during, UpstreamTimeout) is timeout
    if timeout:
        assert before.status == during.status == 504
    else:
        assert before.status == during.status == 502
        assert before.code == "upstream_unavailable" and during.code == "upstream_disconnected"
        assert before.retryable and during.retryable


@pytest.mark.parametrize("status", [301, 302, 303, 307, 308])
def test_a_redirect_is_an_upstream_error_naming_its_status(status: int) -> None:
    error = status_error(status, "", provider="p")
    assert error.status == 502 and error.code == "upstream_redirect" and str(status) in str(error)
    assert not error.retryable
