"""Gateway tools (app/tools): the calculator, configuration, parallel execution, failures and
timeouts as error results, an HTTP tool on a loopback server."""

from __future__ import annotations

import asyncio

import httpx2
import pytest
from pydantic import ValidationError
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from app.core.messages import ToolCall
from app.settings import Settings
from app.tools import ToolError, build_tools, calculate
from app.tools.config import HttpToolConfig, PythonToolConfig
from tests.support import serve

# -- tools the tests register by import path (tests.test_tools:<name>) --------------------------

started: dict[str, asyncio.Event] = {}
cancelled: list[str] = []


async def waits_for_peer(name: str, peer: str) -> str:
    """Returns only once its peer started too: two of these finish only if they run concurrently."""
    started.setdefault(name, asyncio.Event()).set()
    await started.setdefault(peer, asyncio.Event()).wait()
    return f"{name} done"


def fails(**arguments: object) -> str:
    raise RuntimeError("the database is down")


def refuses(**arguments: object) -> str:
    raise ToolError("city not found")


async def never_returns(**arguments: object) -> str:
    await asyncio.Event().wait()
    return "unreachable"


async def blocks(name: str) -> str:
    """Says it started, then waits until cancelled (and records that it was)."""
    started.setdefault(name, asyncio.Event()).set()
    try:
        await asyncio.Event().wait()
    finally:
        cancelled.append(name)
    return "unreachable"


def structured(city: str) -> dict:
    return {"city": city, "temperature": -3}


# -- the calculator ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("expression", "value"),
    [("2 + 2", "4"), ("(1 + 2) * 3 - 4 / 2", "7"), ("7 // 2", "3"), ("7 % 4", "3"), ("-2 ** 2", "-4"),
     ("0.1 + 0.2", "0.3"), ("2 ** 100", str(2**100)), ("1 / 3", "0.333333333333333"), ("+5", "5")],
)
def test_calculator_computes_arithmetic(expression, value):
    assert calculate(expression) == value


@pytest.mark.parametrize(
    ("expression", "message"),
    [
        ("__import__('os').system('true')", "unsupported"),
        ("abs(-1)", "unsupported"),
        ("x + 1", "unsupported"),
        ("'a' * 3", "unsupported"),
        ("True + 1", "unsupported"),
        ("1 / 0", "division by zero"),
        ("9 ** 9 ** 9", "exponent"),
        ("2 ** 5000", "too large"),
        ("(10 ** 1000) * (10 ** 1000)", "too large"),
        ("10.0 ** 400", "too large"),
        ("(-8) ** 0.5", "not a real number"),
        ("1 +", "not an arithmetic expression"),
        ("1" * 2000, "longer than"),
        ("", "non-empty"),
    ],
)
def test_calculator_refuses_what_is_not_bounded_arithmetic(expression, message):
    with pytest.raises(ToolError, match=message):
        calculate(expression)


# -- configuration ----------------------------------------------------------------------------


def test_configuration_is_checked_when_loaded():
    with pytest.raises(ValidationError, match="no built-in tool"):
        Settings(tools=[{"kind": "builtin", "name": "shell"}])
    with pytest.raises(ValidationError, match="registered twice"):
        Settings(tools=[{"kind": "builtin", "name": "calculator"}] * 2)
    with pytest.raises(ValidationError, match="http:// or https://"):
        Settings(tools=[{"kind": "http", "name": "x", "url": "file:///etc/passwd"}])
    with pytest.raises(ValidationError, match="required names missing"):
        Settings(tools=[{"kind": "python", "name": "x", "target": "a:b",
                         "parameters": {"type": "object", "properties": {}, "required": ["q"]}}])
    with pytest.raises(ValueError, match="tools: x: cannot import"):
        build_tools([PythonToolConfig(name="x", target="no_such_module:f")])
    with pytest.raises(ValueError, match="has no attribute"):
        build_tools([PythonToolConfig(name="x", target="tests.test_tools:missing")])


def test_tools_are_scoped_by_provider_and_a_callers_tool_of_the_same_name_wins():
    registry = build_tools(Settings().tools)
    assert registry.for_run("mock", []).runs("calculator")
    assert not registry.for_run("openai", [])  # the default calculator serves the mock provider only
    assert not registry.for_run("mock", ["calculator"]).runs("calculator")


# -- execution --------------------------------------------------------------------------------


def python_tools(**targets: str):
    outcomes: list[tuple[str, str]] = []
    configs = [PythonToolConfig(name=name, target=f"tests.test_tools:{target}", timeout=0.05 if target ==
                                "never_returns" else 10) for name, target in targets.items()]
    return build_tools(configs, observer=lambda tool, outcome: outcomes.append((tool, outcome))), outcomes


