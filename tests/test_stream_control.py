"""Cancel by id and the disconnect policy, with the in-memory store (one process)."""

import asyncio

import httpx

from app.core.patches import TextDelta
from app.main import create_app
from app.settings import Settings
from tests.fakes import FakeAdapter
from tests.support import parse_sse, serve

ASK = {"model": "fake/m", "messages": [{"role": "user", "content": "hi"}]}
BY_THE_API = {"code": "cancelled", "retryable": False,
              "message": "the run was cancelled through the API (POST /v1/stream/{id}/cancel)"}


def blocking_app():
    adapter = FakeAdapter([[TextDelta(text="first")]], block=True)  # a provider that never finishes
    return create_app(Settings(), adapters={"fake": adapter}), adapter


async def test_cancel_ends_a_streaming_run_with_one_cancelled_final_delivered_to_its_client():
    app, adapter = blocking_app()
    async with serve(app) as url, httpx.AsyncClient(base_url=url) as c:
        async with c.stream("POST", "/v1/stream", json=ASK) as r:
            stream_id = r.headers["x-stream-id"]
            raw = b""
            async for chunk in r.aiter_bytes():
                raw += chunk
                if b"event: token" in chunk:
                    cancelled = await c.post(f"/v1/stream/{stream_id}/cancel")
                    assert cancelled.status_code == 200
                    assert cancelled.json() == {"stream_id": stream_id, "status": "cancelled"}
            events = parse_sse(raw)
        assert [e for _, e, _ in events] == ["start", "token", "final"]
        assert [i for i, _, _ in events] == [1, 2, 3]
        assert events[-1][2]["status"] == "cancelled" and events[-1][2]["message"]["content"] == "first"
        assert events[-1][2]["error"] == BY_THE_API  # not "the client went away": the client is still here
        assert adapter.streams[0].closed.is_set()
        again = await c.post(f"/v1/stream/{stream_id}/cancel")  # finished: a no-op
        assert again.status_code == 200 and again.json()["status"] == "finished"


async def test_cancel_of_a_background_run_and_of_unknown_ids():
    app, adapter = blocking_app()
    async with serve(app) as url, httpx.AsyncClient(base_url=url) as c:
        accepted = (await c.post("/v1/generate", json={**ASK, "stream": True})).json()
        await adapter.streams[0].served_first.wait()
        r = await c.post(f"/v1/stream/{accepted['stream_id']}/cancel")
        assert r.json()["status"] == "cancelled"
        events = parse_sse((await c.get(accepted["stream_url"])).content)
        assert [e for _, e, _ in events] == ["start", "token", "final"] and events[-1][2]["status"] == "cancelled"
        assert events[-1][2]["error"] == BY_THE_API
        missing = await c.post("/v1/stream/str_nope/cancel")
        assert missing.status_code == 404 and missing.json()["error"]["code"] == "stream_not_found"


async def test_a_client_that_leaves_cancels_the_run_and_the_final_says_so():
    app, adapter = blocking_app()
    async with serve(app) as url, httpx.AsyncClient(base_url=url) as c:
        async with c.stream("POST", "/v1/stream", json=ASK) as r:
            stream_id = r.headers["x-stream-id"]
            async for chunk in r.aiter_bytes():
                if b"event: token" in chunk:
                    break  # the client leaves mid-stream
        final = await asyncio.wait_for(app.state.gateway.store.get(stream_id).wait_final(), timeout=10)
    assert final.status == "cancelled"
    assert final.error == {"code": "cancelled", "message": "the client went away", "retryable": False}


async def test_on_disconnect_continue_keeps_the_run_going_and_the_client_resumes_by_id():
    app = create_app(Settings())
    body = {"model": "mock/lorem-6", "messages": [{"role": "user", "content": "hi"}], "on_disconnect": "continue",
            "provider_options": {"delay_ms": 30}}
    async with serve(app) as url, httpx.AsyncClient(base_url=url) as c:
        async with c.stream("POST", "/v1/stream", json=body) as r:
            stream_id = r.headers["x-stream-id"]
            seen = b""
            async for chunk in r.aiter_bytes():
                seen += chunk
                if b"event: token" in seen:
                    break  # the client leaves mid-stream
        first = parse_sse(seen.rsplit(b"\n\n", 1)[0] + b"\n\n")
        log = app.state.gateway.store.get(stream_id)
        final = await asyncio.wait_for(log.wait_final(), timeout=10)
        assert final.status == "ok"  # the run went on to its end
        rest = parse_sse((await c.get(f"/v1/stream/{stream_id}",
                                      headers={"Last-Event-ID": str(first[-1][0])})).content)
        ids = [i for i, _, _ in first + rest]
        assert ids == list(range(1, 9)) and rest[-1][1] == "final"


async def test_on_disconnect_takes_two_values():
    async with serve(create_app(Settings())) as url, httpx.AsyncClient(base_url=url) as c:
        r = await c.post("/v1/stream", json={**ASK, "model": "mock/simple", "on_disconnect": "linger"})
        assert r.status_code == 422 and r.json()["error"]["field"] == "on_disconnect"
