"""The one mapping of connection failures (app/providers/errors.py): each library's exception, as the
SDKs and the aiohttp transport chain them, to a timeout (504) or a connection failure (502)."""

from __future__ import annotations

import aiohttp
import anthropic
import httpx2
import openai
import pytest

from app.core.errors import UpstreamTimeout
from app.providers.errors import read_error, status_error, transport_error

_REQUEST = httpx2.Request("POST", "http://127.0.0.1:1/v1/chat/completions")


def chained(*links: BaseException) -> BaseException:
    """`links[0]` raised from `links[1]` raised from ... (outermost first), as `raise ... from` does."""
    for outer, inner in zip(links, links[1:], strict=False):
        outer.__cause__ = inner
    return links[0]


def _connector_error() -> aiohttp.ClientConnectorError:
    key = aiohttp.client_reqrep.ConnectionKey("127.0.0.1", 1, False, True, None, None, None, None)
    return aiohttp.ClientConnectorError(key, ConnectionRefusedError(111, "Connection refused"))


@pytest.mark.parametrize(("exc", "timeout"), [
    # aiohttp's refused connection, which its httpx2 transport calls a ConnectTimeout
    (lambda: chained(openai.APITimeoutError(request=_REQUEST), httpx2.ConnectTimeout("x"), _connector_error()), False),
    (lambda: chained(anthropic.APITimeoutError(request=_REQUEST), httpx2.ConnectTimeout("x"), _connector_error()),
     False),
    (lambda: chained(httpx2.ConnectTimeout("x"), aiohttp.ServerDisconnectedError()), False),
    (lambda: chained(httpx2.ConnectTimeout("x"), aiohttp.ConnectionTimeoutError("x")), True),
    (lambda: chained(httpx2.ReadTimeout("x"), aiohttp.SocketTimeoutError("x")), True),
    (lambda: chained(httpx2.ReadError("x"), aiohttp.ClientPayloadError("cut")), False),
    (lambda: aiohttp.ClientResponseError(None, (), status=400, message="bad head"), False),  # type: ignore[arg-type]
    (lambda: chained(openai.APIConnectionError(request=_REQUEST), httpx2.ConnectError("refused")), False),
    (lambda: chained(openai.APITimeoutError(request=_REQUEST), httpx2.ReadTimeout("x")), True),
    (lambda: httpx2.PoolTimeout("x"), True),
], ids=["openai-refused", "anthropic-refused", "hung-up", "connect-timeout", "read-timeout", "payload-cut",
        "bad-head", "httpx2-refused", "httpx2-silence", "pool"])
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
