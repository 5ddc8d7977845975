"""The gateway as an MCP server (`/mcp`), end to end under uvicorn in front of real MCP servers:
the official `mcp` client SDK listing and calling through it, the key's policy, bad input as
JSON-RPC errors, the body limit, every call recorded and counted, rpm per key, and a session
opened on one replica continuing on another through Redis."""

from __future__ import annotations

import contextlib
import hashlib
import json
import tempfile
from collections.abc import AsyncIterator
from typing import Any

import httpx
import httpx2
import pytest
from mcp.client import Client
from mcp.client.streamable_http import streamable_http_client
from mcp.shared.exceptions import MCPError

from app.main import create_app
from app.settings import Settings
from tests.auth_support import ADMIN, pin_the_minute, redis_url  # noqa: F401 - fixture
from tests.support import HANG_GUARD, serve
from tests.test_mcp import BASIC, TOKEN, _token  # noqa: F401 - fixture

LIMITED = "fgw-limited-key-" + "b" * 31
OTHER = "fgw-other-key-" + "c" * 33
KEYS = [{"name": "limited", "hash": hashlib.sha256(LIMITED.encode()).hexdigest(), "id": "limited",
         "mcp_tools": ["basic__echo", "basic__add"], "rpm": 3},
        {"name": "other", "hash": hashlib.sha256(OTHER.encode()).hexdigest(), "id": "other"}]
