"""MCP servers as gateway-run tools, end to end under uvicorn: real MCP servers made with the
`mcp` SDK on loopback (tests/mcp_servers.py: stdio, Streamable HTTP, one that crashes, one that
answers oversized and malformed results), a scripted model and an OpenAI-format fake provider
calling them in one stream, the key's policy and the request's narrowing."""

from __future__ import annotations

import contextlib
import json
import sys
import tempfile
from collections.abc import AsyncIterator, Iterator
from typing import Any

import httpx
import pytest

from app.main import create_app
from app.settings import CompatibleProvider, Settings
from app.tools.mcp_config import McpServerConfig
from tests.mcp_support import http_mcp_server
from tests.support import HANG_GUARD, REPO, parse_sse, serve, until
from tests.test_tool_runs import ASK, StepAdapter, answer_step, calls_step
from tests.upstream_fakes import FakeUpstream, chat_stream

TOKEN = "basic-server-token-0123456789"


def stdio(name: str, kind: str, **kw: Any) -> McpServerConfig:
    return McpServerConfig(name=name, transport="stdio", command=sys.executable, args=["-m", "tests.mcp_servers", kind],
                           cwd=str(REPO), connect_timeout=60, **kw)


BASIC = stdio("basic", "basic", env_from={"BASIC_TOKEN": "MCP_TEST_BASIC_TOKEN"})


