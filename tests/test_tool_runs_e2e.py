"""Gateway tools under uvicorn on loopback: a client leaving during a tool run or a later step
cancels the run and closes the upstream; an HTTP tool served on loopback; the mock scenario."""

from __future__ import annotations

import asyncio

import httpx

from app.main import create_app
from app.settings import Settings
from app.tools.config import HttpToolConfig
from tests import test_tools
from tests.support import HANG_GUARD, parse_sse, serve
from tests.test_tool_runs import ADD, ASK, StepAdapter, answer_step, calls_step, tool


async def leave_after(client: httpx.AsyncClient, body: dict, marker: str, *, then: asyncio.Event | None = None) -> str:
    """POST /v1/stream, read until a line containing `marker` (and `then` is set), then disconnect;
    the stream id."""
    async with client.stream("POST", "/v1/stream", json=body) as r:
        stream_id = r.headers["x-stream-id"]
        async for line in r.aiter_lines():
            if marker in line:
                break
        if then is not None:
            await asyncio.wait_for(then.wait(), timeout=HANG_GUARD)
    return stream_id


async def until_final(log) -> None:
    async for _ in log.follow(log.last_seq):
        pass


async def test_leaving_during_a_tool_run_cancels_the_tool_and_the_run():
    test_tools.started.clear()
    test_tools.cancelled.clear()
    adapter = StepAdapter(calls_step(("c1", "wait", {"name": "w"})), answer_step("never"))
    app = create_app(Settings(tools=[tool("wait", "tests.test_tools:blocks", timeout=60)]), adapters={"fake": adapter})
    async with serve(app) as url, httpx.AsyncClient(base_url=url) as c:
        tool_started = test_tools.started.setdefault("w", asyncio.Event())
        stream_id = await leave_after(c, ASK, '"is_final":true', then=tool_started)  # leave while the tool runs
        log = app.state.gateway.store.get(stream_id)
        await asyncio.wait_for(until_final(log), timeout=HANG_GUARD)
        assert log.final.status == "cancelled" and log.final.steps == 1
        assert test_tools.cancelled == ["w"] and len(adapter.requests) == 1  # no further step
        assert adapter.streams[0].closed.is_set()
        metrics = (await c.get("/metrics")).text
        assert 'foundry_tool_executions_total{outcome="cancelled",tool="wait"} 1.0' in metrics
        assert "foundry_active_runs 0.0" in metrics
        transcript = (await c.get(f"/v1/stream/{stream_id}/transcript")).json()
        assert transcript["status"] == "cancelled" and transcript["tool_calls"][0]["state"] == "complete"


async def test_leaving_during_a_later_step_closes_that_steps_upstream():
    adapter = StepAdapter(calls_step(("c1", "add", {"a": 1, "b": 2})), answer_step("Three")[:1], blocking=frozenset({1}))
    app = create_app(Settings(tools=[ADD]), adapters={"fake": adapter})
    async with serve(app) as url, httpx.AsyncClient(base_url=url) as c:
        stream_id = await leave_after(c, ASK, 'data: {"index":0,"content":"Three"}')
        await asyncio.wait_for(adapter.streams[1].closed.wait(), timeout=HANG_GUARD)
        log = app.state.gateway.store.get(stream_id)
        await asyncio.wait_for(until_final(log), timeout=HANG_GUARD)
        final = log.final
        assert final.status == "cancelled" and final.steps == 2 and final.message.content == "Three"
        assert final.data()["messages"][1] == {"role": "tool", "content": "3", "tool_call_id": "c1", "name": "add"}