INIT = {"jsonrpc": "2.0", "id": 1, "method": "initialize",
        "params": {"protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "t", "version": "1"}}}


def auth(key: str) -> dict[str, str]:
    return {"authorization": f"Bearer {key}", "accept": "application/json, text/event-stream"}


@contextlib.asynccontextmanager
async def gateway(**settings: Any) -> AsyncIterator[tuple[Any, str]]:
    settings.setdefault("data_dir", tempfile.mkdtemp(prefix="foundry-mcp-"))
    app = create_app(Settings(admin_key=ADMIN, keys=KEYS, mcp_servers=[BASIC], **settings))
    async with serve(app) as url:
        yield app, url


@contextlib.asynccontextmanager
async def mcp_client(url: str, key: str) -> AsyncIterator[Client]:
    """The official SDK's client on /mcp with the key (its default mode: it probes, then initializes)."""
    async with httpx2.AsyncClient(headers={"authorization": f"Bearer {key}"}, timeout=HANG_GUARD) as http:
        async with Client(streamable_http_client(f"{url}/mcp", http_client=http)) as client:
            yield client


async def session(client: httpx.AsyncClient, key: str) -> str:
    response = await client.post("/mcp", json=INIT, headers=auth(key))
    assert response.status_code == 200, response.text
    assert response.json()["result"]["serverInfo"]["name"] == "foundry-gateway"
    return response.headers["mcp-session-id"]


async def rpc(client: httpx.AsyncClient, key: str, sid: str, method: str, params: dict | None = None,
              rid: int = 2) -> httpx.Response:
    return await client.post("/mcp", json={"jsonrpc": "2.0", "id": rid, "method": method, "params": params or {}},
                             headers={**auth(key), "mcp-session-id": sid})


async def test_the_official_client_lists_and_calls_the_tools_its_key_may_use(capsys):
    async with gateway() as (app, url):
        async with mcp_client(url, LIMITED) as client:
            listed = await client.list_tools()
            assert sorted(t.name for t in listed.tools) == ["basic__add", "basic__echo"]
            result = await client.call_tool("basic__echo", {"text": "hi"})
            assert result.is_error is False and result.content[0].text == "echo: hi"
            with pytest.raises(MCPError, match="Unknown tool: basic__leak"):  # outside its policy: unknown
                await client.call_tool("basic__leak", {})
            assert (await client.list_prompts()).prompts == []  # the key may not use the whole server
        async with mcp_client(url, ADMIN) as client:
            names = {t.name for t in (await client.list_tools()).tools}
            assert {"basic__leak", "basic__echo", "basic__slow"} <= names
            leaked = await client.call_tool("basic__leak", {})
            assert leaked.content[0].text == "my token is [redacted]"
            broken = await client.call_tool("basic__broken", {})
            assert broken.is_error is True
            prompts = (await client.list_prompts()).prompts
            assert [p.name for p in prompts] == ["basic__greet"]
            prompt = await client.get_prompt("basic__greet", {"name": "Ada"})
            assert "Ada" in prompt.messages[0].content.text
            resources = (await client.list_resources()).resources
            assert [str(r.uri) for r in resources] == ["note://readme"]
            read = await client.read_resource("note://readme")
            assert read.contents[0].text == "the readme text"
        async with httpx.AsyncClient(base_url=url) as plain:
            metrics = (await plain.get("/metrics")).text
    assert 'foundry_mcp_calls_total{outcome="ok",server="basic"} 2.0' in metrics
    assert 'foundry_mcp_calls_total{outcome="error",server="basic"} 1.0' in metrics
    lines = [json.loads(line) for line in capsys.readouterr().out.splitlines() if '"mcp_call"' in line]
    echo = next(line for line in lines if line["tool"] == "echo")
    assert echo["key_id"] == "limited" and echo["server"] == "basic" and echo["status"] == "ok"
    assert echo["args_sha256"] == hashlib.sha256(b'{"text":"hi"}').hexdigest() and echo["bytes"] > 0
    assert "duration_ms" in echo
    assert TOKEN not in json.dumps(lines)


async def test_bad_input_gets_json_rpc_errors_and_http_statuses():
    async with gateway(max_body_bytes=4096) as (_, url), httpx.AsyncClient(base_url=url, timeout=HANG_GUARD) as c:
        assert (await c.post("/mcp", json=INIT)).status_code == 401  # no key
        sid = await session(c, LIMITED)
        unknown = (await rpc(c, LIMITED, sid, "tools/call", {"name": "nope__x", "arguments": {}})).json()
        assert unknown["error"]["code"] == -32602 and "Unknown tool" in unknown["error"]["message"]
        bad_params = (await rpc(c, LIMITED, sid, "tools/call", {"name": 5})).json()
        assert bad_params["error"]["code"] == -32602
        method = (await rpc(c, LIMITED, sid, "sampling/whatever")).json()
        assert method["error"]["code"] == -32601
        parse = await c.post("/mcp", content=b"{not json", headers={**auth(LIMITED), "content-type": "application/json"})
        assert parse.status_code == 400 and parse.json()["error"]["code"] == -32700
        batch = await c.post("/mcp", json=[INIT], headers=auth(LIMITED))
        assert batch.status_code == 400 and batch.json()["error"]["code"] == -32600
        no_session = await c.post("/mcp", json={"jsonrpc": "2.0", "id": 3, "method": "tools/list"}, headers=auth(LIMITED))
        assert no_session.status_code == 400
        assert (await rpc(c, OTHER, sid, "tools/list")).status_code == 404  # another key's session
        assert (await rpc(c, LIMITED, "made-up", "tools/list")).status_code == 404
        notified = await c.post("/mcp", json={"jsonrpc": "2.0", "method": "notifications/initialized"},
                                headers={**auth(LIMITED), "mcp-session-id": sid})
        assert notified.status_code == 202
        huge = {"text": "x" * 8000}
        assert (await rpc(c, LIMITED, sid, "tools/call", {"name": "basic__echo", "arguments": huge})).status_code == 413
        assert (await c.get("/mcp", headers={**auth(LIMITED), "mcp-session-id": sid})).status_code == 405
        assert (await c.delete("/mcp", headers={**auth(LIMITED), "mcp-session-id": sid})).status_code == 204
        assert (await rpc(c, LIMITED, sid, "tools/list")).status_code == 404  # ended


async def test_tool_calls_through_mcp_count_against_the_keys_rpm():
    async with gateway() as (app, url), httpx.AsyncClient(base_url=url, timeout=HANG_GUARD) as c:
        pin_the_minute(app)
        sid = await session(c, LIMITED)
        call = {"name": "basic__add", "arguments": {"a": 1, "b": 2}}
        for rid in range(3):
            answer = await rpc(c, LIMITED, sid, "tools/call", call, rid=rid)
            assert answer.status_code == 200 and answer.json()["result"]["content"][0]["text"] == "3"
        assert (await rpc(c, LIMITED, sid, "tools/list")).status_code == 200  # listing is not a call
        refused = await rpc(c, LIMITED, sid, "tools/call", call, rid=9)
    assert refused.status_code == 429 and refused.json()["error"]["code"] == "rate_limited"


async def test_a_session_opened_on_one_replica_continues_on_another_through_redis(redis_url):  # noqa: F811
    async with gateway(redis_url=redis_url) as (_, first), gateway(redis_url=redis_url) as (_, second):
        async with httpx.AsyncClient(base_url=first, timeout=HANG_GUARD) as a, \
                httpx.AsyncClient(base_url=second, timeout=HANG_GUARD) as b:
            sid = await session(a, LIMITED)
            listed = await rpc(b, LIMITED, sid, "tools/list")
            assert listed.status_code == 200
            assert [t["name"] for t in listed.json()["result"]["tools"]] == ["basic__add", "basic__echo"]
            called = await rpc(b, LIMITED, sid, "tools/call", {"name": "basic__echo", "arguments": {"text": "b"}})
            assert called.json()["result"]["content"][0]["text"] == "echo: b"
            assert (await rpc(b, OTHER, sid, "tools/list")).status_code == 404


async def test_a_call_through_mcp_is_an_execute_tool_span_with_the_genai_attributes():
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

    from app.tracing import Tracing

    exporter = InMemorySpanExporter()
    app = create_app(Settings(admin_key=ADMIN, keys=KEYS, mcp_servers=[BASIC], data_dir=tempfile.mkdtemp()),
                     tracing=Tracing(exporter=exporter, batch=False))
    async with serve(app) as url, httpx.AsyncClient(base_url=url, timeout=HANG_GUARD) as c:
        sid = await session(c, LIMITED)
        await rpc(c, LIMITED, sid, "tools/call", {"name": "basic__echo", "arguments": {"text": "t"}})
    (span,) = [s for s in exporter.get_finished_spans() if s.name == "execute_tool basic__echo"]
    assert span.attributes["gen_ai.operation.name"] == "execute_tool"
    assert span.attributes["gen_ai.tool.name"] == "basic__echo"
    assert span.attributes["foundry.tool.outcome"] == "ok"
