"""Gemini's streamed request on the wire (app/providers/gemini.py): one send path (`HttpAdapter`,
app/providers/upstream.py) on the session the adapter makes itself and on an injected
`aiohttp.ClientSession`.

On loopback servers that keep what they receive, both send the same bytes for every model
(method, path and query, headers, body), map error answers to the same gateway error, follow no
redirect (the key would go with it), and send URL credentials as the client sends them.
"""

from __future__ import annotations

from typing import Any

import aiohttp
import pytest
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import RedirectResponse, Response
from starlette.routing import Route

from app.core.errors import GatewayError
from app.core.messages import Message
from app.providers.base import ProviderAdapter, ProviderRequest
from app.providers.config import ReadLimits
from tests.support import recordings, serve
from tests.test_transport import RawUpstream, writes
from tests.upstream_fakes import FakeUpstream, http_adapter

KEY = "gm-wire-test-key-0000000000"
TEXT = next(r for r in recordings("gemini") if r.name == "text")
STREAM = ":streamGenerateContent?alt=sse"


def recorder() -> RawUpstream:
    """A loopback HTTP/1.1 server keeping each request's bytes as received (`received`: head and
    body) and answering every one with the recorded Gemini text stream."""
    return RawUpstream(writes(b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ncontent-length: %d\r\n\r\n"
                              % len(TEXT.body) + TEXT.body))


def adapters(base: str, session: aiohttp.ClientSession) -> tuple[ProviderAdapter, ProviderAdapter]:
    """(on the session the adapter makes itself, on the injected `session`)."""
    values = {"gemini_api_key": KEY, "gemini_base_url": base}
    return http_adapter("gemini", base, values=values), http_adapter("gemini", base, values=values, session=session)


def same_request(a: bytes, b: bytes) -> bool:
    """The same request line, body and gateway headers (whatever else a session adds)."""
    def parts(raw: bytes) -> tuple[bytes, set[bytes], bytes]:
        head, _, body = raw.partition(b"\r\n\r\n")
        line, *fields = head.split(b"\r\n")
        keep = (b"content-type", b"x-goog-api-key", b"authorization", b"content-length")
        return line, {f.lower() for f in fields if f.split(b":")[0].lower() in keep}, body
    return parts(a) == parts(b)


def ask(model: str) -> ProviderRequest:
    return ProviderRequest(model=model, messages=(Message(role="system", content="be brief"),
                                                  Message(role="user", content="héllo ✓")), max_tokens=64)


async def run(adapter: ProviderAdapter, model: str) -> None:
    stream = await adapter.open_stream(ask(model))
    async for _ in stream:
        pass
    await stream.aclose()


async def test_the_wire_sends_the_clients_request_for_each_model() -> None:
    upstream = recorder()
    models = ("gemini-2.5-flash", "models/gemini-3-pro-preview", "gemini-2.5-flash")  # the first one again: cached
    async with upstream.running(path="") as base, aiohttp.ClientSession() as session:
        wired, sent = adapters(base, session)
        try:
            for model in models:
                await run(wired, model)
                await run(sent, model)
        finally:
            await wired.aclose()
            await sent.aclose()
    assert len(upstream.received) == 6
    for model, on_wire, through_send in zip(models, upstream.received[::2], upstream.received[1::2], strict=True):
        assert same_request(on_wire, through_send)  # request line, the gateway's headers, body
        line = b"POST /v1beta/models/%s%s HTTP/1.1\r\n" % (model.removeprefix("models/").encode(), STREAM.encode())
        assert on_wire.startswith(line)
        assert b'"contents":[{"role":"user","parts":[{"text":"h\xc3\xa9llo \xe2\x9c\x93"}]}]' in on_wire
        assert on_wire.count(KEY.encode()) == 1 and b"\r\nx-goog-api-key: " + KEY.encode() + b"\r\n" in on_wire


_BAD_KEY = {"error": {"code": 400, "message": f"API key not valid: {KEY}", "status": "INVALID_ARGUMENT",
                      "details": [{"@type": "type.googleapis.com/google.rpc.ErrorInfo", "reason": "API_KEY_INVALID"}]}}
_QUOTA = {"error": {"code": 429, "message": "quota", "status": "RESOURCE_EXHAUSTED", "details": [
    {"@type": "type.googleapis.com/google.rpc.RetryInfo", "retryDelay": "30s"}]}}