async def test_an_http_tool_on_loopback_answers_the_model():
    seen: list = []
    adapter = StepAdapter(calls_step(("c1", "weather", {"city": "Oslo"})), answer_step("Clear in Oslo"))
    async with serve(test_tools.tool_server(seen)) as tool_url:
        config = HttpToolConfig(name="weather", url=f"{tool_url}/weather", timeout=5,
                                parameters={"type": "object", "properties": {"city": {"type": "string"}},
                                            "required": ["city"]})
        app = create_app(Settings(tools=[config]), adapters={"fake": adapter})
        async with serve(app) as url, httpx.AsyncClient(base_url=url) as c:
            events = parse_sse((await c.post("/v1/stream", json=ASK)).content)
    result = next(d for _, e, d in events if e == "tool_result")
    assert result == {"tool_call_id": "c1", "name": "weather", "content": '{"city":"Oslo","sky":"clear"}',
                      "is_error": False}
    assert seen[0][0] == {"tool": "weather", "tool_call_id": "c1", "arguments": {"city": "Oslo"}}
    assert events[-1][2]["message"]["content"] == "Clear in Oslo" and events[-1][2]["steps"] == 2
    assert adapter.requests[0].tools[0].parameters["required"] == ("city",)


async def test_the_mock_scenario_runs_the_builtin_calculator_for_real():
    app = create_app(Settings())
    async with serve(app) as url, httpx.AsyncClient(base_url=url) as c:
        events = parse_sse((await c.post("/v1/stream", json={**ASK, "model": "mock/tool_call"})).content)
        metrics = (await c.get("/metrics")).text
    assert [e for _, e, _ in events] == ["start", "token", "tool_call", "tool_call", "tool_result", "token", "final"]
    assert 'foundry_tool_executions_total{outcome="ok",tool="calculator"} 1.0' in metrics
    assert events[-1][2]["steps"] == 2 and events[-1][2]["message"]["content"] == "Sum is 4"


async def test_an_http_tool_quoting_its_header_secret_back_has_it_redacted_everywhere(tmp_path):
    """The endpoint echoes the request's headers (and, for the second call, fails quoting them):
    the configured header value reaches no `tool_result`, transcript or run record."""
    secret = "tool-header-secret-0123456789"
    from starlette.applications import Starlette
    from starlette.requests import Request
    from starlette.responses import JSONResponse, PlainTextResponse
    from starlette.routing import Route

    async def echo(request: Request):
        body = await request.json()
        if body["tool_call_id"] == "c2":
            return PlainTextResponse(f"denied for token {request.headers['x-tool-token']}", status_code=500)
        return JSONResponse({"seen": dict(request.headers)})

    adapter = StepAdapter(calls_step(("c1", "echo", {}), ("c2", "echo", {})), answer_step("done"))
    async with serve(Starlette(routes=[Route("/echo", echo, methods=["POST"])])) as tool_url:
        config = HttpToolConfig(name="echo", url=f"{tool_url}/echo", timeout=5, headers={"x-tool-token": secret})
        settings = Settings(tools=[config], data_dir=str(tmp_path))
        async with serve(create_app(settings, adapters={"fake": adapter})) as url, httpx.AsyncClient(base_url=url) as c:
            r = await c.post("/v1/stream", json=ASK)
            stream_id = r.headers["x-stream-id"]
            transcript = (await c.get(f"/v1/stream/{stream_id}/transcript")).text
    # that gateway shut down (its records written); a new one on the same database serves them
    async with serve(create_app(settings, adapters={"fake": adapter})) as url, httpx.AsyncClient(base_url=url) as c:
        record = await c.get(f"/v1/runs/{stream_id}")
        stored = await c.get(f"/v1/stream/{stream_id}/transcript")
    assert stored.status_code == 200 and "[redacted]" in stored.text
    results = [d for _, e, d in parse_sse(r.content) if e == "tool_result"]
    assert len(results) == 2 and results[1]["is_error"]
    assert "[redacted]" in results[0]["content"] and "[redacted]" in results[1]["content"]
    assert record.status_code == 200
    for text in (r.text, transcript, record.text, stored.text, str(adapter.requests[1].messages)):
        assert secret not in text
