"""A stream's last frames end its body: the send that carries the final is `more_body: False`
(`LastFrames`, app/api/sse.py point 5), so the final and the end of the chunked body go out in one
write, where a separate empty end took a second one on every stream.

Each answer's body messages are noted as the server gets them (each one is one write). Every path
that reads a run to its end is checked: the native stream, its replay by id, a translating facade,
a same-wire relay; and a client reading through HTTP still gets every frame.
"""

from __future__ import annotations

from typing import Any

import httpx
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from app.main import create_app
from app.settings import Settings
from tests.compat_support import settings_for
from tests.support import FIXTURES, parse_sse, serving

ASK = {"model": "mock/lorem-20", "messages": [{"role": "user", "content": "Hi"}]}


def _noting(app: Any, sends: list[tuple[bytes, bool]]) -> Any:
    """The app, every response body message it sends noted as (body, more_body)."""

    async def noted(scope: Any, receive: Any, send: Any) -> None:
        async def note(message: Any) -> None:
            if message["type"] == "http.response.body":
                sends.append((message.get("body", b""), message.get("more_body", False)))
            await send(message)

        await app(scope, receive, note)

    return noted


def _ends_with_the_final(sends: list[tuple[bytes, bool]], final: bytes) -> None:
    """One send ends the body, the last one, and it holds the final: no empty end after it."""
    assert [more for _, more in sends].count(False) == 1, sends
    body, more = sends[-1]
    assert not more and final in body, sends[-1]


async def test_the_native_stream_ends_its_body_with_the_send_that_holds_its_final():
    sends: list[tuple[bytes, bool]] = []
    app = _noting(create_app(Settings(records=False)), sends)
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://gw", timeout=15.0) as c:
        response = await c.post("/v1/stream", json=ASK)
        assert response.status_code == 200
        _ends_with_the_final(sends, b"event: final")
        events = parse_sse(response.text)
        assert [e[1] for e in events].count("final") == 1 and events[-1][2]["status"] == "ok"
        assert "".join(e[2]["content"] for e in events if e[1] == "token") == events[-1][2]["message"]["content"]

        sends.clear()  # its replay by id, from the start: the same frames, the same one end
        replay = await c.get(f"/v1/stream/{response.headers['x-stream-id']}?after=0")
        assert replay.status_code == 200 and parse_sse(replay.text) == events
        _ends_with_the_final(sends, b"event: final")


async def test_a_translating_facade_ends_its_body_with_its_last_chunk():
    sends: list[tuple[bytes, bool]] = []
    app = _noting(create_app(Settings(records=False)), sends)
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://gw", timeout=15.0) as c:
        response = await c.post("/v1/chat/completions", json={**ASK, "stream": True})
    assert response.status_code == 200 and response.text.rstrip().endswith("data: [DONE]")
    _ends_with_the_final(sends, b"data: [DONE]")


async def test_a_same_wire_relay_that_writes_its_own_end_sends_it_as_the_end_of_the_body():
    """A relay passes the provider's events on as they come, its `[DONE]` too: that one was sent
    before the run ended, and its body ends apart. When the gateway writes the end itself (here the
    provider hung up after two events: the relay closes the stream with the error), that end is
    the body's last send."""
    recording = (FIXTURES / "openai-chat" / "text-include-usage.sse").read_bytes()
    cut = b"\n\n".join(recording.split(b"\n\n")[:2]) + b"\n\n"  # two events, then the provider is gone

    async def hang_up(request: Request) -> Response:
        return Response(cut, media_type="text/event-stream")

    sends: list[tuple[bytes, bool]] = []
    async with serving() as servers:
        up = await servers.add(Starlette(routes=[Route("/v1/chat/completions", hang_up, methods=["POST"])]))
        gateway = await servers.add(_noting(create_app(settings_for(up, records=False)), sends))
        async with httpx.AsyncClient(base_url=gateway, timeout=15.0) as c:
            response = await c.post("/v1/chat/completions", json={**ASK, "model": "openai/gpt-4o", "stream": True})
    assert response.status_code == 200
    _ends_with_the_final(sends, b"data: [DONE]")