@pytest.mark.parametrize(("status", "body", "headers", "code"), [
    (429, _QUOTA, {"retry-after": "7"}, "rate_limited"),
    (429, _QUOTA, {}, "rate_limited"),
    (400, _BAD_KEY, {}, "upstream_auth"),
    (400, {"error": {"code": 400, "message": "bad field", "status": "INVALID_ARGUMENT"}}, {}, "upstream_bad_request"),
    (503, {"error": {"code": 503, "message": "overloaded", "status": "UNAVAILABLE"}}, {}, "upstream_error"),
])
async def test_an_error_answer_maps_the_same_on_own_and_injected_sessions(status: int, body: dict[str, Any],
                                                                          headers: dict[str, str], code: str) -> None:
    fake = FakeUpstream("/v1beta/models/{target}", [(status, body, headers)] * 2)
    errors: list[GatewayError] = []
    async with serve(fake.app()) as url, aiohttp.ClientSession() as session:
        wired, sent = adapters(url, session)
        try:
            for adapter in (wired, sent):
                with pytest.raises(GatewayError) as caught:
                    await run(adapter, "gemini-2.5-flash")
                errors.append(caught.value)
        finally:
            await wired.aclose()
            await sent.aclose()
    on_wire, through_send = errors
    assert type(on_wire) is type(through_send) and on_wire.to_dict() == through_send.to_dict()
    answer = on_wire.to_dict()
    assert answer["upstream_status"] == status and answer["code"] == code
    if status == 429:
        assert answer["retry_after"] == headers.get("retry-after", "30")
    assert KEY not in str(answer)
    assert [r.url for r in fake.requests] == [f"/v1beta/models/gemini-2.5-flash{STREAM}"] * 2


async def test_a_redirect_is_not_followed_even_on_the_same_origin() -> None:
    target = FakeUpstream("/v1beta/models/{target}", [TEXT.body])
    moved: list[str] = []

    async def redirect(request: Request) -> Response:
        moved.append(request.url.path)
        return RedirectResponse(f"/v1beta/models/{request.path_params['target']}?{request.url.query}", status_code=307)

    app = Starlette(routes=[Route("/old/models/{target}", redirect, methods=["POST"]),
                            Route(target.path, target.handle, methods=["POST"])])
    async with serve(app) as url, aiohttp.ClientSession() as session:
        wired, sent = adapters(f"{url}/old", session)
        try:
            for adapter in (wired, sent):
                with pytest.raises(GatewayError) as caught:
                    await run(adapter, "gemini-2.5-flash")
                assert caught.value.status == 502 and caught.value.code == "upstream_redirect"
        finally:
            await wired.aclose()
            await sent.aclose()
    assert moved == [f"/old/models/gemini-2.5-flash{STREAM.split('?')[0]}"] * 2
    assert target.requests == []  # neither the body nor the key went along


async def test_credentials_in_the_base_url_are_sent_as_basic_auth() -> None:
    upstream = recorder()
    async with upstream.running(path="") as base, aiohttp.ClientSession() as session:
        wired, sent = adapters(base.replace("http://", "http://user:pw@"), session)
        try:
            await run(wired, "gemini-2.5-flash")
            await run(sent, "gemini-2.5-flash")
        finally:
            await wired.aclose()
            await sent.aclose()
    on_wire, through_send = upstream.received
    assert same_request(on_wire, through_send) and b"\r\nauthorization: basic dxnlcjpwdw==\r\n" in on_wire.lower()
    assert b"user:pw" not in on_wire


async def test_an_endless_error_body_is_read_only_in_part() -> None:
    # An error answer whose body never ends: the adapter reads a bounded part (the cap, here 64 KiB
    # of the 128 KiB sent) and answers with it, rather than waiting out the read timeout holding
    # whatever arrives.
    async def endless(reader: Any, writer: Any) -> None:
        writer.write(b"HTTP/1.1 500 Internal Server Error\r\ncontent-type: application/json\r\n"
                     b"transfer-encoding: chunked\r\n\r\n")
        for _ in range(16):
            writer.write(b"2000\r\n" + b"x" * 8192 + b"\r\n")
        await writer.drain()
        await reader.read()  # until the gateway lets go

    upstream = RawUpstream(endless)
    async with upstream.running(path="") as base:
        adapter = http_adapter("gemini", base, values={"gemini_api_key": KEY, "gemini_base_url": base}, read_timeout=30,
                               limits=ReadLimits(max_body_bytes=1 << 16))
        try:
            with pytest.raises(GatewayError) as caught:
                await run(adapter, "gemini-2.5-flash")
        finally:
            await adapter.aclose()
    assert caught.value.status == 502 and caught.value.to_dict()["upstream_status"] == 500