async def run_all(registry, *calls: ToolCall):
    execution = registry.for_run("any", []).start(calls)
    out = []
    try:
        while not execution.done:
            out.extend(await execution.wait())
    finally:
        await execution.aclose()
    return out


async def test_calls_of_one_turn_run_concurrently():
    started.clear()
    registry, outcomes = python_tools(a="waits_for_peer", b="waits_for_peer")
    results = await run_all(registry, ToolCall(id="1", name="a", arguments={"name": "a", "peer": "b"}),
                            ToolCall(id="2", name="b", arguments={"name": "b", "peer": "a"}))
    assert sorted(r.content for r in results) == ["a done", "b done"]
    assert sorted(outcomes) == [("a", "ok"), ("b", "ok")]


async def test_failures_and_timeouts_are_error_results_with_the_message():
    registry, outcomes = python_tools(broken="fails", picky="refuses", slow="never_returns", weather="structured")
    results = await run_all(
        registry,
        ToolCall(id="1", name="broken"), ToolCall(id="2", name="picky"), ToolCall(id="3", name="slow"),
        ToolCall(id="4", name="weather", arguments={"town": "Oslo"}), ToolCall(id="5", name="weather",
                                                                             arguments={"city": "Oslo"}),
    )
    by_id = {r.tool_call_id: r for r in results}
    assert (by_id["1"].is_error, by_id["1"].content) == (True, "RuntimeError: the database is down")
    assert (by_id["2"].is_error, by_id["2"].content) == (True, "city not found")
    assert (by_id["3"].is_error, by_id["3"].content) == (True, "tool slow timed out after 0.05s")
    assert by_id["4"].is_error and "unexpected keyword argument 'town'" in by_id["4"].content
    assert (by_id["5"].is_error, by_id["5"].content) == (False, '{"city":"Oslo","temperature":-3}')
    assert sorted(outcomes) == [("broken", "error"), ("picky", "error"), ("slow", "timeout"),
                                ("weather", "error"), ("weather", "ok")]


async def test_closing_an_execution_cancels_the_running_calls():
    started.clear()
    cancelled.clear()
    registry, outcomes = python_tools(slow="blocks")
    execution = registry.for_run("any", []).start([ToolCall(id="1", name="slow", arguments={"name": "s"})])
    await started.setdefault("s", asyncio.Event()).wait()
    await execution.aclose()
    assert execution.done and cancelled == ["s"] and outcomes == [("slow", "cancelled")]


# -- an HTTP tool on a loopback server --------------------------------------------------------


def tool_server(seen: list) -> Starlette:
    async def weather(request: Request) -> Response:
        body = await request.json()
        seen.append((body, request.headers.get("authorization")))
        if body["arguments"].get("city") == "nowhere":
            return JSONResponse({"error": "unknown city"}, status_code=404)
        if body["arguments"].get("city") == "garbage":
            return Response(b"<html>oops</html>", media_type="text/html")
        return JSONResponse({"city": body["arguments"]["city"], "sky": "clear"})

    return Starlette(routes=[Route("/weather", weather, methods=["POST"])])


async def test_http_tool_posts_json_and_takes_json_back():
    seen: list = []
    async with serve(tool_server(seen)) as url:
        config = HttpToolConfig(name="weather", url=f"{url}/weather", timeout=5, headers={"authorization": "Bearer t0k"})
        registry = build_tools([config])
        try:
            results = await run_all(
                registry, ToolCall(id="1", name="weather", arguments={"city": "Oslo"}),
                ToolCall(id="2", name="weather", arguments={"city": "nowhere"}),
                ToolCall(id="3", name="weather", arguments={"city": "garbage"}),
            )
        finally:
            await registry.aclose()
    by_id = {r.tool_call_id: r for r in results}
    assert (by_id["1"].is_error, by_id["1"].content) == (False, '{"city":"Oslo","sky":"clear"}')
    assert by_id["2"].is_error and by_id["2"].content == 'tool endpoint answered HTTP 404: {"error":"unknown city"}'
    assert by_id["3"].is_error and "not JSON" in by_id["3"].content
    bodies = sorted(seen, key=lambda s: s[0]["tool_call_id"])
    assert bodies[0] == ({"tool": "weather", "tool_call_id": "1", "arguments": {"city": "Oslo"}}, "Bearer t0k")


async def test_an_unreachable_http_tool_is_an_error_result():
    client = httpx2.AsyncClient(transport=httpx2.MockTransport(lambda request: (_ for _ in ()).throw(
        httpx2.ConnectError("refused"))))
    registry = build_tools([HttpToolConfig(name="w", url="http://127.0.0.1:9/w")], client=client)
    [result] = await run_all(registry, ToolCall(id="1", name="w"))
    await registry.aclose()
    assert result.is_error and result.content == "tool endpoint unreachable (ConnectError)"
