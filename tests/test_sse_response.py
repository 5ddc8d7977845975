"""The SSE response: frames pass through, pings fill silence, dead clients end the run."""

import asyncio

from app.api.sse import SSEResponse


class Frames:
    """An async frame source that records whether it was closed."""

    def __init__(self, frames, *, then_wait: bool = False):
        self.frames = list(frames)
        self.then_wait = then_wait
        self.closed = asyncio.Event()

    def __aiter__(self):
        return self

    async def __anext__(self):
        if self.frames:
            return self.frames.pop(0)
        if self.then_wait:
            await asyncio.Event().wait()
        raise StopAsyncIteration

    async def aclose(self):
        self.closed.set()


async def never_disconnect():
    await asyncio.Event().wait()


async def call(response, receive, send):
    await asyncio.wait_for(response({"type": "http"}, receive, send), timeout=5)


async def test_frames_go_out_in_order_and_the_body_ends():
    sent = []

    async def send(message):
        sent.append(message)

    await call(SSEResponse(Frames([b"a", b"b"])), never_disconnect, send)
    assert sent[0]["type"] == "http.response.start" and sent[0]["status"] == 200
    headers = dict(sent[0]["headers"])
    assert headers[b"content-type"] == b"text/event-stream; charset=utf-8" and headers[b"cache-control"] == b"no-store"
    assert [m["body"] for m in sent[1:]] == [b"a", b"b", b""] and sent[-1]["more_body"] is False


async def test_silence_is_filled_with_ping_comments():
    sent = []
    pinged = asyncio.Event()

    async def send(message):
        sent.append(message)
        if message.get("body") == b": ping\n\n":
            pinged.set()

    frames = Frames([b"first"], then_wait=True)
    task = asyncio.create_task(SSEResponse(frames, ping_seconds=0.01)({"type": "http"}, never_disconnect, send))
    await asyncio.wait_for(pinged.wait(), timeout=5)
    task.cancel()
    assert sent[1]["body"] == b"first"


async def test_a_disconnect_cancels_the_frame_source_and_ends_quietly():
    disconnect = asyncio.Event()

    async def receive():
        await disconnect.wait()
        return {"type": "http.disconnect"}

    async def send(message):
        if message.get("body") == b"first":
            disconnect.set()

    frames = Frames([b"first"], then_wait=True)
    await call(SSEResponse(frames, ping_seconds=0.01), receive, send)
    assert frames.closed.is_set()


async def test_a_client_that_stops_reading_is_dropped_after_the_send_timeout():
    async def send(message):
        if message.get("body") == b"second":
            await asyncio.Event().wait()  # the client's window is full forever

    frames = Frames([b"first", b"second", b"third"])
    await call(SSEResponse(frames, ping_seconds=1, send_timeout=0.02), never_disconnect, send)
    assert frames.closed.is_set()


async def test_a_request_watches_its_client_with_one_task_from_the_runs_open_to_its_answers_end():
    """The wait for a run to open and the response that reads it share the request's one watcher of
    its client leaving (`RequestLog.watch_gone`), and it is gone when the answer ended, streamed or
    JSON."""
    import httpx

    from app.main import create_app
    from app.settings import Settings
    from tests.support import parse_sse, serve, tasks_started

    ask = {"model": "mock/lorem-5", "messages": [{"role": "user", "content": "hi"}]}
    app = create_app(Settings(records=False))
    async with serve(app) as url, httpx.AsyncClient(base_url=url, timeout=30) as client:
        with tasks_started() as started:
            def watchers() -> list:
                return [ref for name, ref in started if name == "disconnected"]

            streamed = await client.post("/v1/stream", json=ask)
            assert parse_sse(streamed.text)[-1][2]["status"] == "ok"
            assert len(watchers()) == 1
            answered = await client.post("/v1/generate", json=ask)
            assert answered.status_code == 200 and answered.json()["status"] == "ok"
            assert len(watchers()) == 2
            refused = await client.post("/v1/stream", json={**ask, "model": "nowhere/x"})
            assert refused.status_code == 404
            assert len(watchers()) == 2  # refused before any run: nothing to watch for
            await asyncio.sleep(0)  # a cancelled watcher ends at its next step
            assert all((task := ref()) is None or task.done() for ref in watchers())  # collected, or ended


async def test_an_answer_that_ended_waits_on_no_finished_task(monkeypatch):
    """Once every frame went out, the response returns without an `asyncio.wait` on its finished
    sender: such a wait costs a turn of the event loop (17.6 us measured on a slow machine), once
    a request."""
    waited_on_done: list[tuple] = []
    wait = asyncio.wait

    async def watching(fs, *args, **kwargs):
        if all(f.done() for f in fs):
            waited_on_done.append(tuple(fs))
        return await wait(fs, *args, **kwargs)

    monkeypatch.setattr(asyncio, "wait", watching)
    sent = []

    async def send(message):
        sent.append(message)

    await call(SSEResponse(Frames([b"a", b"b"])), never_disconnect, send)
    assert [m["body"] for m in sent[1:]] == [b"a", b"b", b""]
    assert waited_on_done == []
