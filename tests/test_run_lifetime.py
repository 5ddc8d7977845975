"""A run is one task, every response a reader of its log (DESIGN.md section 6), end to end: the
gateway under uvicorn on loopback in front of a fault-scripted OpenAI-compatible upstream on
loopback, for every entry point that streams (and the JSON answers).

- A client that leaves before the first token (the upstream still thinking) or mid-stream
  cancels the run: the upstream sees its connection closed within a second.
- `on_disconnect: "continue"` lets the run go on without its reader.
- `POST /v1/stream/{id}/cancel` ends a facade's streaming run like any other: one `cancelled` final.
The waits bounded at one or two seconds are the contract's (DESIGN.md section 6), not performance.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from typing import Any

import httpx
import pytest

from app.main import create_app
from app.settings import CompatibleProvider, Settings
from tests.support import parse_sse, serve
from tests.upstream_fakes import Fault, FaultServer

HELLO = [{"role": "user", "content": "Hello"}]
GUARD = 15.0  # the test's own deadline for what is not the contract, generous on a loaded machine

STREAMING = {
    "stream": ("/v1/stream", {}),
    "chat": ("/v1/chat/completions", {"stream": True}),
    "messages": ("/v1/messages", {"stream": True, "max_tokens": 64}),
}
JSON_ANSWERS = {
    "generate": ("/v1/generate", {}),
    "chat-json": ("/v1/chat/completions", {}),
    "messages-json": ("/v1/messages", {"max_tokens": 64}),
}


class Answered:
    """The gateway wrapped (ASGI): `done` is set when its handler of an HTTP request has returned,
    that is, once the gateway has seen the answer through or its client gone."""

    def __init__(self, app: Any) -> None:
        self.app = app
        self.done = asyncio.Event()

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        try:
            await self.app(scope, receive, send)
        finally:
            if scope["type"] == "http":
                self.done.set()


@contextlib.asynccontextmanager
async def gateway(*faults: Fault, answered: Answered | None = None) -> AsyncIterator[tuple[FaultServer, httpx.AsyncClient]]:
    server = FaultServer({"m": list(faults)})
    async with serve(server) as upstream:
        settings = Settings(openai_api_key=None, providers=[CompatibleProvider(name="up", base_url=f"{upstream}/v1")])
        app = create_app(settings)
        if answered is not None:
            answered.app = app
        async with serve(answered or app) as url, httpx.AsyncClient(base_url=url, timeout=GUARD) as client:
            yield server, client


def body(extra: dict[str, Any], **more: Any) -> dict[str, Any]:
    return {"model": "up/m", "messages": HELLO, **extra, **more}


async def until_text(lines: AsyncIterator[str], text: str) -> None:
    """Read a streamed answer (in any entry point's format) until `text` has arrived."""
    async for line in lines:
        if text in line:
            return
    raise AssertionError(f"the stream ended before {text!r}")


async def upstream_let_go(server: FaultServer) -> None:
    """The upstream saw its request closed by the gateway within a second (DESIGN.md section 6)."""
    served = server.served[0]
    await asyncio.wait_for(served.done.wait(), 1.0)
    assert served.gone


@pytest.mark.parametrize("entry", [*STREAMING, *JSON_ANSWERS])
async def test_a_client_leaving_before_the_first_token_closes_the_upstream(entry: str) -> None:
    path, extra = {**STREAMING, **JSON_ANSWERS}[entry]
    async with gateway(Fault("stall")) as (server, client):
        posting = asyncio.ensure_future(client.post(path, json=body(extra)))
        await asyncio.wait_for(server.arrived.wait(), GUARD)  # the upstream has the request and thinks
        posting.cancel()  # the client goes away before anything was answered
        with contextlib.suppress(asyncio.CancelledError):
            await posting
        await upstream_let_go(server)


@pytest.mark.parametrize("entry", list(STREAMING))
async def test_a_client_leaving_mid_stream_closes_the_upstream(entry: str) -> None:
    path, extra = STREAMING[entry]
    async with gateway(Fault("held", text="Hello")) as (server, client):
        async with client.stream("POST", path, json=body(extra)) as response:
            assert response.status_code == 200
            await asyncio.wait_for(until_text(response.aiter_lines(), "Hello"), GUARD)
        await upstream_let_go(server)


async def test_on_disconnect_continue_lets_the_run_go_on_without_its_reader() -> None:
    answered = Answered(None)
    async with gateway(Fault("held", text="Hello"), answered=answered) as (server, client):
        async with client.stream("POST", "/v1/stream", json=body({}, on_disconnect="continue")) as response:
            sid = response.headers["x-stream-id"]
            await asyncio.wait_for(until_text(response.aiter_lines(), "Hello"), GUARD)
        # The gateway has seen its client go (a reader-driven run is cancelled by then); only then
        # may the upstream finish: a cancelled run would end `cancelled`, not with the whole answer.
        await asyncio.wait_for(answered.done.wait(), GUARD)
        assert not server.served[0].done.is_set()
        server.release.set()
        events = parse_sse((await client.get(f"/v1/stream/{sid}")).content)
        final = events[-1][2]
        assert final["status"] == "ok" and final["message"]["content"] == "Hello and done."


@pytest.mark.parametrize("entry", ["chat", "messages"])
async def test_cancel_ends_a_streaming_facade_run_with_one_cancelled_final(entry: str) -> None:
    path, extra = STREAMING[entry]
    async with gateway(Fault("held", text="Hello")) as (server, client):
        async with client.stream("POST", path, json=body(extra)) as response:
            sid = response.headers["x-stream-id"]
            lines = response.aiter_lines()
            await asyncio.wait_for(until_text(lines, "Hello"), GUARD)
            cancel = await asyncio.wait_for(client.post(f"/v1/stream/{sid}/cancel"), 2.0)
            assert cancel.status_code == 200 and cancel.json() == {"stream_id": sid, "status": "cancelled"}
            async with asyncio.timeout(2.0):  # the facade's own client sees its stream end
                rest = [line async for line in lines]
        assert "and done" not in "\n".join(rest)
        await upstream_let_go(server)
        events = parse_sse((await client.get(f"/v1/stream/{sid}")).content)
        assert [e for _, e, _ in events].count("final") == 1 and events[-1][1] == "final"
        final = events[-1][2]
        assert final["status"] == "cancelled" and final["error"]["code"] == "cancelled"
        assert "POST /v1/stream/{id}/cancel" in final["error"]["message"]
        assert final["message"]["content"] == "Hello"


async def test_a_json_answer_whose_client_stays_is_unchanged() -> None:
    async with gateway(Fault("ok", text="Hi there")) as (_, client):
        response = await client.post("/v1/generate", json=body({}))
        assert response.status_code == 200 and response.json()["message"]["content"] == "Hi there"
        chat = await client.post("/v1/chat/completions", json=body({}))
        assert chat.status_code == 200 and chat.json()["choices"][0]["message"]["content"] == "Hi there"
