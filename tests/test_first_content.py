"""A run's first content goes to its client before the run goes on (`StreamLog.hand_over`).

A run whose whole answer is already read (a short answer from a fast upstream, a cache hit) used to
build its final, its report and its record before its client got a byte: the run and the response
are two tasks, and the run kept the loop until it had no more to read. Now, once its first content
is in the log, the run gives the reader that holds the log a few loop turns to take it and send it.
The mock provider hands its whole answer over at once, as such an upstream does.
"""

from __future__ import annotations

import asyncio
from typing import Any

import httpx
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from app.cache.config import CacheRule
from app.core.events import StartEvent, token_event
from app.main import create_app
from app.settings import Settings
from app.streams.handover import HAND_OVER_TURNS
from tests.compat_support import settings_for
from tests.fakes import FakeAdapter, ok_script
from tests.support import FIXTURES, parse_sse, serving
from tests.test_stream_log import store

ASK = {"model": "mock/simple", "messages": [{"role": "user", "content": "Hi"}]}


def _recording(app: Any, bodies: list[bytes], order: list[str] | None = None) -> Any:
    """The app, every response body message it sends noted in order (each one is one write), and
    in `order` "body" for each and "report" when a run's report reaches the gateway's observers
    (the run has built its final and its record by then)."""
    if order is not None:
        app.state.gateway.add_observer(lambda report: order.append("report"))

    async def recorded(scope: Any, receive: Any, send: Any) -> None:
        async def note(message: Any) -> None:
            if message["type"] == "http.response.body" and message.get("body"):
                bodies.append(message["body"])
                if order is not None:
                    order.append("body")
            await send(message)

        await app(scope, receive, note)

    return recorded


async def _ask(path: str, payload: dict[str, Any]) -> tuple[httpx.Response, list[bytes], list[str]]:
    bodies: list[bytes] = []
    order: list[str] = []
    app = _recording(create_app(Settings(records=False)), bodies, order)
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://gw", timeout=15.0) as c:
        return await c.post(path, json=payload), bodies, order


async def test_the_first_send_of_a_stream_whose_answer_came_at_once_holds_its_first_token_not_its_final():
    response, bodies, order = await _ask("/v1/stream", ASK)
    assert response.status_code == 200
    assert b"event: token" in bodies[0] and b"event: final" not in bodies[0], bodies
    assert order[0] == "body" and "report" in order, order
    events = parse_sse(response.text)
    assert [e[1] for e in events].count("final") == 1 and events[-1][2]["status"] == "ok"
    assert events[-1][2]["message"]["content"] == "Hello, world"


async def test_a_facade_stream_sends_its_first_chunk_before_its_end_too():
    response, bodies, order = await _ask("/v1/chat/completions", {**ASK, "stream": True})
    assert response.status_code == 200
    assert b'"content":"Hello' in bodies[0] and b"[DONE]" not in bodies[0], bodies
    assert response.text.rstrip().endswith("data: [DONE]")
    assert order[0] == "body" and "report" in order, order


async def test_a_cache_hit_sends_its_first_token_before_its_final():
    bodies: list[bytes] = []
    adapter = FakeAdapter(ok_script("Hello", " there."))
    app = _recording(create_app(Settings(records=False, cache=[CacheRule(models="fake/*", ttl_seconds=60)]),
                                adapters={"fake": adapter}), bodies)
    ask = {**ASK, "model": "fake/m"}
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://gw", timeout=15.0) as c:
        await c.post("/v1/stream", json=ask)
        bodies.clear()
        hit = await c.post("/v1/stream", json=ask)
    assert hit.headers["x-foundry-cache"] == "hit"
    assert b"event: token" in bodies[0] and b"event: final" not in bodies[0], bodies
    assert parse_sse(hit.text)[-1][2]["message"]["content"] == "Hello there."


async def test_a_relayed_same_wire_stream_is_sent_before_its_run_ends():
    """A same-wire facade relays the provider's own events: the first read held them all, [DONE]
    too, and they reach the client before the run builds its final and its report."""
    recording = (FIXTURES / "openai-chat" / "text-include-usage.sse").read_bytes()

    async def whole(request: Request) -> Response:  # the whole answer in one write
        return Response(recording, media_type="text/event-stream")

    bodies: list[bytes] = []
    order: list[str] = []
    async with serving() as servers:
        up = await servers.add(Starlette(routes=[Route("/v1/chat/completions", whole, methods=["POST"])]))
        gateway = await servers.add(_recording(create_app(settings_for(up, records=False)), bodies, order))
        async with httpx.AsyncClient(base_url=gateway, timeout=15.0) as c:
            response = await c.post("/v1/chat/completions", json={**ASK, "model": "openai/gpt-4o", "stream": True})
    assert response.status_code == 200 and response.text.rstrip().endswith("data: [DONE]")
    assert b'"content":"' in bodies[0]
    assert order[0] == "body" and "report" in order, order


async def test_a_json_answer_is_unchanged():
    response, _, _ = await _ask("/v1/generate", ASK)
    assert response.status_code == 200 and response.json()["message"]["content"] == "Hello, world"


async def _turns_taken(log: Any) -> int:
    """How many loop turns `hand_over` took, counted by a task that counts turns beside it."""
    turns = 0
    done = False

    async def count() -> None:
        nonlocal turns
        while not done:
            turns += 1
            await asyncio.sleep(0)

    counter = asyncio.create_task(count())
    await asyncio.sleep(0)  # the counter is running
    turns = 0
    await log.hand_over()
    done = True
    await counter
    return turns


async def test_a_log_nobody_holds_hands_over_at_once_and_a_holder_that_never_comes_costs_a_few_turns():
    logs = store()
    free = logs.create_local(model="m", provider="p")
    free.append(StartEvent(stream_id=free.info.stream_id, model="m", provider="p"))
    free.append(token_event(0, "hi"))
    assert await _turns_taken(free) == 0

    held = logs.create_local(model="m", provider="p", held=True)  # its reader never starts
    held.append(StartEvent(stream_id=held.info.stream_id, model="m", provider="p"))
    held.append(token_event(0, "hi"))
    assert await asyncio.wait_for(_turns_taken(held), 5) == HAND_OVER_TURNS


async def test_a_holder_that_took_the_first_content_ends_the_hand_over():
    log = store().create_local(model="m", provider="p", held=True)
    log.append(StartEvent(stream_id=log.info.stream_id, model="m", provider="p"))
    log.append(token_event(0, "hi"))
    reader = log.follow(0, hold=True)
    first = asyncio.ensure_future(reader.__anext__())
    await log.hand_over()
    assert first.done() and b"event: token" in first.result()
    await reader.aclose()  # an async generator