@pytest.fixture(autouse=True)
def _token(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MCP_TEST_BASIC_TOKEN", TOKEN)


@contextlib.asynccontextmanager
async def gateway(adapter: Any = None, **settings: Any) -> AsyncIterator[tuple[Any, httpx.AsyncClient]]:
    settings.setdefault("data_dir", tempfile.mkdtemp(prefix="foundry-mcp-"))
    app = create_app(Settings(**settings), adapters={"fake": adapter} if adapter is not None else None)
    async with serve(app) as url, httpx.AsyncClient(base_url=url, timeout=HANG_GUARD) as client:
        yield app, client


def kinds(events: list) -> list[str]:
    return [kind for _, kind, _ in events]


def results(events: list) -> list[dict]:
    return [data for _, kind, data in events if kind == "tool_result"]


async def test_a_scripted_model_calls_an_mcp_tool_and_continues_in_one_stream():
    adapter = StepAdapter(calls_step(("c1", "basic__add", {"a": 2, "b": 3})), answer_step("Five."))
    async with gateway(adapter, mcp_servers=[BASIC]) as (_, client):
        response = await client.post("/v1/stream", json=ASK)
        events = parse_sse(response.content)
    assert kinds(events).count("start") == 1 and kinds(events)[-1] == "final"
    assert results(events) == [{"tool_call_id": "c1", "name": "basic__add", "content": "5", "is_error": False}]
    final = events[-1][2]
    assert final["status"] == "ok" and final["steps"] == 2 and final["message"]["content"] == "Five."
    offered = {t.name: t for t in adapter.requests[0].tools}
    assert {"basic__add", "basic__echo", "basic__leak"} <= set(offered)
    assert offered["basic__add"].parameters["properties"]["a"]["type"] == "integer"  # the server's own schema
    assert adapter.requests[1].messages[-1].content == "5"  # the result went back to the model


def tool_call_stream(call_id: str, name: str, arguments: dict) -> bytes:
    """An OpenAI chat completions stream (as recorded) calling one tool, the arguments in two pieces."""
    raw = json.dumps(arguments)
    chunks = [
        {"choices": [{"index": 0, "delta": {"role": "assistant", "content": None, "tool_calls": [
            {"index": 0, "id": call_id, "type": "function", "function": {"name": name, "arguments": ""}}]}}]},
        {"choices": [{"index": 0, "delta": {"tool_calls": [{"index": 0, "function": {"arguments": raw[:5]}}]}}]},
        {"choices": [{"index": 0, "delta": {"tool_calls": [{"index": 0, "function": {"arguments": raw[5:]}}]}}]},
        {"choices": [{"index": 0, "delta": {}, "finish_reason": "tool_calls"}]},
    ]
    return b"".join(b"data: " + json.dumps({"id": "c", "object": "chat.completion.chunk", "model": "m", **c}).encode()
                    + b"\n\n" for c in chunks) + b"data: [DONE]\n\n"


async def test_an_openai_format_run_calls_an_mcp_tool_over_http_and_continues(http_server):
    fake = FakeUpstream("/v1/chat/completions", [tool_call_stream("call_1", "remote__lookup", {"word": "gateway"}),
                                                 chat_stream("The word has 7 letters.")])
    async with serve(fake.app()) as upstream:
        async with gateway(openai_api_key=None, upstream_max_retries=0, mcp_servers=[http_server],
                           providers=[CompatibleProvider(name="local", base_url=f"{upstream}/v1")]) as (app, client):
            response = await client.post("/v1/stream", json={**ASK, "model": "local/m"})
            events = parse_sse(response.content)
            transcript = (await client.get(f"/v1/stream/{response.headers['x-stream-id']}/transcript")).json()
    (result,) = results(events)
    assert result["name"] == "remote__lookup" and result["is_error"] is False
    assert json.loads(result["content"]) == {"word": "gateway", "length": 7}  # the server's text, as it wrote it
    assert events[-1][2]["status"] == "ok" and events[-1][2]["message"]["content"] == "The word has 7 letters."
    tools = [t["function"]["name"] for t in fake.requests[0].body["tools"]]
    assert "remote__lookup" in tools and "remote__whoami" in tools
    second = fake.requests[1].body["messages"]
    assert second[-1] == {"role": "tool", "tool_call_id": "call_1", "content": result["content"]}
    assert transcript["tool_calls"][0]["state"] == "has_output"


async def test_the_bearer_comes_from_the_environment_and_is_scrubbed_from_results(http_server):
    adapter = StepAdapter(calls_step(("c1", "remote__whoami", {})), answer_step("ok"))
    async with gateway(adapter, mcp_servers=[http_server]) as (_, client):
        events = parse_sse((await client.post("/v1/stream", json=ASK)).content)
    assert results(events)[0]["content"] == "[redacted]"  # the server quoted the bearer back: never released


async def test_secrets_quoted_back_by_a_server_are_redacted_and_failures_are_results():
    adapter = StepAdapter(calls_step(("c1", "basic__leak", {}), ("c2", "basic__broken", {}), ("c3", "basic__pixel", {})),
                          answer_step("ok"))
    async with gateway(adapter, mcp_servers=[BASIC]) as (_, client):
        events = parse_sse((await client.post("/v1/stream", json=ASK)).content)
        metrics = (await client.get("/metrics")).text
    by_id = {r["tool_call_id"]: r for r in results(events)}
    assert by_id["c1"] == {"tool_call_id": "c1", "name": "basic__leak", "content": "my token is [redacted]",
                           "is_error": False}
    assert by_id["c2"]["is_error"] is True and "broken" in by_id["c2"]["content"]
    assert by_id["c3"]["content"] == "a pixel\n[image: image/png, 9 bytes]"
    assert TOKEN not in json.dumps(events)
    assert 'foundry_tool_executions_total{outcome="error",tool="basic__broken"} 1.0' in metrics


async def test_oversized_and_malformed_results_are_contained():
    bad = stdio("bad", "bad", max_result_bytes=1 << 20)
    adapter = StepAdapter(calls_step(("c1", "bad__big", {})), calls_step(("c2", "bad__garbage", {})), answer_step("ok"))
    async with gateway(adapter, mcp_servers=[bad]) as (_, client):
        events = parse_sse((await client.post("/v1/stream", json=ASK)).content)
    first, second = results(events)
    assert first["is_error"] and "more than the 1048576 allowed" in first["content"]
    assert second["is_error"] and "not a tool result" in second["content"]
    assert events[-1][2]["status"] == "ok" and events[-1][2]["steps"] == 3


async def test_a_server_that_dies_fails_its_calls_cleanly_and_is_restarted():
    crash = stdio("crash", "crash", restart_backoff_seconds=0.1)
    adapter = StepAdapter(calls_step(("c1", "crash__die", {})), answer_step("gone"))
    async with gateway(adapter, mcp_servers=[crash]) as (app, client):
        events = parse_sse((await client.post("/v1/stream", json=ASK)).content)
        assert results(events)[0]["is_error"] and "closed the connection" in results(events)[0]["content"]
        assert events[-1][2]["status"] == "ok"
        server = app.state.gateway.tools.mcp.servers["crash"]
        await until(lambda: server.restarts >= 1 and server.state == "up")
        adapter.scripts = (calls_step(("c2", "crash__ok", {})), answer_step("back"))
        adapter.streams.clear()
        events = parse_sse((await client.post("/v1/stream", json=ASK)).content)
    assert results(events)[0]["is_error"] is False and results(events)[0]["content"].startswith("ok from ")


async def test_the_tool_list_is_refreshed_when_the_server_says_it_changed():
    adapter = StepAdapter(calls_step(("c1", "basic__grow", {})), answer_step("grown"))
    async with gateway(adapter, mcp_servers=[BASIC]) as (app, client):
        assert "basic__late" not in app.state.gateway.tools.mcp.tools
        await client.post("/v1/stream", json=ASK)
        await until(lambda: "basic__late" in app.state.gateway.tools.mcp.tools)


async def test_the_key_policy_limits_the_tools_and_a_request_narrows_but_never_widens():
    import hashlib

    keys = [{"name": "echoer", "hash": hashlib.sha256(b"fgw-echoer-key-aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa").hexdigest(),
             "mcp_tools": ["basic__echo", "basic__add"]}]
    adapter = StepAdapter(answer_step("hi"))
    headers = {"authorization": "Bearer fgw-echoer-key-aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa"}
    async with gateway(adapter, mcp_servers=[BASIC], keys=keys) as (_, client):
        for body, expected in ((ASK, {"basic__echo", "basic__add"}),
                               ({**ASK, "mcp_tools": ["basic__add", "basic__leak"]}, {"basic__add"}),
                               ({**ASK, "mcp_tools": ["*"]}, {"basic__echo", "basic__add"}),
                               ({**ASK, "mcp_tools": []}, set())):
            adapter.requests.clear()
            response = await client.post("/v1/stream", json=body, headers=headers)
            assert response.status_code == 200
            assert {t.name for t in adapter.requests[0].tools if "__" in t.name} == expected, body
        bad = await client.post("/v1/stream", json={**ASK, "mcp_tools": ["no spaces"]}, headers=headers)
    assert bad.status_code == 422 and "mcp_tools" in bad.text


def test_a_secret_variable_that_is_not_set_stops_the_start():
    from app.config_file import ConfigError

    missing = stdio("basic", "basic", env_from={"X": "MCP_TEST_NOT_SET_ANYWHERE"})
    with pytest.raises(ConfigError, match="MCP_TEST_NOT_SET_ANYWHERE is not set"):
        create_app(Settings(mcp_servers=[missing]))


def test_a_server_config_names_its_mistakes():
    with pytest.raises(ValueError, match="needs `command`"):
        McpServerConfig(name="x", transport="stdio")
    with pytest.raises(ValueError, match="needs `url`"):
        McpServerConfig(name="x", transport="http")
    with pytest.raises(ValueError, match="must not contain"):
        McpServerConfig(name="a__b", transport="stdio", command="x")


@pytest.fixture(scope="module")
def http_server() -> Iterator[McpServerConfig]:
    with http_mcp_server() as config:
        yield config


async def test_a_long_mcp_call_in_a_run_keeps_the_stream_alive_with_pings():
    # Progress notifications are not relayed (docs/mcp.md): the SSE keep-alive already covers a
    # long tool call, as any silence, with `: ping` comments between tool_call and tool_result.
    adapter = StepAdapter(calls_step(("c1", "basic__slow", {"seconds": 1.0})), answer_step("Done."))
    async with gateway(adapter, mcp_servers=[BASIC], ping_seconds=0.05) as (_, client):
        raw = (await client.post("/v1/stream", json=ASK)).content
    during = raw[raw.index(b"event: tool_call"):raw.index(b"event: tool_result")]
    assert b": ping" in during
    assert kinds(parse_sse(raw))[-1] == "final"
